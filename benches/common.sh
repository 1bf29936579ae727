# shellcheck shell=bash
# Shared by benches/history.sh and benches/backlog.sh (sourced): build the release examples, start
# the servers (s3s-fs with the TCP_NODELAY shim of benches/e2e/nodelay.c), write configs, warm up
# a table, describe the machine, stop everything on exit.
#
# The caller sets: command_line, keep (0/1); then calls bench_start NAME. After it: $STATE (state
# dir), $R (raw results), $BIN (release examples), $PY (venv python), $GROWTH (benches/growth),
# $CRC_LIB (benches/growth/crc32c.c built), $s3_variant, the THADAM_TEST_* variables.

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$THADAM_REPO_ROOT"

STATE=""
REG_PIDS=()
bench_cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${REG_PIDS[@]}"; do
        if pid_alive "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    if [[ -n "$STATE" ]]; then
        "$THADAM_REPO_ROOT/scripts/servers" stop "$STATE/srv" || true
        if [[ "${keep:-0}" == 0 ]]; then
            rm -rf "$STATE"
        else
            log "kept $STATE (results in $STATE/results)"
        fi
    fi
    exit "$rc"
}

# gcc builds the preload shim and the CRC-32C helper; GNU time measures the registrar's peak RSS.
bench_ensure_packages() {
    local -a missing=()
    command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
    [[ -x /usr/bin/time ]] || missing+=(time)
    ((${#missing[@]} == 0)) && return 0
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "installing missing Debian packages: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        die "missing, install them first: ${missing[*]}"
    fi
}

# cpu_busy_pct: how busy all CPUs were over the next 2 s (other work distorts every figure).
bench_cpu_busy_pct() {
    local a b
    a="$(head -n1 /proc/stat)"
    sleep 2
    b="$(head -n1 /proc/stat)"
    awk -v a="$a" -v b="$b" 'BEGIN {
        n = split(a, x); split(b, y); total = 0
        for (i = 2; i <= n; i++) total += y[i] - x[i]
        idle = (y[5] - x[5]) + (y[6] - x[6])
        printf "%.0f", (total > 0 ? 100 * (total - idle) / total : 0)
    }'
}

# bench_start NAME: everything up to running servers; prints nothing on stdout.
bench_start() {
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bench_ensure_packages
    "$THADAM_REPO_ROOT/scripts/install-tools" >&2
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$THADAM_CACHE/target}"
    log "building the release examples"
    cargo build --release --locked --examples >&2
    BIN="$CARGO_TARGET_DIR/release/examples"
    PY="$THADAM_VENV_PYTHON"
    GROWTH="$THADAM_REPO_ROOT/benches/growth"
    export PYTHONDONTWRITEBYTECODE=1
    busy="$(bench_cpu_busy_pct)"
    if ((busy > 20)); then
        warn "the CPUs are ${busy}% busy before the benchmark starts: other work will distort the figures"
    fi
    STATE="$(mktemp -d "${TMPDIR:-/tmp}/thadam-$1.XXXXXX")"
    R="$STATE/results"
    mkdir -p "$R"
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$STATE/nodelay.so" \
        "$THADAM_REPO_ROOT/benches/e2e/nodelay.c" -ldl
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$STATE/crc32c.so" "$GROWTH/crc32c.c"
    CRC_LIB="$STATE/crc32c.so"
    # s3s-fs, not SeaweedFS: these benches place their objects straight into its data directory
    # (hard links of one file under thousands of keys), which SeaweedFS has no equivalent of.
    # Neither Nessie nor SeaweedFS: these benches use the fixture, and an idle server beside it
    # takes CPU from the two cores the figures are about.
    THADAM_S3=s3s-fs THADAM_S3_PRELOAD="$STATE/nodelay.so" THADAM_NESSIE=0 THADAM_SEAWEEDFS=0 \
        "$THADAM_REPO_ROOT/scripts/servers" start "$STATE/srv" >&2
    # shellcheck source=/dev/null
    source "$STATE/srv/env"
    local s3_pid
    s3_pid="$(cat "$STATE/srv/s3s-fs.pid")"
    grep -q "$STATE/nodelay.so" "/proc/$s3_pid/maps" ||
        die "nodelay.so is not mapped into s3s-fs (pid $s3_pid): the preload did not take"
    s3_variant="s3s-fs $THADAM_S3S_VERSION with TCP_NODELAY on accepted sockets (LD_PRELOAD benches/e2e/nodelay.c)"
}

# bench_config NAME DATASET [EXTRA_YAML]: a parquet sink with its own segment catalog, its
# shipper, and the registrar (default tuning) in namespace "bench"; EXTRA_YAML (lines indented
# 6 spaces) is appended to the iceberg sink's config. BENCH_RETRY overrides the retry line
# (default { initial: 200ms, max: 5s, jitter: true }).
bench_config() {
    cat >"$STATE/$1.yaml" <<YAML
sinks:
  - id: local
    kind: parquet
    config: { dir: $STATE/segments-$1, unsigned: signed, datasets: [$2] }
  - id: s3
    kind: object_store
    config: { from: local, pipeline: bench, url: s3://$THADAM_TEST_BUCKET/lake }
  - id: iceberg
    kind: iceberg
    config:
      from: local
      pipeline: bench
      catalog_uri: $THADAM_TEST_CATALOG_URI
      url: s3://$THADAM_TEST_BUCKET/lake
      namespace: bench
      create_table: true
      store:
        endpoint: $THADAM_TEST_S3_ENDPOINT
        region: $THADAM_TEST_S3_REGION
        allow_http: true
        access_key_id: "\${env:THADAM_TEST_S3_ACCESS_KEY}"
        secret_access_key: "\${env:THADAM_TEST_S3_SECRET_KEY}"
      retry: ${BENCH_RETRY:-"{ initial: 200ms, max: 5s, jitter: true }"}
${3:-}
YAML
}

# bench_retention_yaml SPEC: `none`, or max_age=D,min_snapshots=N -> the iceberg sink's
# snapshot_retention line (indented 6 spaces, for bench_config's EXTRA_YAML); dies on a bad SPEC.
bench_retention_yaml() {
    local spec="$1" max_age="" min_snapshots="" part parts
    [[ "$spec" == none ]] && return 0
    IFS=',' read -r -a parts <<<"$spec"
    for part in "${parts[@]}"; do
        case "$part" in
            max_age=*) max_age="${part#max_age=}" ;;
            min_snapshots=*) min_snapshots="${part#min_snapshots=}" ;;
            *) die "--retention: unknown part '$part' (want max_age=D,min_snapshots=N or none)" ;;
        esac
    done
    [[ "$max_age" =~ ^[0-9]+(s|m|h|d)$ ]] || die "--retention: max_age must be a duration like 10m, not '$max_age'"
    [[ "$min_snapshots" =~ ^[0-9]+$ ]] || die "--retention: min_snapshots must be a whole number, not '$min_snapshots'"
    echo "      snapshot_retention: { max_age: $max_age, min_snapshots: $min_snapshots }"
}

