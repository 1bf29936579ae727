#!/usr/bin/env bash
# End-to-end throughput benchmark of the registrar against the real servers (the Iceberg REST
# fixture and an S3 server, SeaweedFS or s3s-fs, on 127.0.0.1), side by side with pyiceberg's
# add_files, from one run:
#
#   1. backlog: N segments (default 2,000 of 100 rows) already shipped, then the release
#      registrar with --until-caught-up: wall time, segments/s, snapshots made, peak RSS;
#   2. steady flow: segments shipped at R/s (default 20/s for 60 s) while the registrar runs:
#      p50/p99 latency from each segment's Uploaded record to the snapshot that added it;
#   3. pyiceberg add_files over the same objects into tables of the same schema in the same
#      catalog: one batched call (first, in a fresh process), then file by file (first
#      --per-file files, default 200);
#   4. the ratios.
#
#   benches/e2e.sh [--segments N] [--rows R] [--rate R] [--duration S] [--per-file N]
#                  [--per-file-no-check N] [--registrar-bin PATH]
#                  [--catalog fixture|nessie|seaweedfs]
#                  [--s3 seaweedfs|s3s-fs] [--keep]
#
# --per-file N: 0 adds all files one by one (hours at 2,000: each call slows as the table grows).
# --per-file-no-check N also adds N files one by one with check_duplicate_files=False (0: skip).
# --registrar-bin PATH runs this runner binary for the backlog and the flow instead of the one
# built here (e.g. a copy of an earlier build, for an A/B); the rest is built as usual.
# --catalog nessie runs everything (the registrar and pyiceberg) against Project Nessie 0.99.0
# (scripts/servers starts it) instead of the REST fixture; the S3 server is the same.
# --catalog seaweedfs: against SeaweedFS's own catalog (OAuth2 with the S3 keys, its table bucket,
# table_location: catalog; needs --s3 seaweedfs: it serves its own S3 only). Its catalog and its
# S3 are one process: the CPU split shows that process once, as the S3 server's.
# --s3 chooses the S3 server of the catalog, the registrar and pyiceberg: seaweedfs (the default,
# SeaweedFS's weed mini, as the tests run) or s3s-fs (with the TCP_NODELAY shim below). Run both
# for the side-by-side figures.
# --keep keeps the state dir (configs, segment logs, server logs, raw JSON results); the servers
# are stopped either way.
#
# s3s-fs runs with TCP_NODELAY on its accepted sockets (benches/e2e/nodelay.c, LD_PRELOAD via
# scripts/servers' THADAM_S3_PRELOAD): stock s3s-fs stalls ~44 ms on GETs with a body, which would
# dominate every figure. SeaweedFS needs no shim (Go sets TCP_NODELAY on every connection). The registrar runs with its default tuning (no commit/footer_readers keys).
# Figures go to stdout only; progress to stderr. Takes ~4 min on 2 cores when built.
set -euo pipefail

# The packages, the config writer and the CPU probe are shared with history.sh and backlog.sh.
# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$THADAM_REPO_ROOT"

segments=2000
rows=100
rate=20
duration=60
per_file=200
per_file_no_check=200
registrar_bin=""
catalog=fixture
s3=seaweedfs
keep=0
command_line="benches/e2e.sh${*:+ $*}"
while (($#)); do
    case "$1" in
        --segments) segments="$2"; shift 2 ;;
        --rows) rows="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --duration) duration="$2"; shift 2 ;;
        --per-file) per_file="$2"; shift 2 ;;
        --per-file-no-check) per_file_no_check="$2"; shift 2 ;;
        --registrar-bin) registrar_bin="$2"; shift 2 ;;
        --catalog) catalog="$2"; shift 2 ;;
        --s3) s3="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) die "unknown argument $1 (see the header of benches/e2e.sh)" ;;
    esac
done
for n in "$segments" "$rows" "$duration" "$per_file" "$per_file_no_check"; do
    [[ "$n" =~ ^[0-9]+$ ]] || die "not a whole number: $n"
done
[[ "$rate" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--rate must be a positive number, not $rate"
[[ "$catalog" == fixture || "$catalog" == nessie || "$catalog" == seaweedfs ]] ||
    die "--catalog is fixture, nessie or seaweedfs, not $catalog"
[[ "$s3" == seaweedfs || "$s3" == s3s-fs ]] || die "--s3 is seaweedfs or s3s-fs, not $s3"
[[ "$catalog" != seaweedfs || "$s3" == seaweedfs ]] || die "--catalog seaweedfs needs --s3 seaweedfs"

STATE=""
REG_PID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n "$REG_PID" ]] && pid_alive "$REG_PID"; then
        kill -TERM "$REG_PID" 2>/dev/null || true
        wait "$REG_PID" 2>/dev/null || true
    fi
    if [[ -n "$STATE" ]]; then
        "$THADAM_REPO_ROOT/scripts/servers" stop "$STATE/srv" || true
        if [[ "$keep" == 0 ]]; then
            rm -rf "$STATE"
        else
            log "kept $STATE (results in $STATE/results)"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


