//! Which manifests an append merges: Java's `MergeAppend` policy (`ManifestMergeManager`), as a
//! pure function of the manifests' partition spec ids and lengths and of three table properties.
//!
//! Without merging every commit adds one manifest to the manifest list, and readers plan a scan
//! by opening every manifest: after thousands of commits planning takes seconds. Java merges on
//! every append by default; so do we, with the same properties and defaults, so a table behaves
//! the same whichever of the two writes it.

use std::collections::{BTreeMap, HashMap};

/// Table property: merge manifests on append (default true).
pub(crate) const MERGE_ENABLED: &str = "commit.manifest-merge.enabled";
/// Table property: the bin holding the new manifest is merged only from this many manifests on.
pub(crate) const MIN_COUNT_TO_MERGE: &str = "commit.manifest.min-count-to-merge";
/// Table property: the size a merged manifest aims at, in bytes.
pub(crate) const TARGET_SIZE_BYTES: &str = "commit.manifest.target-size-bytes";

pub(crate) const DEFAULT_MERGE_ENABLED: bool = true;
pub(crate) const DEFAULT_MIN_COUNT_TO_MERGE: usize = 100;
pub(crate) const DEFAULT_TARGET_SIZE_BYTES: u64 = 8 * 1024 * 1024;

/// The most entries one merged manifest takes. The library writes a manifest from entries held in
/// memory, and a decoded entry with column metrics costs ~3 KB: a merge of Java's 8 MiB target
/// (~25,000 entries) would hold ~80 MB. At 2,048 entries a merge holds ~6 MB, and a table of a
/// million files lists ~500 merged manifests. Bins close at whichever of this and
/// `commit.manifest.target-size-bytes` comes first.
pub(crate) const MAX_MERGED_ENTRIES: u64 = 2048;

/// What the table's properties ask of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergePolicy {
    pub enabled: bool,
    pub min_count: usize,
    pub target_size: u64,
}

impl Default for MergePolicy {
    fn default() -> Self {
        MergePolicy {
            enabled: DEFAULT_MERGE_ENABLED,
            min_count: DEFAULT_MIN_COUNT_TO_MERGE,
            target_size: DEFAULT_TARGET_SIZE_BYTES,
        }
    }
}

/// A property value that could not be read; its default is used instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub key: &'static str,
    pub value: String,
    pub default: String,
}

/// The policy `properties` ask for. A value that does not parse falls back to its default (as
/// Java's `PropertyUtil` would not: it fails the commit; a registrar stopping on a typo in a
/// tuning property would be worse than merging with the default) and is reported.
pub(crate) fn policy_from_properties(
    properties: &HashMap<String, String>,
) -> (MergePolicy, Vec<Unreadable>) {
    let mut policy = MergePolicy::default();
    let mut unreadable = Vec::new();
    let read = |key: &str| properties.get(key).map(String::as_str);
    // Java accepts "true"/"false" in any case (Boolean.parseBoolean treats anything else as
    // false); anything but those two is reported here instead of silently meaning false.
    if let Some(value) = read(MERGE_ENABLED) {
        match value.trim().to_ascii_lowercase().as_str() {
            "true" => policy.enabled = true,
            "false" => policy.enabled = false,
            _ => unreadable.push(Unreadable {
                key: MERGE_ENABLED,
                value: value.to_string(),
                default: DEFAULT_MERGE_ENABLED.to_string(),
            }),
        }
    }
    if let Some(value) = read(MIN_COUNT_TO_MERGE) {
        match value.trim().parse::<usize>() {
            Ok(n) => policy.min_count = n,
            Err(_) => unreadable.push(Unreadable {
                key: MIN_COUNT_TO_MERGE,
                value: value.to_string(),
                default: DEFAULT_MIN_COUNT_TO_MERGE.to_string(),
            }),
        }
    }
    if let Some(value) = read(TARGET_SIZE_BYTES) {
        match value.trim().parse::<u64>() {
            Ok(n) => policy.target_size = n,
            Err(_) => unreadable.push(Unreadable {
                key: TARGET_SIZE_BYTES,
                value: value.to_string(),
                default: DEFAULT_TARGET_SIZE_BYTES.to_string(),
            }),
        }
    }
    (policy, unreadable)
}