# bench_warm_up NAME ROWS: ships one segment through S3 and registers it, so that the table
# exists before anything is timed; that segment is also the template of the placed copies.
# Fails clearly on a config the registrar refuses (exit 2, config.invalid), adding
# $WARMUP_REFUSED_HINT to the message when set.
bench_warm_up() {
    local rc=0
    # The config first (the shipper would refuse it too, less clearly): --check exits 2 on
    # config.invalid.
    "$BIN/registrar" --config "$STATE/$1.yaml" --check >"$STATE/$1-check.txt" 2>&1 || rc=$?
    if ((rc == 2)) && grep -q "config parsed" "$STATE/$1-check.txt"; then
        grep -v "^ok\|: ok" "$STATE/$1-check.txt" | head -n 5 >&2
        die "the registrar refused the config $STATE/$1.yaml (exit 2, config.invalid): see above${WARMUP_REFUSED_HINT:+. $WARMUP_REFUSED_HINT}"
    fi
    rc=0
    "$BIN/demo_shipper" --config "$STATE/$1.yaml" --segments 1 --rows "$2" --quiet >&2
    "$BIN/registrar" --config "$STATE/$1.yaml" --until-caught-up >/dev/null 2>>"$STATE/$1-warmup.log" || rc=$?
    if ((rc != 0)); then
        show_log_tail "$STATE/$1-warmup.log"
        die "the warm-up registrar failed (exit $rc)"
    fi
}

bench_machine_info() {
    local mem cpu
    mem="$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    cpu="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "| | |"
    echo "|---|---|"
    echo "| command | \`$command_line\` |"
    echo "| machine | $(nproc) cores (${cpu:-unknown}), $mem RAM, $(uname -sr) |"
    echo "| before | CPUs ${busy}% busy over 2 s with the servers idle; load $(cut -d' ' -f1-3 /proc/loadavg) |"
    echo "| registrar | thadam-iceberg $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+uncommitted changes'), release build, $(rustc --version | cut -d' ' -f1-2) |"
    echo "| catalog | Iceberg REST fixture $THADAM_ICEBERG_FIXTURE_VERSION ($(java -version 2>&1 | head -n1 | tr -d '"')), JdbcCatalog on SQLite |"
    echo "| S3 | $s3_variant |"
    echo "| pyiceberg | $("$PY" -c 'import pyiceberg, pyarrow, sys; print(f"pyiceberg {pyiceberg.__version__}, pyarrow {pyarrow.__version__}, Python {sys.version.split()[0]}")') |"
}
