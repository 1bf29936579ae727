#!/usr/bin/env bash
# Contention: registrars sharing one Iceberg table, with each other and with other writers,
# against the real servers on 127.0.0.1 (the Iceberg REST fixture, and s3s-fs or SeaweedFS).
#
#   1. fleet: N runners (examples/registrar.rs, release), each with its own segment catalog and
#      its own config (benches/common.sh's bench_config: create_table: true, default commit
#      settings), all on one table, each fed R segments/s for S seconds, then drained;
#   2. rivals: one runner fed --rival-rate segments/s for --rival-seconds, beside pyiceberg
#      writers appending to the same table at R commits/s in all (ceil(R) processes).
#
#   benches/contention.sh [--nodes "1 4 8 16 32"] [--rate 1] [--seconds 60] [--drain-cap 180]
#                         [--rivals "1 2 5"] [--rival-rate 10] [--rival-seconds 30]
#                         [--rows 100] [--rival-rows 10] [--s3 s3s-fs|seaweedfs] [--stock-s3]
#                         [--retention none|max_age=D,min_snapshots=N]
#                         [--faults [--fault-seed N] [--lost-intent-puts 0.05]
#                          [--failed-deletes 0.10] [--lost-delete-answers 0.05]
#                          [--lost-commit-answers 0.10] [--cleanup-cap 120]]
#                         [--catalog-delay D[:J]] [--s3-delay D[:J]] [--delay-seed N]
#                         [--registrar-bin PATH] [--together] [--in-process]
#                         [--kill-committer S [--restart-after 20]] [--stall-store S:D] [--keep]
#
# --nodes ""/--rivals "" skip that part. A list may repeat a value (each run gets its own table).
# --drain-cap       after the load window, how long to wait for every segment to be registered
#                   (a run that hits it says so; its exactly-once check is INCOMPLETE, not FAIL)
# --retention       the runners' snapshot_retention (benches/common.sh bench_retention_yaml), so
#                   that metadata.json stops growing with the run as a fleet's should; the
#                   latency of a segment whose snapshot expired is taken from its manifest
#                   list's mtime, and every manifest list left of an expired snapshot counts as
#                   named (retention is metadata-only and deletes no file)
# --s3              the S3 server: s3s-fs (the default, with the TCP_NODELAY shim) or seaweedfs
#                   (SeaweedFS, the suite's S3: weed mini, stock). s3s-fs answers a LIST with
#                   a prefix by walking the whole bucket (every object of the run), so a
#                   fleet's LIST of its intents costs more as the run goes; SeaweedFS lists
#                   by prefix, as S3 does. The orphans and intents left are read through S3
#                   either way.
# --stock-s3        run s3s-fs without the TCP_NODELAY shim (benches/e2e/nodelay.c): every GET
#                   with a body then stalls ~44 ms (Nagle meeting delayed ACK)
# --faults          put fault fronts (benches/contention/fronts.py: HTTP/1.1 proxies on
#                   127.0.0.1, asyncio, one process each) between the runners and the servers:
#                   the runners' configs name the fronts (catalog_uri, store.endpoint); the
#                   feeders, the rivals and every check after the run go to the servers
#                   directly. The fronts forward every request and answer byte for byte (SigV4
#                   still verifies) except, drawn per request with the seed:
#                   - S3: a PUT under `/_thadam-intents/` that S3 stored (2xx) loses its answer
#                     (the connection is dropped: stored, unheard) with --lost-intent-puts;
#                     a DELETE or bulk delete (`POST ?delete`) is answered `500 InternalError`
#                     without being forwarded with --failed-deletes, else forwarded and, when
#                     S3 answered 2xx, its answer lost with --lost-delete-answers (object_store
#                     retries some of these itself);
#                   - catalog: a commit (`POST .../namespaces/<ns>/tables/<t>` with an
#                     `add-snapshot` update) that the catalog applied (2xx) loses its answer
#                     with --lost-commit-answers ("commit state unknown");
#                   a request whose answer was not 2xx keeps it (counted as spared). After the
#                   drain, with the runners still running, the run polls once a second until
#                   the table's intent folder is empty (listed through S3) and every runner's
#                   backlog gauge is 0, or --cleanup-cap seconds pass, and reports how long
#                   that took; then, as in every run, exactly once is checked, and anything
#                   left FAILs it: an object under `_thadam-intents/<table uuid>/`, a backlog
#                   not back to 0, or (fleet runs) a manifest list or manifest that no
#                   snapshot names (rival runs: pyiceberg may leave its own, so only the
#                   intents count there). A faults run that hits the drain cap fails too
#                   (INCOMPLETE). The fronts' logs (one line per injected fault, with
#                   the request's target) are in the state dir (fronts/*.log, kept with
#                   --keep); the counts per run are in the "Faults injected" table.
# --fault-seed      the fronts' seed (default: drawn at random); printed in the report
# --catalog-delay D[:J], --s3-delay D[:J]
#                   a server far away, as edge nodes see theirs: a delay front
#                   (benches/contention/delay_front.py: TCP on 127.0.0.1, asyncio, one process
#                   each) between the runners and the catalog, or S3, that holds every request
#                   for a delay drawn uniformly from [D - J, D + J] ms (D, J in ms, J <= D; `100:20`
#                   is 100 +- 20 ms; `D` alone is J = 0) and forwards everything else untouched.
#                   Per request: the front finds where each HTTP/1.1 request starts (head, then
#                   a Content-Length or chunked body streamed through), so every request of a
#                   keep-alive connection waits once and a large PUT body is not delayed per
#                   read; answers stream back as they come. A new connection also waits one
#                   draw before the front connects on (the handshake's round trip; TLS is not
#                   modelled), so its first request waits two. Only the runners' configs name
#                   the fronts (catalog_uri, store.endpoint; with --faults a delay front sits
#                   before the fault front); the feeders, the rivals, pyiceberg's checks and
#                   the servers' own clients go to the servers directly. The report's header
#                   says which delays were on, with the requests delayed and the fronts' CPU.
# --delay-seed      the delay fronts' seed (default: drawn at random); printed in the report,
#                   so that a run's sequence of delays can be drawn again
# --lost-intent-puts, --failed-deletes, --lost-delete-answers, --lost-commit-answers
#                   the fractions above (0..1; defaults 0.05, 0.10, 0.05, 0.10); only with
#                   --faults
# --cleanup-cap     with --faults: how long the intents may take to be cleaned after the drain
#                   (default 120 s; an intent whose delete failed goes with its carrier's next
#                   deletes, one whose PUT answer was lost with its publisher's fallback
#                   commit, 5-16 s, so up to ~1 min)
# --registrar-bin   use this runner binary instead of building one (`cargo build --release
#                   --example registrar` in $THADAM_CACHE/target), e.g. for a before/after A/B
#                   of two builds copied aside; the binary is copied into the state dir either
#                   way, so a concurrent build cannot swap it mid-run
# --together        fleet runs start together, as after a fleet-wide upgrade or an outage longer
#                   than the lane memory: no warm-up; the table is made by a registrar of its own
#                   log with commit.intents: false (which then stops, and never ranks as a
#                   committer), and the runners meet the load without having committed: every
#                   node's first segments are measured from their upload
# --in-process      fleet runs: all N nodes in one process (benches/fleet_sim, built with
#                   `cargo build --release --bench fleet_sim`): each node a registrar started
#                   through the public API with a ChannelFeed, its own config copy (sink id),
#                   lane and log id, the node's pipeline in the same process (it ships the
#                   segments itself, on the feeders' schedule, through its own S3 client); N up
#                   to 2000. The table is made by a maker as with --together; without
#                   --together every node then ships and registers one warm-up segment before
#                   the load. The report adds the process's memory per node. Not with
#                   --kill-committer.
# --kill-committer  fleet runs: S seconds into the load window, SIGKILL the committer (the
#                   runner with the most landed commits) and restart it --restart-after seconds
#                   later (its log's segments wait for it); the report adds, for the segments
#                   uploaded within 30 s of the kill either side, p50 / p99 / max upload →
#                   snapshot, and the longest the table went without a snapshot after the kill
# --stall-store     fleet runs: S seconds into the load window, stop the S3 server (SIGSTOP) for
#                   D seconds, then let it go on (SIGCONT): a store that stalls (a maintenance
#                   pass, a slow disk, throttling), as the catalog sees it too (its metadata.json
#                   goes to the same store). The report adds, for the segments uploaded within
#                   30 s of the stall either side, p50 / p99 / max upload → snapshot, and the
#                   longest the table went without a snapshot after it
# --keep            keep the state dir (configs, segment catalogs, runner/feeder/rival logs,
#                   raw JSON results); the servers are stopped either way
#
# How each run goes (benches/contention/contention.py): one segment per node is shipped and
# node 0 registers its own with --until-caught-up (creating the table); the N runners start
# (--metrics-addr 127.0.0.1:0) and each registers its warm-up segment, so every runner has
# loaded the table and committed before anything is timed. Then feeder processes (one per 32
# nodes, their connections opened before the window) ship each node's segments on a
# wall-clock schedule (node k's segment i at t0 + (i + k/N)/R): a real Parquet file with
# field IDs (the demo's telemetry schema), PUT through S3, then its `uploaded` record appended
# to that node's catalog, stamped at that moment. After the window,
# the drain waits until every node registered all it was fed. Figures: see the notes printed
# under the tables. Every run checks exactly once with pyiceberg (`inspect.files()` of the
# current snapshot against the keys in the logs); the script exits 1 if any run FAILs.
#
# Markdown on stdout, progress on stderr. Everything it starts (servers, runners, feeder,
# rivals, fault and delay fronts) is stopped by pid on exit. A full default run takes ~15 min on 2 cores when built.
set -euo pipefail

# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

nodes="1 4 8 16 32"
rate=1
seconds=60
drain_cap=180
rivals="1 2 5"
rival_rate=10
rival_seconds=30
rows=100
rival_rows=10
stock_s3=0
s3=s3s-fs
retention=none
registrar_bin=""
keep=0
faults=0
fault_seed=""
lost_intent_puts=0.05
failed_deletes=0.10
lost_delete_answers=0.05
lost_commit_answers=0.10
cleanup_cap=120
fault_options=()
catalog_delay=""
s3_delay=""
delay_seed=""
together=0
in_process=0
kill_committer=""
restart_after=20
stall_store=""
# The command as typed: arguments with spaces (or empty) in single quotes.
command_line="benches/contention.sh"
for arg in "$@"; do
    if [[ -z "$arg" || "$arg" == *[[:space:]]* ]]; then
        command_line+=" '$arg'"
    else
        command_line+=" $arg"
    fi
done
while (($#)); do
    case "$1" in
        --nodes) nodes="${2//,/ }"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --drain-cap) drain_cap="$2"; shift 2 ;;
        --rivals) rivals="${2//,/ }"; shift 2 ;;
        --rival-rate) rival_rate="$2"; shift 2 ;;
        --rival-seconds) rival_seconds="$2"; shift 2 ;;
        --rows) rows="$2"; shift 2 ;;
        --rival-rows) rival_rows="$2"; shift 2 ;;
        --stock-s3) stock_s3=1; shift ;;
        --s3) s3="$2"; shift 2 ;;
        --retention) retention="$2"; shift 2 ;;
        --registrar-bin) registrar_bin="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        --faults) faults=1; shift ;;
        --fault-seed) fault_seed="$2"; fault_options+=("$1"); shift 2 ;;
        --lost-intent-puts) lost_intent_puts="$2"; fault_options+=("$1"); shift 2 ;;
        --failed-deletes) failed_deletes="$2"; fault_options+=("$1"); shift 2 ;;
        --lost-delete-answers) lost_delete_answers="$2"; fault_options+=("$1"); shift 2 ;;
        --lost-commit-answers) lost_commit_answers="$2"; fault_options+=("$1"); shift 2 ;;
        --cleanup-cap) cleanup_cap="$2"; fault_options+=("$1"); shift 2 ;;
        --catalog-delay) catalog_delay="$2"; shift 2 ;;
        --s3-delay) s3_delay="$2"; shift 2 ;;
        --delay-seed) delay_seed="$2"; shift 2 ;;
        --together) together=1; shift ;;
        --in-process) in_process=1; shift ;;
        --kill-committer) kill_committer="$2"; shift 2 ;;
        --restart-after) restart_after="$2"; shift 2 ;;
        --stall-store) stall_store="$2"; shift 2 ;;
        *) die "unknown argument $1 (see the header of benches/contention.sh)" ;;
    esac