/// A data manifest of the new snapshot, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub spec_id: i32,
    /// The manifest file's length in bytes (the bin-packing weight).
    pub length: u64,
    /// Its live entries (added and existing files), bounded per merge by [`MAX_MERGED_ENTRIES`].
    pub entries: u64,
    /// False when this client cannot rewrite the manifest (e.g. its spec no longer binds to the
    /// current schema): it is carried as it is.
    pub mergeable: bool,
}

/// One manifest of the new manifest list, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Planned {
    /// Carry candidate `i` as it is.
    Keep(usize),
    /// Rewrite these candidates (in this order) into one manifest of `spec_id`.
    Merge { spec_id: i32, members: Vec<usize> },
}

/// The data manifests of the new snapshot: `candidates[..new]` are this append's new manifests
/// (its own files' manifest, and the fleet's intents it carries), the rest the current
/// snapshot's data manifests in manifest-list order.
///
/// As Java: manifests are grouped by spec id (highest first); within a group they are packed
/// from the end (oldest first) into bins of up to `target_size` bytes, so the bin that stays
/// under-filled is the newest one, holding the new manifests; a bin of one manifest is kept; the
/// bin holding a new manifest is merged only when it has at least `min_count` manifests (so
/// small appends accumulate before one rewrite); every other bin of several is merged. The
/// caller keeps the new manifests themselves out of a merge (see `producer`).
pub(crate) fn plan(policy: &MergePolicy, candidates: &[Candidate], new: usize) -> Vec<Planned> {
    if !policy.enabled || candidates.is_empty() {
        return (0..candidates.len()).map(Planned::Keep).collect();
    }
    let mut groups: BTreeMap<std::cmp::Reverse<i32>, Vec<usize>> = BTreeMap::new();
    for (i, c) in candidates.iter().enumerate() {
        groups
            .entry(std::cmp::Reverse(c.spec_id))
            .or_default()
            .push(i);
    }
    let mut out = Vec::new();
    for (std::cmp::Reverse(spec_id), members) in groups {
        // Manifests this client cannot rewrite split the group: each run between them is packed
        // on its own, so the kept manifest stays where it was.
        let mut run: Vec<usize> = Vec::new();
        for i in members {
            if candidates[i].mergeable {
                run.push(i);
            } else {
                plan_run(policy, candidates, new, spec_id, &run, &mut out);
                run.clear();
                out.push(Planned::Keep(i));
            }
        }
        plan_run(policy, candidates, new, spec_id, &run, &mut out);
    }
    out
}

fn plan_run(
    policy: &MergePolicy,
    candidates: &[Candidate],
    new: usize,
    spec_id: i32,
    run: &[usize],
    out: &mut Vec<Planned>,
) {
    let weights: Vec<u64> = run.iter().map(|&i| candidates[i].length).collect();
    let entries: Vec<u64> = run.iter().map(|&i| candidates[i].entries).collect();
    for bin in pack_end_capped(&weights, &entries, policy.target_size, MAX_MERGED_ENTRIES) {
        let members: Vec<usize> = bin.iter().map(|&j| run[j]).collect();
        let holds_new = members.iter().any(|&i| i < new);
        if members.len() == 1 || (holds_new && members.len() < policy.min_count) {
            out.extend(members.into_iter().map(Planned::Keep));
        } else {
            out.push(Planned::Merge { spec_id, members });
        }
    }
}

/// Java's `ListPacker(target, lookback 1, largestBinFirst false).packEnd`: greedy packing of the
/// reversed list, one open bin at a time (a look-back of 1 never reorders), each bin and the
/// list of bins reversed back. Returns bins of indexes into `weights`, in list order. An item
/// heavier than `target` gets a bin of its own.
#[cfg(test)]
fn pack_end(weights: &[u64], target: u64) -> Vec<Vec<usize>> {
    pack_end_capped(weights, &vec![0; weights.len()], target, u64::MAX)
}