bench_ensure_packages
"$THADAM_REPO_ROOT/scripts/install-tools" >&2
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$THADAM_CACHE/target}"
log "building the release examples"
cargo build --release --locked --examples >&2
BIN="$CARGO_TARGET_DIR/release/examples"
REG="${registrar_bin:-$BIN/registrar}"
[[ -x "$REG" ]] || die "no runner binary at $REG"
PY="$THADAM_VENV_PYTHON"
BENCH_PY="$THADAM_REPO_ROOT/benches/e2e/bench.py"
export PYTHONDONTWRITEBYTECODE=1

STATE="$(mktemp -d "${TMPDIR:-/tmp}/thadam-e2e.XXXXXX")"
R="$STATE/results"
mkdir -p "$R"
# Only the servers this run uses: an idle JVM or weed mini beside it takes CPU from the two cores
# the figures are about.
want_nessie=0
want_seaweedfs=0
[[ "$catalog" == nessie ]] && want_nessie=1
[[ "$catalog" == seaweedfs || "$s3" == seaweedfs ]] && want_seaweedfs=1
if [[ "$s3" == s3s-fs ]]; then
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$STATE/nodelay.so" \
        "$THADAM_REPO_ROOT/benches/e2e/nodelay.c" -ldl
    THADAM_S3=s3s-fs THADAM_S3_PRELOAD="$STATE/nodelay.so" THADAM_NESSIE="$want_nessie" \
        THADAM_SEAWEEDFS="$want_seaweedfs" "$THADAM_REPO_ROOT/scripts/servers" start "$STATE/srv" >&2
    # shellcheck source=/dev/null
    source "$STATE/srv/env"
    s3_pid="$(cat "$STATE/srv/s3s-fs.pid")"
    if grep -q "$STATE/nodelay.so" "/proc/$s3_pid/maps"; then
        s3_variant="s3s-fs $THADAM_S3S_VERSION with TCP_NODELAY on accepted sockets (LD_PRELOAD benches/e2e/nodelay.c)"
    else
        die "nodelay.so is not mapped into s3s-fs (pid $s3_pid): the preload did not take"
    fi
else
    THADAM_S3=seaweedfs THADAM_NESSIE="$want_nessie" \
        "$THADAM_REPO_ROOT/scripts/servers" start "$STATE/srv" >&2
    # shellcheck source=/dev/null
    source "$STATE/srv/env"
    s3_pid="$(cat "$STATE/srv/seaweedfs.pid")"
    s3_variant="SeaweedFS $THADAM_SEAWEEDFS_VERSION (weed mini: master, volume, filer and S3 in one process), stock"
fi
catalog_pid="$(cat "$STATE/srv/rest-fixture.pid")"
catalog_line="Iceberg REST fixture $THADAM_ICEBERG_FIXTURE_VERSION ($(java -version 2>&1 | head -n1 | tr -d '"')), JdbcCatalog on SQLite"
if [[ "$catalog" == nessie ]]; then
    # The registrar's config and pyiceberg both read THADAM_TEST_CATALOG_URI.
    export THADAM_TEST_CATALOG_URI="$THADAM_TEST_NESSIE_URI"
    catalog_pid="$(cat "$STATE/srv/nessie.pid")"
    catalog_line="Project Nessie $THADAM_NESSIE_VERSION ($("$(nessie_java)" -version 2>&1 | head -n1 | tr -d '"')), in-memory version store"
fi
# The iceberg sink's extra keys for the catalog (bench_config's EXTRA_YAML).
catalog_yaml=""
if [[ "$catalog" == seaweedfs ]]; then
    export THADAM_TEST_CATALOG_URI="$THADAM_TEST_SEAWEEDFS_URI"
    # bench.py's pyiceberg: the warehouse and the OAuth2 client credentials (the S3 keys).
    export THADAM_TEST_PY_WAREHOUSE="$THADAM_TEST_SEAWEEDFS_WAREHOUSE"
    export THADAM_TEST_PY_CREDENTIAL="$THADAM_TEST_S3_ACCESS_KEY:$THADAM_TEST_S3_SECRET_KEY"
    catalog_pid="$s3_pid"
    catalog_line="SeaweedFS $THADAM_SEAWEEDFS_VERSION's Iceberg catalog (table bucket $THADAM_TEST_SEAWEEDFS_WAREHOUSE, OAuth2), in the S3 server's process"
    catalog_yaml="      catalog_warehouse: $THADAM_TEST_SEAWEEDFS_WAREHOUSE
      table_location: catalog
      catalog_credential:
        client_id: \"\${env:THADAM_TEST_S3_ACCESS_KEY}\"
        client_secret: \"\${env:THADAM_TEST_S3_SECRET_KEY}\""