done
max_nodes=$((in_process ? 2000 : 256))
for n in $nodes; do
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || ((n > max_nodes)); then
        die "--nodes: not a whole number in 1..$max_nodes: $n"
    fi
done
((in_process == 0 || ${#kill_committer} == 0)) || die "--kill-committer is a fleet of processes' (not with --in-process)"
[[ -z "$stall_store" || "$stall_store" =~ ^[0-9]+(\.[0-9]+)?:[0-9]+(\.[0-9]+)?$ ]] ||
    die "--stall-store: S:D (seconds into the window : seconds stopped), not $stall_store"
for n in "$seconds" "$drain_cap" "$rival_seconds" "$rows" "$rival_rows"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "not a positive whole number: $n"
done
for r in "$rate" "$rival_rate" $rivals; do
    if ! [[ "$r" =~ ^[0-9]+([.][0-9]+)?$ ]] || ! awk -v r="$r" 'BEGIN { exit !(r > 0) }'; then
        die "not a positive number: $r"
    fi
done
[[ -n "$nodes$rivals" ]] || die "nothing to run: --nodes and --rivals are both empty"
[[ "$s3" == s3s-fs || "$s3" == seaweedfs ]] || die "--s3 is s3s-fs or seaweedfs, not $s3"
[[ "$s3" == s3s-fs || "$stock_s3" == 0 ]] || die "--stock-s3 is a variant of --s3 s3s-fs"
if ((faults)); then
    for f in "$lost_intent_puts" "$failed_deletes" "$lost_delete_answers" "$lost_commit_answers"; do
        if ! [[ "$f" =~ ^[0-9]*([.][0-9]+)?$ && "$f" =~ [0-9] ]] || ! awk -v f="$f" 'BEGIN { exit !(f <= 1) }'; then
            die "a fault fraction is a number in 0..1, not $f"
        fi
    done
    awk -v a="$failed_deletes" -v b="$lost_delete_answers" 'BEGIN { exit !(a + b <= 1) }' ||
        die "--failed-deletes + --lost-delete-answers exceed 1"
    [[ "$cleanup_cap" =~ ^[0-9]+$ ]] || die "--cleanup-cap: not a whole number of seconds: $cleanup_cap"
    if [[ -z "$fault_seed" ]]; then
        fault_seed="$(((RANDOM << 15) | RANDOM))"
    fi
    [[ "$fault_seed" =~ ^[0-9]+$ ]] || die "--fault-seed: not a whole number: $fault_seed"
elif ((${#fault_options[@]})); then
    die "${fault_options[0]} is an option of --faults"
fi
for d in "$catalog_delay" "$s3_delay"; do
    [[ -z "$d" ]] && continue
    if ! [[ "$d" =~ ^[0-9]+([.][0-9]+)?(:[0-9]+([.][0-9]+)?)?$ ]] ||
        ! awk -v d="${d%%:*}" -v j="$([[ "$d" == *:* ]] && echo "${d#*:}" || echo 0)" 'BEGIN { exit !(j <= d) }'; then
        die "a delay is D or D:J in milliseconds with J <= D (e.g. 100:20), not $d"
    fi
done
if [[ -n "$catalog_delay$s3_delay" ]]; then
    if [[ -z "$delay_seed" ]]; then
        delay_seed="$(((RANDOM << 15) | RANDOM))"
    fi
    [[ "$delay_seed" =~ ^[0-9]+$ ]] || die "--delay-seed: not a whole number: $delay_seed"
elif [[ -n "$delay_seed" ]]; then
    die "--delay-seed is an option of --catalog-delay and --s3-delay"
fi
extra="$(bench_retention_yaml "$retention")"
if [[ -n "$registrar_bin" ]]; then
    [[ -x "$registrar_bin" && -f "$registrar_bin" ]] || die "--registrar-bin $registrar_bin: not an executable file"
    registrar_bin="$(cd "$(dirname "$registrar_bin")" && pwd)/$(basename "$registrar_bin")"
fi

# tree_identity: the checkout's commit, and a hash of what differs from it in what the runner is
# built from (src, examples, Cargo.*), so that two builds of an uncommitted tree tell apart.
tree_identity() {
    local head paths=(src examples Cargo.toml Cargo.lock) untracked
    head="$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    untracked="$(git ls-files --others --exclude-standard -- "${paths[@]}" 2>/dev/null || true)"
    if git diff --quiet HEAD -- "${paths[@]}" 2>/dev/null && [[ -z "$untracked" ]]; then
        echo "$head"
        return
    fi
    echo "$head+uncommitted changes (work-tree hash $( {
        git diff HEAD -- "${paths[@]}"
        printf '%s\n' "$untracked"
        [[ -z "$untracked" ]] || xargs -d '\n' cat -- <<<"$untracked"
    } | sha256sum | cut -c1-8))"
}

# contention_cleanup: the driver first (it stops its runners, feeder and rivals), then anything
# it left in $STATE/pids (matched on the state dir, so a recycled pid is never signalled), then
# bench_cleanup (servers, state dir), which exits with the status this trap was entered with.
# shellcheck disable=SC2317  # both are reached through the EXIT trap only
keep_status() { return "$1"; }
# shellcheck disable=SC2317
contention_cleanup() {
    local rc=$? pid f
    trap - EXIT INT TERM
    for pid in "${REG_PIDS[@]}"; do
        if pid_alive "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    REG_PIDS=()
    if [[ -n "$STATE" && -d "$STATE/pids" ]]; then
        for f in "$STATE"/pids/*.pid; do
            [[ -e "$f" ]] || continue
            stop_pidfile "$f" "$(basename "$f" .pid)" 5 "$STATE" || true
        done
    fi
    if [[ -n "$STATE" && -d "$STATE/fronts" ]]; then
        for f in "$STATE"/fronts/*.pid; do
            [[ -e "$f" ]] || continue
            stop_pidfile "$f" "the $(basename "$f" .pid) front" 5 "$STATE" || true
        done
    fi
    if ((rc == 0)); then
        bench_cleanup
    else
        keep_status "$rc" || bench_cleanup
    fi
}

# contention_start: what bench_start does, but the build is optional (--registrar-bin) and so
# is the TCP_NODELAY shim (--stock-s3).
contention_start() {
    local src s3_pid_
    trap contention_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bench_ensure_packages
    "$THADAM_REPO_ROOT/scripts/install-tools" >&2
    PY="$THADAM_VENV_PYTHON"
    GROWTH="$THADAM_REPO_ROOT/benches/growth"
    HELPER="$THADAM_REPO_ROOT/benches/contention/contention.py"
    export PYTHONDONTWRITEBYTECODE=1
    if [[ -n "$registrar_bin" ]]; then
        src="$registrar_bin"
        registrar_desc="prebuilt \`$registrar_bin\` (modified $(date -r "$src" '+%Y-%m-%d %H:%M:%S'))"
    else
        export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$THADAM_CACHE/target}"
        log "building the release runner (cargo build --release --example registrar)"
        registrar_desc="thadam-iceberg $(tree_identity) at build time"
        cargo build --release --locked --example registrar >&2
        src="$CARGO_TARGET_DIR/release/examples/registrar"
        registrar_desc+=", release build, $(rustc --version | cut -d' ' -f1-2)"
    fi
    if ((in_process)); then
        export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$THADAM_CACHE/target}"
        log "building the fleet simulator (cargo build --release --bench fleet_sim)"
        sim_src="$(cargo build --release --locked --bench fleet_sim --message-format=json |
            "$PY" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fleet_sim" and m.get("executable"):
        print(m["executable"])')"
        [[ -x "$sim_src" ]] || die "cargo built no fleet_sim executable"
        sim_desc="benches/fleet_sim of thadam-iceberg $(tree_identity), release build"
    fi
    busy="$(bench_cpu_busy_pct)"
    if ((busy > 20)); then
        warn "the CPUs are ${busy}% busy before the benchmark starts: other work will distort the figures"
    fi
    STATE="$(mktemp -d "${TMPDIR:-/tmp}/thadam-contention.XXXXXX")"
    R="$STATE/results"
    mkdir -p "$R" "$STATE/pids"
    cp "$src" "$STATE/registrar"
    REGISTRAR="$STATE/registrar"
    if ((in_process)); then
        cp "$sim_src" "$STATE/fleet_sim"
        sim_desc+=", sha256 $(sha256sum "$STATE/fleet_sim" | cut -c1-12)"
    fi
    registrar_desc+=", sha256 $(sha256sum "$REGISTRAR" | cut -c1-12)"
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$STATE/crc32c.so" "$GROWTH/crc32c.c"
    CRC_LIB="$STATE/crc32c.so"
    if [[ "$s3" == seaweedfs ]]; then
        THADAM_S3=seaweedfs THADAM_NESSIE=0 "$THADAM_REPO_ROOT/scripts/servers" start "$STATE/srv" >&2
        s3_variant="SeaweedFS $THADAM_SEAWEEDFS_VERSION (weed mini: master, volume, filer and S3 in one process), stock"
    elif ((stock_s3)); then
        env -u THADAM_S3_PRELOAD THADAM_S3=s3s-fs THADAM_NESSIE=0 THADAM_SEAWEEDFS=0 \
            "$THADAM_REPO_ROOT/scripts/servers" start "$STATE/srv" >&2
        s3_variant="**stock** s3s-fs $THADAM_S3S_VERSION, no TCP_NODELAY shim (--stock-s3: GETs with a body stall ~44 ms)"
    else
        gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$STATE/nodelay.so" \
            "$THADAM_REPO_ROOT/benches/e2e/nodelay.c" -ldl
        # Only what the fleet uses: an idle Nessie or weed mini beside the fixture takes CPU
        # from the two cores the figures are about.
        THADAM_S3=s3s-fs THADAM_S3_PRELOAD="$STATE/nodelay.so" THADAM_NESSIE=0 THADAM_SEAWEEDFS=0 \
            "$THADAM_REPO_ROOT/scripts/servers" start "$STATE/srv" >&2
        s3_pid_="$(cat "$STATE/srv/s3s-fs.pid")"
        grep -q "$STATE/nodelay.so" "/proc/$s3_pid_/maps" ||
            die "nodelay.so is not mapped into s3s-fs (pid $s3_pid_): the preload did not take"
        s3_variant="s3s-fs $THADAM_S3S_VERSION with TCP_NODELAY on accepted sockets (LD_PRELOAD benches/e2e/nodelay.c)"
    fi
    # shellcheck source=/dev/null
    source "$STATE/srv/env"
    s3_pid="$(cat "$STATE/srv/$s3.pid")"
    catalog_pid="$(cat "$STATE/srv/rest-fixture.pid")"
    runner_catalog_uri="$THADAM_TEST_CATALOG_URI"
    runner_s3_endpoint="$THADAM_TEST_S3_ENDPOINT"
    if ((faults)); then
        start_fronts
        runner_catalog_uri="$front_catalog"
        runner_s3_endpoint="$front_s3"
    fi
    if [[ -n "$catalog_delay" ]]; then
        start_delay_front catalog "$catalog_delay" "$runner_catalog_uri"
        runner_catalog_uri="http://127.0.0.1:$(cat "$STATE/fronts/delay-catalog.port")"
    fi
    if [[ -n "$s3_delay" ]]; then
        start_delay_front s3 "$s3_delay" "$runner_s3_endpoint"
        runner_s3_endpoint="http://127.0.0.1:$(cat "$STATE/fronts/delay-s3.port")"
    fi
}

# start_front KIND ARGS...: one fault front (fronts.py KIND) on a free port of 127.0.0.1; its
# pid in $STATE/fronts/KIND.pid (contention_cleanup stops it), its log in $STATE/fronts/KIND.log.
start_front() {
    local kind="$1" i
    shift
    "$PY" "$THADAM_REPO_ROOT/benches/contention/fronts.py" "$kind" --state "$STATE" \
        --seed "$fault_seed" --port-file "$STATE/fronts/$kind.port" "$@" \
        </dev/null >/dev/null 2>"$STATE/fronts/$kind.log" &
    echo "$!" >"$STATE/fronts/$kind.pid"
    await_front "$kind" "the $kind fault front"
}

# await_front NAME WHAT: waits for $STATE/fronts/NAME.port (the front's port), or dies.
await_front() {
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -s "$STATE/fronts/$1.port" ]] && return 0
        pid_alive "$(cat "$STATE/fronts/$1.pid")" || break
        sleep 0.1
    done
    show_log_tail "$STATE/fronts/$1.log" 20
    die "$2 did not start"
}

# start_delay_front KIND D[:J] UPSTREAM: a delay front (delay_front.py) on a free port of
# 127.0.0.1 before UPSTREAM (the server, or its fault front); pid, port, log and stats (written
# on stop) in $STATE/fronts/delay-KIND.* (contention_cleanup stops it if stop_delay_fronts did not).
start_delay_front() {
    local kind="$1" name="delay-$1"
    mkdir -p "$STATE/fronts"
    "$PY" "$THADAM_REPO_ROOT/benches/contention/delay_front.py" --name "$kind" --delay "$2" \
        --upstream "$3" --seed "$delay_seed" --state "$STATE" \
        --port-file "$STATE/fronts/$name.port" --stats-file "$STATE/fronts/$name.json" \
        </dev/null >/dev/null 2>"$STATE/fronts/$name.log" &
    echo "$!" >"$STATE/fronts/$name.pid"
    await_front "$name" "the $kind delay front"
    log "$kind delay front (${2/:/±} ms, seed $delay_seed): http://127.0.0.1:$(cat "$STATE/fronts/$name.port") -> $3"
}

# stop_delay_fronts: after the runs, each delay front's CPU (utime+stime, s) into
# delay_cpu[KIND], then a TERM: it writes its counts to $STATE/fronts/delay-KIND.json.
declare -A delay_cpu=()
stop_delay_fronts() {
    local kind pid
    for kind in catalog s3; do
        [[ -f "$STATE/fronts/delay-$kind.pid" ]] || continue
        pid="$(cat "$STATE/fronts/delay-$kind.pid")"
        delay_cpu[$kind]="$(awk -v t="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.1f", ($12 + $13) / t }' \
            "/proc/$pid/stat" 2>/dev/null || echo '?')"
        stop_pidfile "$STATE/fronts/delay-$kind.pid" "the $kind delay front" 5 "$STATE" || true
    done
}

# delay_row: the report's header row on the delay fronts (--catalog-delay, --s3-delay), with
# their counts (written on stop: call stop_delay_fronts first).
delay_row() {
    local kind label spec stats row=""
    if [[ -z "$catalog_delay$s3_delay" ]]; then
        echo "| far away | no: the runners reach the servers on 127.0.0.1 directly |"
        return
    fi
    for kind in catalog s3; do
        if [[ "$kind" == catalog ]]; then spec="$catalog_delay" label=catalog; else spec="$s3_delay" label=S3; fi
        row+="${row:+; }"
        if [[ -z "$spec" ]]; then
            row+="$label direct"
            continue
        fi
        stats="$("$PY" - "$STATE/fronts/delay-$kind.json" 2>/dev/null <<'PY' || echo "no counts (see fronts/delay-$kind.log)"
import json, sys
s = json.load(open(sys.argv[1]))
d = s["delay_ms_drawn"]
print(f"{s['requests']:,} requests on {s['connections']:,} connections (at most "
      f"{s['peak_open']} open, {s['refused']} refused), draws mean {d['mean']} ms "
      f"in [{d['min']}, {d['max']}]")
PY
        )"
        row+="$label **${spec/:/ ± } ms** per request and per new connection: $stats, front CPU ${delay_cpu[$kind]:-?} s"
    done
    echo "| far away | the runners' requests through delay fronts on 127.0.0.1 (benches/contention/delay_front.py, seed $delay_seed), over all runs: $row |"
}

# start_fronts: the S3 and catalog fault fronts (--faults); sets front_s3, front_catalog (their
# URLs) and front_pids.
start_fronts() {
    mkdir -p "$STATE/fronts"
    start_front s3 --upstream "$THADAM_TEST_S3_ENDPOINT" --lost-intent-puts "$lost_intent_puts" \
        --failed-deletes "$failed_deletes" --lost-delete-answers "$lost_delete_answers"
    start_front catalog --upstream "$THADAM_TEST_CATALOG_URI" \
        --lost-commit-answers "$lost_commit_answers"
    front_s3="http://127.0.0.1:$(cat "$STATE/fronts/s3.port")"
    front_catalog="http://127.0.0.1:$(cat "$STATE/fronts/catalog.port")"
    front_pids="s3=$(cat "$STATE/fronts/s3.pid"),catalog=$(cat "$STATE/fronts/catalog.pid")"
    log "fault fronts (seed $fault_seed): S3 $front_s3 -> $THADAM_TEST_S3_ENDPOINT, catalog $front_catalog -> $THADAM_TEST_CATALOG_URI"
}

# runner_config NAME DATASET [EXTRA_YAML]: bench_config, through the delay fronts and the fault
# fronts when on (the catalog URI and the store's endpoint, set by contention_start; the rest,
# keys and bucket, as they are).
runner_config() {
    THADAM_TEST_CATALOG_URI="$runner_catalog_uri" THADAM_TEST_S3_ENDPOINT="$runner_s3_endpoint" \
        bench_config "$@"
}

# run_driver MODE DATASET RATE SECONDS RIVALS NAME...: one run (contention.py run) on table
# bench.DATASET, its nodes configured as NAME... (bench_config); the JSON goes to $R.
results=()
run_driver() {
    local mode="$1" ds="$2" run_rate="$3" run_seconds="$4" run_rivals="$5" out pid names
    local -a fault_args=() together_args=()
    shift 5
    if ((together || in_process)) && [[ "$mode" == fleet ]]; then
        runner_config "$ds-maker" "$ds" "${extra:+$extra
}      commit: { intents: false }"
        together_args=(--together "$ds-maker")
    fi
    if ((in_process)) && [[ "$mode" == fleet ]]; then
        together_args+=(--in-process "$STATE/fleet_sim" --sim-nodes "$sim_nodes")
        ((together)) || together_args+=(--sim-warm-up)
    fi
    if [[ -n "$kill_committer" && "$mode" == fleet ]]; then
        together_args+=(--kill-committer "$kill_committer" --restart-after "$restart_after")
    fi
    if [[ -n "$stall_store" && "$mode" == fleet ]]; then
        together_args+=(--stall-store "$stall_store")
    fi
    names="$(IFS=,; echo "$*")"
    out="$R/$mode-$ds.json"
    if ((faults)); then
        fault_args=(--fronts "s3=$front_s3,catalog=$front_catalog" --front-pids "$front_pids"
            --fault-seed "$fault_seed" --cleanup-cap "$cleanup_cap")
    fi
    "$PY" "$HELPER" run --mode "$mode" --table "bench.$ds" --dataset "$ds" --names "$names" \
        --state "$STATE" --registrar "$REGISTRAR" --crc-lib "$CRC_LIB" \
        --s3-pid "$s3_pid" --catalog-pid "$catalog_pid" --rate "$run_rate" \
        --seconds "$run_seconds" --drain-cap "$drain_cap" --rivals "$run_rivals" \
        --rows "$rows" --rival-rows "$rival_rows" "${fault_args[@]}" "${together_args[@]}" \
        >"$out" &
    pid=$!
    REG_PIDS=("$pid")
    wait "$pid" || die "the $mode run on bench.$ds failed (exit $?); logs in $STATE (kept with --keep)"
    REG_PIDS=()
    results+=("$out")
}

# unique_dataset BASE: BASE, or BASE_2, BASE_3... when a list repeats a value.
declare -A used_datasets=()
unique_dataset() {
    local ds="$1" k=2
    while [[ -n "${used_datasets[$ds]:-}" ]]; do
        ds="$1_$k"
        k=$((k + 1))
    done
    used_datasets[$ds]=1
    echo "$ds"
}

contention_start
started="$(now_s)"

# The sink's default retry policy (1s, 60s): what a user runs, and what a 409 backoff that
# followed retry.max would stretch to.
export BENCH_RETRY="{ initial: 1s, max: 60s, jitter: true }"
for n in $nodes; do
    ds="$(unique_dataset "f$n")"
    names=()
    # In one process, every node copies one config.
    for ((i = 0; i < (in_process ? 1 : n); i++)); do
        names+=("$ds-$(printf '%02d' "$i")")
        runner_config "${names[-1]}" "$ds" "$extra"
    done
    sim_nodes="$n"
    log "fleet: $n $( ((in_process)) && echo "nodes in one process" || echo "runner(s)") on bench.$ds, ${rate} seg/s each for ${seconds}s"
    run_driver fleet "$ds" "$rate" "$seconds" 0 "${names[@]}"
done

for r in $rivals; do
    ds="$(unique_dataset "r${r//./_}")"
    runner_config "$ds-00" "$ds" "$extra"
    log "rivals: one runner on bench.$ds at ${rival_rate} seg/s for ${rival_seconds}s, pyiceberg at $r commits/s"
    run_driver rivals "$ds" "$rival_rate" "$rival_seconds" "$r" "$ds-00"
done

stop_delay_fronts
log "done in $(elapsed "$started")s; the report follows"
echo "## Contention: registrars sharing one table"
echo
bench_machine_info | grep -v '^| registrar |'
echo "| registrar | $registrar_desc |"
((in_process == 0)) || echo "| fleet | in one process: $sim_desc; every node a registrar (Registrar::builder + ChannelFeed) in one tokio runtime (2 worker threads), its segments shipped by the same process |"
echo "| runners | benches/common.sh bench_config: create_table: true, default commit settings (max_segments 500, max_bytes 1GiB, linger 0s, min_interval 0s), retry the sink's default { initial: 1s, max: 60s }, snapshot retention $retention; --metrics-addr 127.0.0.1:0 |"
delay_row
if ((in_process)); then
    shipped_by="by the simulator's own pipelines (one S3 client, straight to the server), then fed to each node's ChannelFeed"
else
    shipped_by="by feeder processes (one per 32 nodes, connections opened before the window), then recorded"
fi
echo "| segments | ${rows} rows each (zstd Parquet, the demo's telemetry schema, field IDs 1–7), PUT through S3 $shipped_by; keys \`lake/thadam/v1/bench/<table>/data/n<node>-<i>.parquet\`; drain cap ${drain_cap}s |"
if ((faults)); then
    echo "| faults | fronts on 127.0.0.1 between the runners and the servers (benches/contention/fronts.py), seed $fault_seed: S3 intent PUTs' answers lost $lost_intent_puts, deletes (DELETE, bulk) answered 500 unforwarded $failed_deletes, their answers lost $lost_delete_answers; catalog commits' answers lost $lost_commit_answers (answers lost only when 2xx); cleanup cap ${cleanup_cap}s after the drain |"
fi
[[ -z "$rivals" ]] || echo "| rivals | ceil(R) pyiceberg processes, R commits/s in all: each commit loads the table, then \`table.append\` of ${rival_rows} rows (pyiceberg's own 409 retries: 4, then it gives up) |"
echo
rc=0
"$PY" "$HELPER" report --results "${results[@]}" || rc=$?
cat <<'NOTES'
Notes. *achieved*: segments whose registering snapshot's timestamp-ms falls in the load window,
divided by the window. *catalog commits/s*: the registrars' snapshots whose timestamp-ms falls
in the load window, divided by the window (the drain after it is mostly idle: a node that only
publishes learns what was carried at its fallback; all snapshots are in the details). *upload → snapshot*: per segment, the timestamp-ms of the snapshot whose
manifest entry added its file minus the `uploaded_at_ms` of its record (stamped right after its
PUT); warm-up segments excluded. *409s per landed commit*: sum over the runners of
`thadam_iceberg_commits_total{outcome="conflict"}` / `{outcome="ok"}`, window and drain (the
warm-up subtracted). *orphans*: `.avro` objects under the table's `metadata/` (listed through
S3), after every writer stopped: manifest lists no snapshot names / manifests no
snapshot's manifest list names (pyiceberg's and the runners' alike; no snapshot is expired).
*CPU*: utime+stime from /proc over window and drain (catalog = the fixture's JVM, S3 = the S3
server, which also serves the feeder's PUTs; registrars summed). *exactly once*: the data files of the
current snapshot (pyiceberg `inspect.files()`) against the keys recorded in the logs: each once,
none missing, nothing else (in the rival runs, the rest must be exactly the rivals' appends).
*commit window*: `thadam_iceberg_commit_window_seconds`, summed over runners, p99 interpolated
in its buckets; *window phases*: `thadam_iceberg_commit_phase_seconds` by phase (the load,
when the attempt loads first; the build, from the table held to the request; the catalog's
answer), p99 the same way; *commit interval*: `thadam_iceberg_commit_interval_seconds` of each runner at
the end; *attempt files*: `thadam_iceberg_attempt_files_deleted_total`; "–": no such series
(not in this build, or a counter never incremented).
NOTES
if ((faults)); then
    cat <<'NOTES'
*Faults injected* (--faults), per run (the warm-up included), from the fronts' counts: a lost
answer is a request forwarded and answered 2xx by the server, then its connection dropped
unanswered; a failed delete is answered `500 InternalError` by the front, never forwarded
(object_store retries 5xx, so most are retried before the registrar sees one); *spared*: a
request drawn for a lost answer whose server answer was not 2xx (passed on as it was). *intent
objects / backlogs at drain end → cleanup*: objects under the table's intent folder and the
runners' `thadam_iceberg_backlog_segments` summed when the drain ended, and how long (runners
still running) until both were 0. *left*: after the runners stopped; any of it, or a backlog
not back to 0 within the cap, FAILs the run (orphans only in fleet runs).
NOTES
fi
exit "$rc"
