#!/usr/bin/env bash
# Growth over time: per-commit cost as a table's history grows, in a trickle of one segment per
# snapshot (the release registrar with --max-batch 1), against the real servers on 127.0.0.1,
# with pyiceberg's add_files of one file per call on the same servers as the anchor.
#
#   benches/history.sh [--commits N] [--merge on|off] [--retention none|max_age=D,min_snapshots=N]
#                      [--checkpoints "10 100 1000 10000 50000"] [--window W]
#                      [--peer-commits P] [--peer-dup-check on|off] [--rows R]
#                      [--other-logs K] [--keep]
#
# --commits N       commits made on the table (default 1,000: ~3 min when built). 10,000 and
#                   50,000 are opt-in: each commit rewrites metadata.json (~0.75 KiB more per
#                   snapshot) and, without manifest merging, a manifest list one entry longer
#                   (~125 B), so time and disk grow quadratically: 10,000 takes tens of minutes
#                   and ~6 GiB; 50,000 without merging or expiry takes hours and ~150 GiB of
#                   manifest lists (the bench warns when the disk looks too small)
# --merge on|off    table property commit.manifest-merge.enabled (default on, as the registrar), set with pyiceberg
#                   on the registrar's table and the peer's before the run
# --retention       writes `snapshot_retention: {max_age: D, min_snapshots: N}` into the iceberg
#                   sink's config (default none). A registrar without that key refuses the config
#                   (config.invalid, exit 2) and the bench stops at the warm-up, saying so.
# --checkpoints     where to measure (those <= N, and N itself)
# --window W        commits measured before each checkpoint (default 100, at most C/2 at C)
# --peer-commits P  pyiceberg add_files calls, one file each (default 200; 0 skips the peer)
# --other-logs K    sets the watermarks of K other segment logs on the registrar's table before
#                   the run (`thadam.watermark.<uuid>` = `<seq>:<fingerprint>`, as K more nodes of
#                   a fleet leave them; default 0): what 1,000 logs cost every load and commit
# --peer-dup-check  pyiceberg's check_duplicate_files (default on, pyiceberg's default: each call
#                   reads every manifest)
#
# A warm-up ships one real segment (R rows, default 100) through S3 and registers it (commit 1,
# the table created from it). Every other object is a hard link of it placed in s3s-fs's data
# directory up front, and the segment catalog records are appended in bulk per stage
# (benches/growth/seglog.py), so the commits are bounded by the registrar and the catalog, never by
# a shipper. See benches/growth/history.py for what each figure is. The table also gets
# write.metadata.delete-after-commit.enabled=true (the catalog keeps 100 old metadata.json
# files; the metadata log inside is capped at 100 either way), which keeps long runs on disk.
# Markdown on stdout, progress on stderr.
set -euo pipefail

# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

commits=1000
merge=on
retention=none
checkpoints="10 100 1000 10000 50000"
window=100
peer_commits=200
peer_dup_check=on
rows=100
other_logs=0
keep=0
command_line="benches/history.sh${*:+ $*}"
while (($#)); do
    case "$1" in
        --commits) commits="$2"; shift 2 ;;
        --merge) merge="$2"; shift 2 ;;
        --retention) retention="$2"; shift 2 ;;
        --checkpoints) checkpoints="$2"; shift 2 ;;
        --window) window="$2"; shift 2 ;;
        --peer-commits) peer_commits="$2"; shift 2 ;;
        --peer-dup-check) peer_dup_check="$2"; shift 2 ;;
        --rows) rows="$2"; shift 2 ;;
        --other-logs) other_logs="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) die "unknown argument $1 (see the header of benches/history.sh)" ;;
    esac
done
for n in "$commits" "$window" "$peer_commits" "$rows" "$other_logs" ${checkpoints//,/ }; do
    [[ "$n" =~ ^[0-9]+$ ]] || die "not a whole number: $n"
done
((commits >= 2)) || die "--commits must be at least 2"
((window >= 1 && window <= 100)) || die "--window must be 1..100"
[[ "$merge" == on || "$merge" == off ]] || die "--merge must be on or off, not $merge"
[[ "$peer_dup_check" == on || "$peer_dup_check" == off ]] || die "--peer-dup-check must be on or off"

# --retention max_age=10m,min_snapshots=100 -> the YAML of the iceberg-sink key.
extra="$(bench_retention_yaml "$retention")"

# Without merging or expiry commit n writes a manifest list of n entries (~125 B each).
need_gib="$(awk -v n="$commits" 'BEGIN { printf "%.1f", 125 * n * n / 2 / 1073741824 }')"
free_gib="$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }')"
if awk -v a="$need_gib" -v b="$free_gib" 'BEGIN { exit !(a > 0.8 * b) }'; then
    warn "$commits commits may write ~$need_gib GiB of manifest lists (no merging, no expiry) and ${TMPDIR:-/tmp} has $free_gib GiB free"
fi

bench_start history
bench_config history history "$extra"
log "warm-up (creates bench.history from one shipped segment)"
if [[ -n "$extra" ]]; then
    WARMUP_REFUSED_HINT="--retention writes the iceberg-sink key snapshot_retention: a registrar without that key refuses it; run without --retention, or on a build that has it"
fi
bench_warm_up history "$rows"
"$PY" "$GROWTH/history.py" run --config "$STATE/history.yaml" --registrar "$BIN/registrar" \
    --log "$STATE/segments-history/segment-catalog.log" --table bench.history \
    --commits "$commits" --checkpoints "$checkpoints" --window "$window" --merge "$merge" \
    --crc-lib "$CRC_LIB" --sources-dir "$STATE/sources" --state "$STATE" \
    --peer-commits "$peer_commits" --peer-table bench.history_pyiceberg \
    --peer-dup-check "$peer_dup_check" --other-logs "$other_logs" >"$R/history.json"

echo "## History: per-commit cost as the table grows"
echo
bench_machine_info
echo "| variant | merge $merge, retention $retention, $other_logs other logs' watermarks, one segment per snapshot (--max-batch 1), otherwise default tuning |"
echo
"$PY" "$GROWTH/history.py" report --results "$R/history.json"