fi

# cpu_s PID: the CPU time (user + system) process PID has used so far, in seconds. The servers'
# CPU around each phase says what the 2 cores were spent on besides the registrar.
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
# cpu_since PID BEFORE: the CPU time process PID has used since cpu_s gave BEFORE.
cpu_since() {
    awk -v a="$2" -v b="$(cpu_s "$1")" 'BEGIN { printf "%.2f", b - a }'
}


# seconds_since START: seconds since START (from now_s), to the millisecond.
seconds_since() {
    awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.3f", b - a }'
}

# last_seq SHIPPER_OUTPUT_LINE: the N of "(catalog records M..N)".
last_seq() {
    sed -n 's/.*catalog records [0-9]*\.\.\([0-9]*\)).*/\1/p' <<<"$1"
}

# warm_up NAME: ships one segment and registers it, so that the table exists (created from that
# segment's footer) before anything is timed; prints the catalog's last seq after it.
warm_up() {
    local out
    out="$("$BIN/demo_shipper" --config "$STATE/$1.yaml" --segments 1 --rows "$rows" --quiet)"
    "$REG" --config "$STATE/$1.yaml" --until-caught-up >/dev/null 2>>"$STATE/$1-warmup.log"
    last_seq "$out"
}


machine_info() {
    local mem cpu
    mem="$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    cpu="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "command:    $command_line"
    echo "machine:    $(nproc) CPUs (${cpu:-unknown}), $mem RAM, $(uname -sr)"
    echo "before:     CPUs ${busy}% busy over 2 s with the servers idle; load $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, the build included)"
    if [[ -n "$registrar_bin" ]]; then
        echo "registrar:  prebuilt $registrar_bin (sha256 $(sha256sum "$REG" | cut -c1-12)), default tuning"
    else
        echo "registrar:  thadam-iceberg $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+uncommitted changes'), release build, $(rustc --version | cut -d' ' -f1-2), default tuning"
    fi
    echo "servers:    $catalog_line; $s3_variant"
    echo "pyiceberg:  $("$PY" -c 'import pyiceberg, pyarrow, sys; print(f"pyiceberg {pyiceberg.__version__}, pyarrow {pyarrow.__version__}, Python {sys.version.split()[0]}")'), PyArrowFileIO"
}
busy="$(bench_cpu_busy_pct)"
if ((busy > 20)); then
    warn "the CPUs are ${busy}% busy before the benchmark starts: other work will distort the figures"
fi
machine_info >"$R/env.txt"

# ---- 1. backlog ---------------------------------------------------------------------------------
bench_config backlog backlog "$catalog_yaml"
log "backlog: warm-up (creates bench.backlog from one segment)"
backlog_after="$(warm_up backlog)"
log "backlog: shipping $segments segments of $rows rows"
t0="$(now_s)"
ship_line="$("$BIN/demo_shipper" --config "$STATE/backlog.yaml" --segments "$segments" --rows "$rows" --quiet)"
ship_s="$(seconds_since "$t0")"
log "$ship_line"
"$PY" "$BENCH_PY" table --table bench.backlog >"$R/backlog-before.json"
log "backlog: registering (registrar --until-caught-up)"
s3_cpu0="$(cpu_s "$s3_pid")"
catalog_cpu0="$(cpu_s "$catalog_pid")"
t0="$(now_s)"
/usr/bin/time -f '%M %U %S' -o "$R/backlog-time.txt" \
    "$REG" --config "$STATE/backlog.yaml" --until-caught-up \
    >"$STATE/backlog-registrar.out" 2>"$STATE/backlog-registrar.log" ||
    { show_log_tail "$STATE/backlog-registrar.log"; die "the registrar failed on the backlog"; }
reg_s="$(seconds_since "$t0")"
s3_cpu="$(cpu_since "$s3_pid" "$s3_cpu0")"
catalog_cpu="$(cpu_since "$catalog_pid" "$catalog_cpu0")"
if [[ "$catalog_pid" == "$s3_pid" ]]; then
    # One process serves both (SeaweedFS's catalog): counted once, as the S3 server's.
    catalog_cpu=0