/// `pack_end` where a bin also holds at most `max_entries` entries (`entries[i]` per item; an
/// item with more gets a bin of its own).
pub(crate) fn pack_end_capped(
    weights: &[u64],
    entries: &[u64],
    target: u64,
    max_entries: u64,
) -> Vec<Vec<usize>> {
    let mut bins: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut open_weight: u64 = 0;
    let mut open_entries: u64 = 0;
    for i in (0..weights.len()).rev() {
        let w = weights[i];
        let e = entries.get(i).copied().unwrap_or(0);
        if !open.is_empty()
            && open_weight.saturating_add(w) <= target
            && open_entries.saturating_add(e) <= max_entries
        {
            open.push(i);
            open_weight = open_weight.saturating_add(w);
            open_entries = open_entries.saturating_add(e);
        } else {
            if !open.is_empty() {
                bins.push(std::mem::take(&mut open));
            }
            open.push(i);
            open_weight = w;
            open_entries = e;
        }
    }
    if !open.is_empty() {
        bins.push(open);
    }
    for bin in &mut bins {
        bin.reverse();
    }
    bins.reverse();
    bins
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(spec_id: i32, length: u64) -> Candidate {
        Candidate {
            spec_id,
            length,
            entries: 1,
            mergeable: true,
        }
    }

    fn policy(min_count: usize, target_size: u64) -> MergePolicy {
        MergePolicy {
            enabled: true,
            min_count,
            target_size,
        }
    }

    #[test]
    fn defaults_are_javas() {
        let (p, bad) = policy_from_properties(&HashMap::new());
        assert_eq!(
            p,
            MergePolicy {
                enabled: true,
                min_count: 100,
                target_size: 8 * 1024 * 1024
            }
        );
        assert!(bad.is_empty());
    }

    #[test]
    fn properties_are_read_and_bad_values_fall_back_with_a_report() {
        let props: HashMap<String, String> = [
            (MERGE_ENABLED, "FALSE"),
            (MIN_COUNT_TO_MERGE, "5"),
            (TARGET_SIZE_BYTES, "1024"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (p, bad) = policy_from_properties(&props);
        assert_eq!(
            p,
            MergePolicy {
                enabled: false,
                min_count: 5,
                target_size: 1024
            }
        );
        assert!(bad.is_empty());

        let props: HashMap<String, String> = [
            (MERGE_ENABLED, "yes"),
            (MIN_COUNT_TO_MERGE, "-3"),
            (TARGET_SIZE_BYTES, "8MB"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (p, bad) = policy_from_properties(&props);
        assert_eq!(p, MergePolicy::default());
        let keys: Vec<&str> = bad.iter().map(|u| u.key).collect();
        assert_eq!(
            keys,
            vec![MERGE_ENABLED, MIN_COUNT_TO_MERGE, TARGET_SIZE_BYTES]
        );
        assert_eq!(bad[1].value, "-3");
        assert_eq!(bad[1].default, "100");
    }

    #[test]
    fn pack_end_fills_from_the_end_and_leaves_the_first_bin_short() {
        // Packed oldest (last) first: 4+4 = 8 fills a bin, then 3+3+2 = 8 the next.
        let bins = pack_end(&[2, 3, 3, 4, 4], 8);
        assert_eq!(bins, vec![vec![0, 1, 2], vec![3, 4]]);
        let bins = pack_end(&[1, 5, 5, 5], 10);
        assert_eq!(bins, vec![vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn a_bin_closes_at_the_entry_cap_before_the_target_size() {
        // Five small manifests of 3 entries each, cap 6: bins of two from the end.
        let bins = pack_end_capped(&[1; 5], &[3; 5], 100, 6);
        assert_eq!(bins, vec![vec![0], vec![1, 2], vec![3, 4]]);
        // An item over the cap stands alone.
        let bins = pack_end_capped(&[1, 1, 1], &[1, 10, 1], 100, 6);
        assert_eq!(bins, vec![vec![0], vec![1], vec![2]]);
        // A merged manifest at the cap is never merged again: it stays alone in its bin.
        let p = policy(2, 1 << 30);
        let mut cs = vec![c(0, 10), c(0, 10), c(0, 10)];
        cs[2].entries = MAX_MERGED_ENTRIES;
        assert_eq!(
            plan(&p, &cs, 1),
            vec![
                Planned::Merge {
                    spec_id: 0,
                    members: vec![0, 1]
                },
                Planned::Keep(2)
            ]
        );
    }

    #[test]
    fn pack_end_gives_an_oversized_item_its_own_bin() {
        assert_eq!(
            pack_end(&[1, 20, 1, 1], 10),
            vec![vec![0], vec![1], vec![2, 3]]
        );
        assert_eq!(pack_end(&[], 10), Vec::<Vec<usize>>::new());
        // A target of 0 packs nothing together.
        assert_eq!(pack_end(&[1, 1], 0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn disabled_keeps_every_manifest_in_order() {
        let p = MergePolicy {
            enabled: false,
            ..policy(2, 100)
        };
        let cands = [c(0, 1), c(0, 1), c(0, 1)];
        assert_eq!(
            plan(&p, &cands, 1),
            vec![Planned::Keep(0), Planned::Keep(1), Planned::Keep(2)]
        );
    }

    #[test]
    fn the_new_manifests_bin_waits_for_min_count() {
        let cands = [c(0, 1), c(0, 1), c(0, 1), c(0, 1)];
        assert_eq!(
            plan(&policy(5, 100), &cands, 1),
            vec![
                Planned::Keep(0),
                Planned::Keep(1),
                Planned::Keep(2),
                Planned::Keep(3)
            ]
        );
        let cands = [c(0, 1), c(0, 1), c(0, 1), c(0, 1), c(0, 1)];
        assert_eq!(
            plan(&policy(5, 100), &cands, 1),
            vec![Planned::Merge {
                spec_id: 0,
                members: vec![0, 1, 2, 3, 4]
            }]
        );
    }

    #[test]
    fn full_older_bins_are_merged_whatever_their_count() {
        // target 10: from the end, [6,4] fills a bin of two, [3,3,3] the new manifest's bin.
        let cands = [c(0, 3), c(0, 3), c(0, 3), c(0, 4), c(0, 6)];
        assert_eq!(
            plan(&policy(100, 10), &cands, 1),
            vec![
                Planned::Keep(0),
                Planned::Keep(1),
                Planned::Keep(2),
                Planned::Merge {
                    spec_id: 0,
                    members: vec![3, 4]
                }
            ]
        );
    }

    #[test]
    fn a_lone_large_manifest_is_kept() {
        let cands = [c(0, 1), c(0, 50), c(0, 1)];
        // from the end: [1] then 50 does not fit -> new bin [50], then 1 does not fit -> [1].
        assert_eq!(
            plan(&policy(2, 10), &cands, 1),
            vec![Planned::Keep(0), Planned::Keep(1), Planned::Keep(2)]
        );
    }

    #[test]
    fn groups_by_spec_highest_first_and_merges_other_specs_freely() {
        // The new manifest is spec 1; two old spec-0 manifests merge although min_count is high:
        // their bin does not hold the new manifest.
        let cands = [c(1, 1), c(0, 1), c(1, 1), c(0, 1)];
        assert_eq!(
            plan(&policy(100, 10), &cands, 1),
            vec![
                Planned::Keep(0),
                Planned::Keep(2),
                Planned::Merge {
                    spec_id: 0,
                    members: vec![1, 3]
                }
            ]
        );
    }

    #[test]
    fn unmergeable_manifests_are_kept_in_place() {
        let mut cands = vec![c(0, 1), c(0, 1), c(0, 1), c(0, 1)];
        cands[2].mergeable = false;
        assert_eq!(
            plan(&policy(2, 10), &cands, 1),
            vec![
                Planned::Merge {
                    spec_id: 0,
                    members: vec![0, 1]
                },
                Planned::Keep(2),
                Planned::Keep(3)
            ]
        );
    }

    #[test]
    fn every_candidate_appears_exactly_once() {
        // Any policy, any lengths: the plan is a partition of the candidates.
        let lengths = [5u64, 1, 9, 2, 2, 7, 3, 1, 1, 8, 4];
        for min_count in [0, 1, 2, 3, 50] {
            for target in [0u64, 1, 5, 10, 100] {
                let cands: Vec<Candidate> = lengths
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| c((i % 3) as i32, l))
                    .collect();
                let mut seen: Vec<usize> = plan(&policy(min_count, target), &cands, 1)
                    .into_iter()
                    .flat_map(|p| match p {
                        Planned::Keep(i) => vec![i],
                        Planned::Merge { members, .. } => {
                            assert!(members.len() > 1);
                            members
                        }
                    })
                    .collect();
                seen.sort();
                assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
            }
        }
    }
}
