//! The codec of `thadam.carried-marks`: for a snapshot that carried other nodes' intents, the
//! watermark that covers each carried log's segments once it reaches a seq. Snapshot retention
//! expires such a snapshot only while every one of them does (`table::retention`).
//!
//! It is the largest part of a carrying snapshot's summary, and metadata.json keeps every
//! summary until the snapshot is expired: written as `<property>=<seq>` per intent, a 128-node
//! fleet's snapshots carried ~134 entries of ~57 bytes each (7.6 KB of a 11.5 KB summary, so
//! 740 KB of metadata.json after 85 commits, which every load and commit reads). So one entry
//! per log (the highest seq: a watermark that reaches it reaches every lower one), and a
//! property of the usual shape, `thadam.watermark.<uuid>[.<fork>]`, written as `~` and the
//! UUID's 16 bytes in base64: `~jcPWGHPzTI-Ff1Qq7_E-Tg=60`, 25 bytes instead of 57.
//!
//! Any other entry is a whole property (as every entry was before, so older snapshots read the
//! same): `thadam.watermark.log=3`, or `=3` for an intent whose log has no watermark (no
//! watermark ever covers it). An older registrar reads a `~` entry as a property that is not
//! there, i.e. not covered: it keeps such a snapshot rather than expire it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::table::summary_keys::WATERMARK_PREFIX;

/// Marks an entry whose property is [`WATERMARK_PREFIX`], a UUID in base64, and maybe a fork.
const SHORT: char = '~';

/// The guards of one commit: per watermark property, the highest seq it must reach.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Guards(BTreeMap<String, u64>);

impl Guards {
    /// Notes a carried intent of the log whose watermark is `property` (empty: none), up to
    /// `seq`.
    pub fn add(&mut self, property: &str, seq: u64) {
        let top = self.0.entry(property.to_string()).or_insert(seq);
        *top = (*top).max(seq);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The summary value, entries joined by `,`.
    pub fn encode(&self) -> String {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|(property, seq)| format!("{}={seq}", short(property)))
            .collect();
        entries.join(",")
    }
}

/// A property as it is written in an entry: short where it has the usual shape.
fn short(property: &str) -> Cow<'_, str> {
    let Some(rest) = property.strip_prefix(WATERMARK_PREFIX) else {
        return Cow::Borrowed(property);
    };
    let (id, fork) = split_fork(rest);
    // Only a UUID that reads back as the very same text (lower case, hyphenated).
    match uuid::Uuid::try_parse(id) {
        Ok(uuid) if uuid.hyphenated().to_string() == id => Cow::Owned(with_fork(
            format!("{SHORT}{}", URL_SAFE_NO_PAD.encode(uuid.as_bytes())),
            fork,
        )),
        _ => Cow::Borrowed(property),
    }
}

/// The entries of a `thadam.carried-marks` value, each the property and the seq it must reach;
/// `None` for an entry that does not parse (retention takes it as not covered).
pub fn decode(value: &str) -> impl Iterator<Item = Option<(Cow<'_, str>, u64)>> {
    value.split(',').map(|entry| {
        let (property, seq) = entry.rsplit_once('=')?;
        let seq = seq.parse::<u64>().ok()?;
        Some((long(property)?, seq))
    })
}

/// The property an entry names; `None` for a short form that does not decode.
fn long(property: &str) -> Option<Cow<'_, str>> {
    let Some(rest) = property.strip_prefix(SHORT) else {
        return Some(Cow::Borrowed(property));
    };
    let (id, fork) = split_fork(rest);
    let bytes = URL_SAFE_NO_PAD.decode(id).ok()?;
    let uuid = uuid::Uuid::from_slice(&bytes).ok()?;
    Some(Cow::Owned(with_fork(
        format!("{WATERMARK_PREFIX}{}", uuid.hyphenated()),
        fork,
    )))
}

/// A property's log id and its fork (`<id>.<fork>`), if any.
fn split_fork(rest: &str) -> (&str, Option<&str>) {
    match rest.split_once('.') {
        Some((id, fork)) => (id, Some(fork)),
        None => (rest, None),
    }
}

/// `head` with `.<fork>` after it, if there is a fork.
fn with_fork(mut head: String, fork: Option<&str>) -> String {
    if let Some(fork) = fork {
        head.push('.');
        head.push_str(fork);
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "thadam.watermark.8dc3d618-73f3-4c8f-857f-542aeff13e4e";

    fn decoded(value: &str) -> Vec<Option<(String, u64)>> {
        decode(value)
            .map(|e| e.map(|(p, s)| (p.into_owned(), s)))
            .collect()
    }

    #[test]
    fn a_uuid_property_is_written_short_and_read_back_whole() {
        let mut g = Guards::default();
        g.add(LOG, 60);
        let fork = format!("{LOG}.0a1b2c3d4e5f");
        g.add(&fork, 7);
        let value = g.encode();
        assert_eq!(
            value,
            "~jcPWGHPzTI-Ff1Qq7_E-Tg=60,~jcPWGHPzTI-Ff1Qq7_E-Tg.0a1b2c3d4e5f=7"
        );
        assert_eq!(
            decoded(&value),
            vec![Some((LOG.to_string(), 60)), Some((fork, 7))]
        );
    }

    #[test]
    fn one_entry_per_property_with_the_highest_seq() {
        let mut g = Guards::default();
        g.add(LOG, 5);
        g.add(LOG, 9);
        g.add(LOG, 7);
        g.add("", 3);
        g.add("", 4);
        assert_eq!(g.encode(), "=4,~jcPWGHPzTI-Ff1Qq7_E-Tg=9");
    }

    #[test]
    fn other_properties_are_written_whole() {
        // Not a UUID, a UUID in upper case or without hyphens, another prefix: each as it is.
        let mut properties = [
            "thadam.watermark.log",
            "thadam.watermark.8DC3D618-73F3-4C8F-857F-542AEFF13E4E",
            "thadam.watermark.8dc3d61873f34c8f857f542aeff13e4e",
            "other.8dc3d618-73f3-4c8f-857f-542aeff13e4e",
        ];
        let mut g = Guards::default();
        for p in properties {
            g.add(p, 1);
        }
        let value = g.encode();
        assert!(!value.contains(SHORT), "{value}");
        properties.sort_unstable();
        let expected: Vec<_> = properties
            .iter()
            .map(|p| Some((p.to_string(), 1)))
            .collect();
        assert_eq!(decoded(&value), expected);
    }

    #[test]
    fn entries_written_before_read_as_they_were() {
        let value = format!("{LOG}=60,thadam.watermark.log=3,=4");
        assert_eq!(
            decoded(&value),
            vec![
                Some((LOG.to_string(), 60)),
                Some(("thadam.watermark.log".to_string(), 3)),
                Some((String::new(), 4)),
            ]
        );
    }

    #[test]
    fn what_does_not_parse_is_none_never_a_panic() {
        for bad in [
            "~",
            "~=1",
            "~!!!=1",
            "~AAAA=1",
            "x",
            "x=",
            "x=-1",
            "~jcPWGHPzTI-Ff1Qq7_E-Tg=y",
        ] {
            assert_eq!(decoded(bad), vec![None], "{bad}");
        }
    }

    #[test]
    fn the_short_form_is_less_than_half_the_long_one() {
        let mut g = Guards::default();
        g.add(LOG, 60);
        assert!(g.encode().len() * 2 < format!("{LOG}=60").len());
    }
}