fi
"$PY" "$BENCH_PY" table --table bench.backlog >"$R/backlog-after.json"
read -r rss_kb user_s sys_s <"$R/backlog-time.txt"
printf '{"segments": %d, "rows": %d, "ship_seconds": %s, "seconds": %s, "max_rss_kb": %d, "cpu_s": %s, "s3s_cpu_s": %s, "catalog_cpu_s": %s}\n' \
    "$segments" "$rows" "$ship_s" "$reg_s" "$rss_kb" "$(awk -v u="$user_s" -v s="$sys_s" 'BEGIN { print u + s }')" \
    "$s3_cpu" "$catalog_cpu" >"$R/backlog-run.json"
log "backlog: registered in ${reg_s}s, peak RSS ${rss_kb} KiB"

# ---- 2. steady flow -----------------------------------------------------------------------------
bench_config flow flow "$catalog_yaml"
log "flow: warm-up (creates bench.flow from one segment)"
flow_after="$(warm_up flow)"
log "flow: starting the registrar"
"$REG" --config "$STATE/flow.yaml" --metrics-addr 127.0.0.1:0 \
    >"$STATE/flow-registrar.out" 2>"$STATE/flow-registrar.log" &
REG_PID=$!
metrics=""
for _ in $(seq 1 100); do
    metrics="$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$STATE/flow-registrar.out" | head -n1)"
    [[ -n "$metrics" ]] && break
    pid_alive "$REG_PID" || break
    sleep 0.1
done
[[ -n "$metrics" ]] || { show_log_tail "$STATE/flow-registrar.log"; die "the flow registrar did not print its metrics address"; }
wait_http "$metrics/readyz" 30 200 "$REG_PID" || die "the flow registrar did not become ready"
log "flow: shipping at ${rate}/s for ${duration}s"
t0="$(now_s)"
"$BIN/demo_shipper" --config "$STATE/flow.yaml" --rate "$rate" --duration "${duration}s" --rows "$rows" --quiet >"$R/flow-shipper.txt"
log "$(cat "$R/flow-shipper.txt")"
expected="$(awk -v r="$rate" -v d="$duration" 'BEGIN { printf "%d", r * d + 0.5 }')"
registered=0
for _ in $(seq 1 600); do
    registered="$(curl -s --noproxy '*' --max-time 5 "$metrics/metrics" |
        awk '/^thadam_iceberg_segments_registered_total\{.*table="bench.flow"/ { n += $NF } END { printf "%d", n }')"
    ((registered >= expected)) && break
    pid_alive "$REG_PID" || break
    sleep 0.1
done
((registered >= expected)) || { show_log_tail "$STATE/flow-registrar.log"; die "flow: only $registered of $expected segments registered"; }
flow_s="$(seconds_since "$t0")"
# Peak RSS (the kernel's high-water mark) and CPU time, read before the process is stopped.
flow_rss_kb="$(awk '/^VmHWM/ { print $2 }' "/proc/$REG_PID/status")"
flow_cpu_s="$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$REG_PID/stat")"
"$PY" "$BENCH_PY" metrics --url "$metrics/metrics" --table bench.flow >"$R/flow-metrics.json"
kill -TERM "$REG_PID"
wait "$REG_PID" || die "the flow registrar exited with $? on SIGTERM"
REG_PID=""
printf '{"seconds": %s, "max_rss_kb": %d, "cpu_s": %s}\n' "$flow_s" "$flow_rss_kb" "$flow_cpu_s" >"$R/flow-run.json"
log "flow: computing latencies from the table's manifests"
"$PY" "$BENCH_PY" latency --table bench.flow --log "$STATE/segments-flow/segment-catalog.log" \
    --after-seq "$flow_after" >"$R/flow-latency.json"

# ---- 3. pyiceberg add_files ---------------------------------------------------------------------
log "pyiceberg: add_files over the same $segments objects"
short_names=()
[[ "$catalog" == nessie ]] && short_names=(--short-names)
"$PY" "$BENCH_PY" add-files --log "$STATE/segments-backlog/segment-catalog.log" \
    --server-pids "$s3_pid,$catalog_pid" \
    --after-seq "$backlog_after" --source-table bench.backlog --namespace bench \
    --per-file "$per_file" --per-file-no-check "$per_file_no_check" \
    "${short_names[@]}" >"$R/add_files.json"

echo "after:      load $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, this run included)" >>"$R/env.txt"

# ---- 4. the table -------------------------------------------------------------------------------
"$PY" "$BENCH_PY" report --results "$R"
