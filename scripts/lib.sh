# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables below are used by the scripts that source this file
# Shared helpers for the scripts in scripts/ and .ci/run. Source it; do not run it.
#
# Everything that is installed lives outside the checkout, under $THADAM_CACHE, so that a fresh
# clone (CI) reuses what an earlier run on the same machine installed, and a fresh machine gets
# everything from scripts/install-tools alone.

if [[ -n "${THADAM_LIB_SOURCED:-}" ]]; then
    return 0
fi
THADAM_LIB_SOURCED=1

THADAM_CACHE="${THADAM_CACHE:-$HOME/.cache/thadam-iceberg}"
export THADAM_CACHE

# Pinned tool versions. Change them here only.
THADAM_S3S_VERSION="0.14.1"
THADAM_ICEBERG_FIXTURE_VERSION="1.10.1"
THADAM_PYICEBERG_VERSION="0.12.0"
THADAM_PYARROW_VERSION="26.0.1"
THADAM_BOTO3_VERSION="1.44.5"

THADAM_TOOLS_DIR="$THADAM_CACHE/tools"
THADAM_JARS_DIR="$THADAM_CACHE/jars"
THADAM_VENV_DIR="$THADAM_CACHE/venv"
THADAM_LOGS_DIR="$THADAM_CACHE/logs"
THADAM_S3S_BIN="$THADAM_TOOLS_DIR/bin/s3s-fs"
THADAM_FIXTURE_JAR="$THADAM_JARS_DIR/iceberg-open-api-$THADAM_ICEBERG_FIXTURE_VERSION.jar"
THADAM_VENV_PYTHON="$THADAM_VENV_DIR/bin/python"

# Repository root (the folder above scripts/).
THADAM_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_thadam_script_name="$(basename "${0:-thadam}")"

log() {
    printf '[%s %s] %s\n' "$(date +%H:%M:%S)" "$_thadam_script_name" "$*" >&2
}

warn() {
    log "WARNING: $*"
}

die() {
    log "ERROR: $*"
    exit 1
}

# now_s: seconds since the epoch, with fractions when the shell has them.
now_s() {
    if [[ -n "${EPOCHREALTIME:-}" ]]; then
        printf '%s\n' "${EPOCHREALTIME/,/.}"
    else
        date +%s
    fi
}

# elapsed START: seconds since START (from now_s), one decimal.
elapsed() {
    awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'
}

# port_is_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_is_free() {
    local port="$1"
    # A successful connect means something listens there.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        return 1
    fi
    return 0
}

# free_port: print a TCP port on 127.0.0.1 that was free a moment ago.
# Asks the kernel for an ephemeral port (bind to port 0) when python3 exists, else tries random
# ports. There is an unavoidable race between this check and the server's bind; callers verify that
# their server came up and listens (wait_http) and fail loudly otherwise.
free_port() {
    local port tries
    if command -v python3 >/dev/null 2>&1; then
        port="$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()' 2>/dev/null)" || port=""
        if [[ -n "$port" ]] && port_is_free "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
    fi
    for ((tries = 0; tries < 200; tries++)); do
        port=$((20000 + RANDOM % 30000))
        if port_is_free "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    die "no free port found on 127.0.0.1"
}

# http_status URL [curl args...]: print the HTTP status of a GET (000 when nothing answered).
http_status() {
    local url="$1"
    shift
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 --noproxy '*' "$@" "$url" 2>/dev/null || true
}

# wait_http URL TIMEOUT_S EXPECTED PID [curl args...]
# Poll URL until it answers with a status matching the regex EXPECTED (e.g. '200' or '[0-9]{3}'
# for "anything at all"). Fails early when process PID (if not empty) died. Returns 0 on success,
# 1 on timeout or death.
wait_http() {
    local url="$1" timeout="$2" expected="$3" pid="$4"
    shift 4
    local start code=""
    start="$(now_s)"
    while :; do
        code="$(http_status "$url" "$@")"
        if [[ "$code" =~ ^($expected)$ ]]; then
            return 0
        fi
        if [[ -n "$pid" ]] && ! pid_alive "$pid"; then
            log "process $pid exited while waiting for $url (last status $code)"
            return 1
        fi
        if awk -v e="$(elapsed "$start")" -v t="$timeout" 'BEGIN { exit !(e >= t) }'; then
            log "timed out after ${timeout}s waiting for $url (last status ${code:-none})"
            return 1
        fi
        sleep 0.2
    done
}

# pid_alive PID: true while PID runs. A zombie counts as dead: servers started by scripts/servers
# are reparented when it exits, and their new parent may reap them only later.
pid_alive() {
    local state
    kill -0 "$1" 2>/dev/null || return 1
    state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null || true)"
    [[ "$state" != Z ]]
}

# stop_pidfile PIDFILE NAME [GRACE_S] [MATCH]: TERM the process in PIDFILE, KILL it after GRACE_S
# seconds (default 10), remove PIDFILE. Safe when the file or the process is already gone. With
# MATCH, the process is signalled only if its command line contains MATCH (guards against a
# recycled pid).
stop_pidfile() {
    local pidfile="$1" name="$2" grace="${3:-10}" match="${4:-}" pid i cmdline
    [[ -f "$pidfile" ]] || return 0
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    if [[ -n "$match" && "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]]; then
        cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
        if [[ -n "$cmdline" && "$cmdline" != *"$match"* ]]; then
            warn "pid $pid from $pidfile is no longer $name; not signalling it"
            rm -f "$pidfile"
            return 0
        fi
    fi
    if [[ "$pid" =~ ^[0-9]+$ ]] && pid_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < grace * 10; i++)); do
            pid_alive "$pid" || break
            sleep 0.1
        done
        if pid_alive "$pid"; then
            warn "$name (pid $pid) still alive after ${grace}s; sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f "$pidfile"
}

# show_log_tail FILE [LINES]: print the last lines of a server log to stderr.
show_log_tail() {
    local file="$1" lines="${2:-60}"
    if [[ -f "$file" ]]; then
        printf -- '----- last %s lines of %s -----\n' "$lines" "$file" >&2
        tail -n "$lines" "$file" >&2
        printf -- '----- end of %s -----\n' "$file" >&2
    else
        log "(no log file $file)"
    fi
}
