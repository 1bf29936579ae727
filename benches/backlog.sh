#!/usr/bin/env bash
# Large backlogs: peak RSS (VmHWM of the registrar) and throughput for backlogs of N segments
# already in the segment catalog, registered by the release registrar with --until-caught-up and
# its default tuning, against the real servers on 127.0.0.1.
#
#   benches/backlog.sh [--segments "10000 100000 1000000"] [--rows R]
#                      [--retention max_age=D,min_snapshots=N] [--registrar-bin PATH] [--keep]
#
# --segments: the backlog sizes, space- or comma-separated (default "10000"; 1M takes ~15 min
# and ~2 GiB of disk for the catalog records and table metadata). Each size gets its own table
# and segment catalog on the same servers.
#
# --registrar-bin PATH: the timed run uses this runner binary (another build, for an A/B run
# alternated with this tree's); the warm-up and the tools stay this tree's build.
#
# Shipping 1M objects through S3 is too slow, so a warm-up ships ONE real segment (R rows, default
# 100) through S3 and registers it (the table is created from it), then the bench places N copies
# of that object straight into s3s-fs's data directory (hard links under distinct keys; s3s-fs
# maps bucket/key to <root>/bucket/key and needs no sidecar file; one copy is read back through
# boto3 with HEAD, GET and a ranged GET first) and appends N `uploaded` records to the segment
# catalog (benches/growth/seglog.py, the documented log format, one fdatasync per 20,000
# records). Neither step is timed.
#
# Reported per size: wall time to caught-up (registrar start to exit, startup included), seg/s,
# time to the first commit, snapshots, peak RSS (GNU time's ru_maxrss), CPU time, the highest
# thadam_iceberg_backlog_segments seen, the RSS over time, and pyiceberg's plan_files on the
# registered table (up to 110,000 files: a reader's planning cost is per file, whatever the
# history). Markdown on stdout, progress on stderr. ~2 min for the default when built.
set -euo pipefail

# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sizes="10000"
rows=100
retention=none
keep=0
registrar_bin=""
command_line="benches/backlog.sh${*:+ $*}"
while (($#)); do
    case "$1" in
        --segments) sizes="${2//,/ }"; shift 2 ;;
        --rows) rows="$2"; shift 2 ;;
        --retention) retention="$2"; shift 2 ;;
        --registrar-bin) registrar_bin="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) die "unknown argument $1 (see the header of benches/backlog.sh)" ;;
    esac
done
for n in $sizes "$rows"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "not a positive whole number: $n"
done

# --retention max_age=1m,min_snapshots=100: the iceberg sink's snapshot_retention (off by
# default). Without it the table's metadata, and what the registrar rebuilds from it, grows with
# every registered segment (16 bytes of snapshot summary each).
extra="$(bench_retention_yaml "$retention")"

if [[ -n "$registrar_bin" ]]; then
    [[ -x "$registrar_bin" && -f "$registrar_bin" ]] || die "--registrar-bin $registrar_bin: not an executable file"
fi
bench_start backlog
timed_bin="${registrar_bin:-$BIN/registrar}"
results=()
for n in $sizes; do
    name="backlog$n"
    bench_config "$name" "$name" "$extra"
    log "backlog $n: warm-up (creates bench.$name from one shipped segment)"
    bench_warm_up "$name" "$rows"
    "$PY" "$GROWTH/backlog.py" run --config "$STATE/$name.yaml" --registrar "$timed_bin" \
        --log "$STATE/segments-$name/segment-catalog.log" --table "bench.$name" --segments "$n" \
        --crc-lib "$CRC_LIB" --sources-dir "$STATE/sources-$name" --state "$STATE" \
        >"$R/$name.json"
    results+=("$R/$name.json")
    # The placed links and the records are only needed by this size's run.
    rm -rf "$STATE/sources-$name"
done

echo "## Backlog: peak RSS and throughput"
echo
bench_machine_info
if [[ -n "$registrar_bin" ]]; then
    echo "| timed runner | prebuilt \`$registrar_bin\` (modified $(date -r "$registrar_bin" '+%Y-%m-%d %H:%M:%S')) |"
fi
echo "| tuning | default (commit.max_segments 500, no linger, default footer_readers, memory.segments 2048); snapshot_retention: $retention |"
echo
"$PY" "$GROWTH/backlog.py" report --results "${results[@]}"
