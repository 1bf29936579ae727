"""Helper of benches/contention.sh: registrars sharing one table, with each other (a fleet) and
with pyiceberg writers (rivals). Run with the venv python (pyiceberg, pyarrow, boto3), with the
THADAM_TEST_* variables of `scripts/servers` in the environment.

    contention.py run    --mode fleet|rivals --table NS.NAME --dataset D --names A,B,..
                         --state DIR --registrar BIN --crc-lib SO --s3-pid P --catalog-pid P
                         --rate R --seconds S --drain-cap S [--rivals R] [--rows N]
                         [--rival-rows N] [--fronts s3=URL,catalog=URL --front-pids
                         s3=P,catalog=P --cleanup-cap S]                   -> JSON on stdout
    contention.py feed   --logs L1,L2,.. --dataset D --key-prefix P --rate R --seconds S
                         --rows N --crc-lib SO                   (a child of `run`)
    contention.py rival  --table NS.NAME --rate R --phase F --seconds S --rows N --writer K
                                                                 (a child of `run`)
    contention.py report --results FILE...                                 -> markdown on stdout

`run` does one run: node i uses the config `{state}/{names[i]}.yaml` and the segment catalog
`{state}/segments-{names[i]}/segment-catalog.log` (benches/common.sh's bench_config). Warm-up:
one segment per node is shipped, node 0 registers its own with --until-caught-up (creating the
table), then every node's runner starts and registers its warm-up segment, so the runners have
loaded the table and committed once before anything is timed. Then the load window: feeder
processes (one per 32 nodes) ship R segments/s per node for S seconds (real Parquet files with field IDs, PUT
through S3, then an `uploaded` record stamped at that moment: seglog.LogAppender), beside the
rival writers in `--mode rivals`; then the drain, until every node registered what it was fed
(at most --drain-cap seconds). The figures (see `report`) come from the runners' /metrics
(deltas over window + drain), /proc of every process, and the table read back with pyiceberg.

With --fronts (contention.sh --faults: the runners' configs point at the fault fronts of
fronts.py, everything here goes to the servers directly), the run also takes the fronts'
counts before and after (what they injected), and after the drain, with the runners still
running, waits until nothing is left under the table's intent folder (at most --cleanup-cap
seconds, polled through S3 once a second); then anything left (objects under the intent
folder, manifest lists or manifests no snapshot names) FAILs the run like a segment
registered twice.

Children (runners, feeder, rivals) are recorded in `{state}/pids/*.pid` as they start, so that
contention.sh can stop them by pid if this process dies; `run` stops them itself on any exit.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import logging
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent / "growth"))
from common import (REGISTERED_INCLUDES_CARRIED, Registrar, bench, log, markdown,  # noqa: E402
                    requests_per_segment, store_requests)
from seglog import Crc32c, LogAppender  # noqa: E402

import in_process  # noqa: E402  (beside this file)

CLK_TCK = os.sysconf("SC_CLK_TCK")
WARMUP_PREFIX = "w-"  # segment ids of the warm-up segments; load segments are n<node>-<i>

# Prometheus series (growth/common.parse_metrics keys: `name`, `name:outcome`, `name{le=..}`).
REGISTERED = "thadam_iceberg_segments_registered_total"
BACKLOG = "thadam_iceberg_backlog_segments"
COMMITS = "thadam_iceberg_commits_total"
# --kill-committer, --stall-store: the latencies reported around the kill or the stall are of
# segments uploaded within this long of it, either side.
KILL_WINDOW_S = 30.0
OUTCOMES = ("ok", "conflict", "unknown_state", "failed", "fatal")
WINDOW = "thadam_iceberg_commit_window_seconds"
PHASES = "thadam_iceberg_commit_phase_seconds"
INTERVAL = "thadam_iceberg_commit_interval_seconds"
DELETED = "thadam_iceberg_attempt_files_deleted_total"
# Fleet intents (a node's segments another node carried count as handled for the drain).
CARRIED_BY_OTHERS = "thadam_iceberg_segments_carried_by_others_total"
SEGMENTS_CARRIED = "thadam_iceberg_segments_carried_total"
PUBLISHED = "thadam_iceberg_intents_published_total"
CARRIED = "thadam_iceberg_intents_carried_total"
SKIPPED = "thadam_iceberg_intents_skipped_total"
# A node's segments found in the table already: after a lost commit answer (--faults) the
# reconciling load finds the node's own landed commit, and counts its segments here, not in
# REGISTERED.
DUPLICATES = "thadam_iceberg_duplicates_skipped_total"
# Requests to the catalog by kind (load, commit, config, other).
CATALOG_REQUESTS = "thadam_iceberg_catalog_requests_total"


# ---- segments --------------------------------------------------------------------------------

def telemetry(base: int, rows: int):
    """`rows` rows of the demo's telemetry schema (examples/support/demo.rs: the same names,
    types, nullability and Parquet field IDs 1-7, signed policy), values from `base`."""
    import pyarrow as pa

    def field(name, typ, nullable, fid):
        return pa.field(name, typ, nullable=nullable,
                        metadata={b"PARQUET:field_id": str(fid).encode()})

    schema = pa.schema([
        field("ts", pa.timestamp("us", tz="UTC"), False, 1),
        field("device", pa.string(), False, 2),
        field("reading_seq", pa.int64(), False, 3),
        field("temperature_c", pa.float64(), True, 4),
        field("battery_pct", pa.int32(), True, 5),
        field("_wal_epoch", pa.int64(), False, 6),
        field("_wal_pos", pa.int64(), False, 7),
    ])
    idx = range(rows)
    start_us = 1_767_225_600_000_000 + (base % 1_000_000_000) * 1_000_000  # from 2026-01-01 UTC
    return pa.table([
        pa.array([start_us + i * 1_000_000 for i in idx], pa.timestamp("us", tz="UTC")),
        pa.array([f"robot-{i % 7:02d}" for i in idx], pa.string()),
        pa.array([base + i for i in idx], pa.int64()),
        pa.array([None if i % 11 == 0 else 20.0 + (i % 50) / 10 for i in idx], pa.float64()),
        pa.array([None if i % 13 == 0 else 100 - i % 100 for i in idx], pa.int32()),
        pa.array([1] * rows, pa.int64()),
        pa.array([base + i for i in idx], pa.int64()),
    ], schema=schema)


def parquet_bytes(base: int, rows: int) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(telemetry(base, rows), buf, compression="zstd")
    return buf.getvalue()


def s3_client(connections: int = 10):
    import boto3
    from botocore.config import Config

    env = os.environ
    return boto3.client(
        "s3",
        endpoint_url=env["THADAM_TEST_S3_ENDPOINT"],
        aws_access_key_id=env["THADAM_TEST_S3_ACCESS_KEY"],
        aws_secret_access_key=env["THADAM_TEST_S3_SECRET_KEY"],
        region_name=env.get("THADAM_TEST_S3_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=connections,
                      retries={"max_attempts": 3, "mode": "standard"}),
    )


def ship(s3, appender: LogAppender, dataset: str, key_prefix: str, segment_id: str,
         base: int, rows: int) -> None:
    """Uploads one segment (PUT through S3), then records it as `uploaded` (stamped now)."""
    key = f"{key_prefix}/{segment_id}.parquet"
    body = parquet_bytes(base, rows)
    s3.put_object(Bucket=os.environ["THADAM_TEST_BUCKET"], Key=key, Body=body)
    appender.append_uploaded([{"dataset": dataset, "segment_id": segment_id, "object_key": key,
                               "file_size": len(body), "row_count": rows}])


def warm_connections(s3, n: int) -> None:
    """Opens the feeder's n connections before the window: n threads at once, one request
    each, so that the window does not pay for them. (At 128 nodes every node's first PUT took
    0.8-2.8 s without it and still 1.5-2.8 s with it: the rest of that cost is not the
    connection.)"""
    bucket = os.environ["THADAM_TEST_BUCKET"]
    start = threading.Barrier(n)

    def one(_: int) -> None:
        start.wait()
        s3.head_bucket(Bucket=bucket)

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a running process, from /proc (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def handshake() -> float:
    """A child's side of the start: says it is ready, reads the window's start time."""
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("no start time on stdin")
    return float(line)


# ---- the feeder ------------------------------------------------------------------------------

# Nodes per feeder process. One process for 128 nodes (128 threads on one GIL, each segment's
# Parquet and signed PUT taking 5-10 ms) fell 2-3.6 s behind its schedule at the window's start
# and shipped the late segments in a burst, which the first seconds' latency measured. With a
# process per 32 nodes the feeders keep their schedule at 32 and 64 nodes; at 128 they still
# fell 0.5-3.1 s behind (the two cores are busy with everything else).
FEEDER_NODES = 32

def cmd_feed(args) -> dict:
    """Node k's segment i is due at t0 + (i + k/N) / rate (nodes evenly out of phase), shipped
    late (never dropped) when the previous one took longer; one thread per node. This process
    feeds nodes `--first` onwards of `--nodes` (N): the run splits the fleet over several
    feeders (see FEEDER_NODES)."""
    logs = args.logs.split(",")
    n = len(logs)
    total = args.nodes or n
    crc = Crc32c(args.crc_lib)
    appenders = [LogAppender(Path(p), crc) for p in logs]
    s3 = s3_client(n + 4)
    count = round(args.rate * args.seconds)
    parquet_bytes(0, args.rows)  # imports and first-call costs before the window
    warm_connections(s3, n)
    t0 = handshake()
    cpu0 = self_cpu_s()
    nodes: list[dict] = [{} for _ in range(n)]
    failures: list[str] = []

    def feed(j: int) -> None:
        k = args.first + j
        behind, shipped, took = 0.0, 0, []
        try:
            for i in range(count):
                due = t0 + (i + k / total) / args.rate
                now = time.time()
                if due > now:
                    time.sleep(due - now)
                else:
                    behind = max(behind, now - due)
                start = time.time()
                ship(s3, appenders[j], args.dataset, args.key_prefix, f"n{k:02d}-{i:05d}",
                     k * 1_000_000_000 + i * args.rows, args.rows)
                took.append(time.time() - start)
                shipped += 1
        except Exception as e:  # noqa: BLE001  (reported, and the run fails)
            failures.append(f"node {k}: {e!r}")
        took.sort()
        nodes[j] = {"shipped": shipped, "max_behind_s": behind,
                    "ship_p50_ms": 1000 * bench.percentile(took, 50) if took else None,
                    "ship_max_ms": 1000 * took[-1] if took else None}

    threads = [threading.Thread(target=feed, args=(j,), daemon=True) for j in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit("feeder: " + "; ".join(failures))
    return {"t0": t0, "ended": time.time(), "per_node": count, "nodes": nodes,
            "cpu_s": self_cpu_s() - cpu0}


# ---- a rival writer --------------------------------------------------------------------------

def cmd_rival(args) -> dict:
    """pyiceberg appends of `rows` rows, one commit each, due at t0 + (i + phase) / rate until
    t0 + seconds (late ones go at once, none are made up after the end). Each append loads the
    table first (as a job would), then `table.append`, with pyiceberg's own retries on 409
    (commit.retry.num-retries, 4 by default), counted from its log."""
    from pyiceberg.exceptions import CommitFailedException

    class Conflicts(logging.Handler):
        count = 0

        def emit(self, record):
            if "concurrent update" in record.getMessage():
                Conflicts.count += 1

    logger = logging.getLogger("pyiceberg")
    logger.addHandler(Conflicts())
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    cat = bench.catalog()
    table = cat.load_table(args.table)
    base = 2_000_000_000_000 + args.writer * 1_000_000_000
    telemetry(base, args.rows)
    t0 = handshake()
    cpu0 = self_cpu_s()
    end = t0 + args.seconds
    ok = gave_up = errors = 0
    last_error = None
    took, behind = [], 0.0
    i = 0
    while True:
        due = t0 + (i + args.phase) / args.rate
        if due >= end:
            break
        now = time.time()
        if due > now:
            time.sleep(due - now)
        else:
            behind = max(behind, now - due)
        if time.time() >= end:
            break
        start = time.time()
        try:
            table.refresh()
            table.append(telemetry(base + i * args.rows, args.rows))
            ok += 1
            took.append(time.time() - start)
        except CommitFailedException as e:
            gave_up += 1
            last_error = repr(e)[:300]
        except Exception as e:  # noqa: BLE001  (counted; a writer that errors keeps going)
            errors += 1
            last_error = repr(e)[:300]
        i += 1
    took.sort()
    return {"writer": args.writer, "rate": args.rate, "attempted": i, "ok": ok,
            "gave_up": gave_up, "errors": errors, "conflicts": Conflicts.count,
            "last_error": last_error, "max_behind_s": behind,
            "append_p50_ms": 1000 * bench.percentile(took, 50) if took else None,
            "append_max_ms": 1000 * took[-1] if took else None,
            "cpu_s": self_cpu_s() - cpu0, "ended": time.time()}


# ---- the run ---------------------------------------------------------------------------------

class Child:
    """A `feed` or `rival` child: started, told the start time, its JSON read at exit."""

    def __init__(self, argv: list[str], name: str, pids: Path, log_path: Path):
        self.name = name
        self.err = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, str(HERE), *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True)
        (pids / f"{name}.pid").write_text(f"{self.proc.pid}\n")
        self.log_path = log_path
        self.result = None

    def wait_ready(self, timeout: float) -> None:
        box: list[str] = []
        t = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not box or box[0].strip() != "ready":
            raise SystemExit(f"{self.name} did not start (see {self.log_path})")

    def start(self, t0: float) -> None:
        self.proc.stdin.write(f"{t0!r}\n")
        self.proc.stdin.close()

    def finish(self) -> dict:
        out = self.proc.stdout.read()
        code = self.proc.wait()
        self.err.close()
        if code != 0:
            raise SystemExit(f"{self.name} exited with {code} (see {self.log_path})")
        self.result = json.loads(out)
        return self.result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scrape(regs: list[Registrar]) -> list[dict]:
    """Every runner's /metrics (one retry each: a busy machine may time a scrape out)."""
    out = []
    for reg in regs:
        m = reg.try_metrics()
        if m is None:
            time.sleep(0.5)
            m = reg.try_metrics()
        if m is None:
            raise SystemExit(f"cannot scrape {reg.url}/metrics (runner pid {reg.pid}, "
                             f"{'running' if reg.alive() else f'exited {reg.returncode}'})")
        out.append(m)
    return out


def delta(after: dict, before: dict, key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def handled(after: dict, before: dict) -> float:
    """A node's segments in the table: registered by its own commits, carried by another
    node's (its published intents), or found there when it reconciled (a lost commit answer).
    A build whose segments_registered_total already counts the carried ones says so in its
    help text (`common.REGISTERED_INCLUDES_CARRIED`): they are not added twice."""
    carried = 0.0 if after.get(REGISTERED_INCLUDES_CARRIED) else delta(after, before, CARRIED_BY_OTHERS)
    return delta(after, before, REGISTERED) + carried + delta(after, before, DUPLICATES)


def labelled(after: list[dict], before: list[dict], name: str) -> dict[str, float]:
    """A counter's deltas summed over nodes, by its one label value (`name:value` keys)."""
    out: dict[str, float] = {}
    for a, b in zip(after, before):
        for key in a:
            if key.startswith(name + ":"):
                value = key[len(name) + 1:]
                out[value] = out.get(value, 0.0) + delta(a, b, key)
    return out


def store_request_figures(after: list[dict], before: list[dict]) -> dict:
    """Store requests by kind over the run (thadam_iceberg_store_requests_total), with the
    segments they registered: the whole fleet's (what the table took), and the nodes' that
    carried no other node's segment with their own segments."""
    def node(a: dict, b: dict) -> tuple[dict[str, float], float, float]:
        counts = {k: v - store_requests(b)[k] for k, v in store_requests(a).items()}
        return counts, handled(a, b), delta(a, b, SEGMENTS_CARRIED)
    nodes = [node(a, b) for a, b in zip(after, before)]
    fleet = {k: sum(c[k] for c, _, _ in nodes) for k in nodes[0][0]} if nodes else {}
    publishers = [(c, own) for c, own, carried in nodes if carried == 0]
    return {
        "fleet": fleet,
        "segments": sum(own for _, own, _ in nodes),
        "publishers": {k: sum(c[k] for c, _ in publishers) for k in fleet},
        "publisher_nodes": len(publishers),
        "publisher_segments": sum(own for _, own in publishers),
    }


def histogram(before: list[dict], after: list[dict], name: str) -> dict | None:
    """A histogram's deltas summed over nodes: count, mean, and p50/p99 interpolated within
    the buckets (None when no node exports it)."""
    if not any(f"{name}_count" in m for m in after):
        return None
    buckets: dict[float, float] = {}
    count = total = 0.0
    for b, a in zip(before, after):
        count += delta(a, b, f"{name}_count")
        total += delta(a, b, f"{name}_sum")
        for key in a:
            m = re.fullmatch(re.escape(name) + r"_bucket\{le=(.+)\}", key)
            if m:
                le = math.inf if m.group(1) == "+Inf" else float(m.group(1))
                buckets[le] = buckets.get(le, 0.0) + delta(a, b, key)

    def quantile(q: float) -> float | None:
        if count <= 0:
            return None
        want, prev_le, prev_n = q * count, 0.0, 0.0
        for le in sorted(buckets):
            n = buckets[le]
            if n >= want:
                if le == math.inf:
                    return prev_le  # beyond the last finite bucket: its bound, a lower limit
                return prev_le + (want - prev_n) / max(n - prev_n, 1e-9) * (le - prev_le)
            prev_le, prev_n = le, n
        return None

    return {"count": count, "mean_s": total / count if count else None,
            "p50_s": quantile(0.5), "p99_s": quantile(0.99)}


def bucket_objects(prefix: str) -> dict[str, int]:
    """Every object under `s3://{bucket}/{prefix}` (listed through S3, so that any S3 server
    will do): URI -> last-modified, epoch ms."""
    bucket = os.environ["THADAM_TEST_BUCKET"]
    out: dict[str, int] = {}
    for page in reader().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[f"s3://{bucket}/{o['Key']}"] = int(o["LastModified"].timestamp() * 1000)
    return out


def object_bytes(uri: str) -> bytes:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return reader().get_object(Bucket=bucket, Key=key)["Body"].read()


@functools.cache
def reader():
    """One S3 client for the driver's reads after the run."""
    return s3_client()


def key_of(location: str) -> str:
    """The key prefix of an s3://bucket/... location in the test bucket."""
    return location.removeprefix(f"s3://{os.environ['THADAM_TEST_BUCKET']}/")


def avro_metadata(data: bytes) -> dict[str, bytes]:
    """The header metadata of an Avro object container file (avro.schema, Iceberg's keys)."""
    if data[:4] != b"Obj\x01":
        return {}
    pos = 4

    def long() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)

    meta = {}
    try:
        while True:
            count = long()
            if count == 0:
                return meta
            if count < 0:
                count = -count
                long()  # the block's size in bytes
            for _ in range(count):
                n = long()
                key = data[pos:pos + n].decode()
                pos += n
                n = long()
                meta[key] = data[pos:pos + n]
                pos += n
    except (IndexError, UnicodeDecodeError):
        return meta


def avro_kind(uri: str) -> str:
    """`list` (a manifest list: records named manifest_file), `manifest` (manifest_entry), or
    by the Iceberg file names (snap-*.avro is a list) when the header says neither."""
    try:
        name = json.loads(avro_metadata(object_bytes(uri)).get("avro.schema", b"{}")).get("name")
    except (OSError, ValueError, KeyError):
        name = None
    if name == "manifest_file":
        return "list"
    if name == "manifest_entry":
        return "manifest"
    return "list" if uri.rsplit("/", 1)[-1].startswith("snap-") else "manifest"


def snapshots_ever(table) -> dict[int, tuple[int, str]]:
    """The snapshots the current metadata no longer lists (expired with --retention), id ->
    (timestamp-ms, manifest list), from the manifest lists left in the table's metadata/
    folder: `snap-<id>-<attempt>-<uuid>.avro`, written as the snapshot is built and stamped, so
    its last-modified stands for the snapshot's timestamp (to the S3 server's precision:
    s3s-fs's is the file's mtime, SeaweedFS's a second) (retention is metadata-only; a refused
    attempt's list is deleted at once, and of several left for one id the newest is taken).
    Old metadata.json versions would not do: the catalog may delete them, and leaves those of
    refused commits. Read only when the current metadata lacks a snapshot."""
    current = {s.snapshot_id for s in table.metadata.snapshots}
    out: dict[int, tuple[int, str]] = {}
    listed = bucket_objects(key_of(table.metadata.location) + "/metadata/snap-")
    for uri, ms in listed.items():
        m = re.match(r"snap-(-?\d+)-.*\.avro$", uri.rsplit("/", 1)[-1])
        if not m or int(m.group(1)) in current:
            continue
        sid = int(m.group(1))
        if sid not in out or ms > out[sid][0]:
            out[sid] = (ms, uri)
    return out


def orphans(table, ever: dict[int, tuple[int, str]] | None) -> dict:
    """Manifest lists in the table's metadata/ folder (listed through S3) that no snapshot
    names, and manifests that no snapshot's manifest list names: the snapshots in the current
    metadata, and those expired during the run (`ever`, see snapshots_ever) when there were."""
    from pyiceberg.manifest import read_manifest_list

    lists = {s.manifest_list for s in table.metadata.snapshots}
    lists |= {ml for _, ml in (ever or {}).values()}
    reachable: set[str] = set()
    for uri in lists:
        for m in read_manifest_list(table.io.new_input(uri)):
            reachable.add(m.manifest_path)
    counts = Counter()
    found: list[str] = []
    for uri in bucket_objects(key_of(table.metadata.location) + "/metadata/"):
        if not uri.endswith(".avro"):
            continue
        kind = avro_kind(uri)
        counts[kind] += 1
        if (uri not in lists) if kind == "list" else (uri not in reachable):
            counts[f"orphan_{kind}s"] += 1
            found.append(uri)
    return {"lists": counts["list"], "manifests": counts["manifest"],
            "orphan_lists": counts["orphan_lists"], "orphan_manifests": counts["orphan_manifests"],
            "orphan_uris": sorted(found)[:50]}


def committing_lanes(table, t0: float) -> list:
    lanes: dict[str, list] = {}
    for snap in sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms):
        lane = (snap.summary or {}).get("thadam.lane") if snap.summary else None
        if lane is None or snap.timestamp_ms < 1000 * t0:
            continue
        at = round(snap.timestamp_ms / 1000 - t0, 2)
        entry = lanes.setdefault(lane, [lane, at, at, 0])
        entry[2] = at
        entry[3] += 1
    return list(lanes.values())


def uploaded_records(path: Path) -> list[dict]:
    """The `uploaded` records of a segment catalog log, or of the in-process fleet's records."""
    if path.suffix == ".jsonl":
        return in_process.read_records(path)
    return bench.uploaded(str(path))


def analyse(table, logs: list[Path], t0: float, window_end: float, drained: bool,
            rival_ok: int | None, event_at: float | None = None) -> dict:
    """Latencies, achieved rate, exactly once, snapshots and orphans from the table as it is;
    with `event_at` (a kill, a stall), the latencies around it (`around`)."""
    bucket = os.environ["THADAM_TEST_BUCKET"]
    records = [r for p in logs for r in uploaded_records(p)]
    expected = Counter(f"s3://{bucket}/{r['object_key']}" for r in records)
    stamps = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    added_by = bench.data_file_snapshots(table)
    ever = None
    if any(sid not in stamps for sid in added_by.values()):
        ever = snapshots_ever(table)
        stamps.update({sid: ts for sid, (ts, _) in ever.items()})
    latencies: list[float] = []
    around: list[float] = []
    per_node: dict[str, list[float]] = {}
    by_upload: dict[int, list[float]] = {}  # latencies by the 5 s of the window they were uploaded in
    in_window = unregistered = 0
    for r in records:
        if r["segment_id"].startswith(WARMUP_PREFIX):
            continue
        sid = added_by.get(f"s3://{bucket}/{r['object_key']}")
        if sid is None:
            unregistered += 1
            continue
        ts = stamps[sid]
        lat = ts - r["uploaded_at_ms"]
        latencies.append(lat)
        if event_at is not None and abs(r["uploaded_at_ms"] / 1000 - event_at) <= KILL_WINDOW_S:
            around.append(lat)
        per_node.setdefault(r["segment_id"].split("-", 1)[0], []).append(lat)
        by_upload.setdefault(int((r["uploaded_at_ms"] / 1000 - t0) // 5), []).append(lat)
        if 1000 * t0 <= ts <= 1000 * window_end:
            in_window += 1
    latencies.sort()
    around.sort()
    event = None
    if event_at is not None:
        # The longest the table went without a registrar's snapshot in the minute after it.
        later = sorted(ts / 1000 for ts in stamps.values() if event_at <= ts / 1000
                       <= event_at + 2 * KILL_WINDOW_S)
        edges = [event_at, *later]
        event = {"segments": len(around),
                 "p50": bench.percentile(around, 50) if around else None,
                 "p99": bench.percentile(around, 99) if around else None,
                 "max": around[-1] if around else None,
                 "longest_gap_s": max((b - a for a, b in zip(edges, edges[1:])), default=None)}
    node_p99 = sorted(bench.percentile(sorted(v), 99) for v in per_node.values())

    # Exactly once, from pyiceberg's own reading of the current snapshot's data files.
    present = Counter(table.inspect.files().column("file_path").to_pylist())
    duplicates = sum(1 for p in expected if present[p] > 1)
    missing = sum(1 for p in expected if present[p] == 0)
    others = sum(n for p, n in present.items() if p not in expected)
    problems = []
    if any(n > 1 for n in expected.values()):
        problems.append("a key recorded twice in the logs")
    if duplicates:
        problems.append(f"{duplicates} segments registered more than once")
    if missing and drained:
        problems.append(f"{missing} segments missing")
    if rival_ok is None and others:
        problems.append(f"{others} data files that no log recorded")
    if rival_ok is not None and others != rival_ok:
        problems.append(f"{others} rival data files, but the rivals reported {rival_ok} appends")
    status = "FAIL" if problems else ("OK" if not missing else "INCOMPLETE")
    if status == "INCOMPLETE":
        problems.append(f"{missing} segments not registered within the drain cap")

    snaps = [s for s in table.metadata.snapshots
             if 1000 * t0 <= s.timestamp_ms and s.summary is not None]
    ours = [s for s in snaps if s.summary["thadam.writer"] is not None]
    # Snapshots expired during the run (--retention), counted as the registrars' (in a rivals
    # run with --retention an expired pyiceberg snapshot would be counted with them).
    expired = sum(1 for ts, _ in (ever or {}).values() if 1000 * t0 <= ts)
    # The commit rate under load counts the snapshots stamped inside the load window: the drain
    # after it is mostly idle (a node that only publishes learns what was carried at its
    # fallback, 16 s at 128 nodes), so dividing every snapshot by window + drain measured the
    # drain's length, not the rate (2.6-3.0 "commits/s" at 128 nodes for 4.0-4.8 in the window).
    live_in_window = sum(1 for s in ours if s.timestamp_ms <= 1000 * window_end)
    expired_in_window = sum(1 for ts, _ in (ever or {}).values()
                            if 1000 * t0 <= ts <= 1000 * window_end)
    return {
        "segments": len(records),
        "load_segments": len(latencies) + unregistered,
        "registered": len(latencies),
        "in_window": in_window,
        "latency_ms": {"p50": bench.percentile(latencies, 50),
                       "p99": bench.percentile(latencies, 99),
                       "max": latencies[-1] if latencies else None},
        "node_p99_ms": node_p99,
        # For reading a run's course in its JSON (not in the report): per 5 s of upload time,
        # [start s, segments, p50, p99, max] in ms; the longest gaps between snapshots.
        "latency_by_upload_5s": [
            [5 * k, len(v), bench.percentile(v, 50), bench.percentile(v, 99), v[-1]]
            for k, v in sorted((k, sorted(v)) for k, v in by_upload.items())],
        # Which lanes committed in the run, in order of their first commit: [lane, first s,
        # last s, commits] (a fleet should settle on one within its first seconds).
        "committing_lanes": committing_lanes(table, t0),
        "longest_snapshot_gaps_s": sorted(
            ((b - a) / 1000, a / 1000 - t0) for a, b in
            zip(sorted(stamps.values()), sorted(stamps.values())[1:]) if a / 1000 >= t0 - 5)[-5:],
        "exactly_once": {"status": status, "problems": problems, "expected": len(expected),
                         "duplicates": duplicates, "missing": missing, "others": others},
        "snapshots_since_t0": {"registrar": len(ours) + expired,
                               "others": len(snaps) - len(ours)},
        "registrar_snapshots_in_window": live_in_window + expired_in_window,
        "around": event,
        "orphans": orphans(table, ever),
    }


# ---- faults (contention.sh --faults) ---------------------------------------------------------

INTENTS = "lake/_thadam-intents"  # under the runners' url (benches/common.sh bench_config)


def pairs(text: str | None) -> dict[str, str]:
    """`a=x,b=y` -> {a: x, b: y}."""
    return dict(part.split("=", 1) for part in text.split(",")) if text else {}


def front_counts(fronts: dict[str, str]) -> dict[str, dict]:
    """Each fault front's counts (fronts.py answers GET /_thadam-front/counts itself)."""
    out = {}
    for kind, url in fronts.items():
        try:
            with urllib.request.urlopen(f"{url}/_thadam-front/counts", timeout=30) as r:
                out[kind] = json.loads(r.read())
        except OSError as e:
            raise SystemExit(f"the {kind} fault front at {url} does not answer ({e}); see its "
                             "log in the state dir (fronts/)") from e
    return out


def front_deltas(before: dict[str, dict], after: dict[str, dict]) -> dict[str, dict]:
    """What the fronts did in between: counts and connections as deltas, the peak as read."""
    out = {}
    for kind, a in after.items():
        b = before.get(kind, {})
        bc = b.get("counts", {})
        out[kind] = {"fractions": a["fractions"],
                     "counts": {k: v - bc.get(k, 0) for k, v in a["counts"].items()
                                if v - bc.get(k, 0)},
                     "connections": a["connections"] - b.get("connections", 0),
                     "peak_open": a["peak_open"]}
    return out


def intent_objects(table) -> dict[str, int]:
    """Every object under the table's intent folder (listed through S3, the real server)."""
    return bucket_objects(f"{INTENTS}/{table.metadata.table_uuid}/")


def wait_cleanup(table, cap: float, regs: list[Registrar], names: list[str]) -> dict:
    """After the drain, the runners still running: polls once a second until nothing is left
    under the table's intent folder (listed through S3) and every runner's backlog gauge is 0
    (none still waits to learn that its published segments were carried), or `cap` seconds
    passed. An intent whose delete failed goes with its carrier's next deletes; one whose PUT
    answer was lost, with its publisher's fallback commit (5-16 s) or a later carrier's."""
    start = time.time()
    at_drain = None
    last_log = start
    while True:
        left = intent_objects(table)
        backlog = {name: m.get(BACKLOG, 0.0) for name, reg in zip(names, regs)
                   if (m := reg.try_metrics()) is not None}
        waiting = sum(backlog.values()) + (len(regs) - len(backlog))  # unscraped: not yet 0
        if at_drain is None:
            at_drain = (len(left), sum(backlog.values()))
        now = time.time()
        if (not left and not waiting) or now - start >= cap:
            break
        for reg, name in zip(regs, names):
            if not reg.alive():
                raise SystemExit(f"runner {name} exited ({reg.returncode}) while the intents "
                                 "were being cleaned")
        if now - last_log >= 10:
            log(f"  cleanup: {len(left)} object(s) left under the intent folder, backlogs "
                f"{sum(backlog.values()):.0f}, after {now - start:.0f} s")
            last_log = now
        time.sleep(1.0)
    took = time.time() - start
    done = not left and not waiting
    log(f"cleanup: {at_drain[0]} object(s) under the intent folder and backlogs {at_drain[1]:.0f} "
        f"at the drain's end; " + (f"none left after {took:.1f} s" if done else
                                   f"{len(left)} object(s) and backlogs {sum(backlog.values()):.0f} "
                                   f"still there after {took:.1f} s (cap {cap:g} s)"))
    return {"at_drain": at_drain[0], "backlog_at_drain": at_drain[1], "left": len(left),
            "backlog": {k: v for k, v in backlog.items() if v}, "s": took, "cap": cap,
            "cleaned": done, "keys": sorted(left)[:50]}


def leftover_problems(mode: str, left: dict[str, int], orphan: dict,
                      cleanup: dict | None) -> list[str]:
    """What a faults run must not leave: any object under the intent folder, and (in a fleet
    run, where every writer is a registrar) a manifest list or manifest no snapshot names;
    nor end with a runner whose backlog never came back to 0."""
    problems = []
    if cleanup and cleanup["backlog"]:
        problems.append(f"backlogs not back to 0 after the cleanup cap ({cleanup['cap']:g} s): "
                        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(cleanup["backlog"].items())))
    if left:
        keys = sorted(u.rsplit("/", 1)[-1] for u in left)
        problems.append(f"{len(left)} object(s) left under _thadam-intents/ ("
                        + ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "") + ")")
    if mode == "fleet" and (orphan["orphan_lists"] or orphan["orphan_manifests"]):
        names = [u.rsplit("/", 1)[-1] for u in orphan["orphan_uris"]]
        problems.append(f"{orphan['orphan_lists']} manifest list(s) and "
                        f"{orphan['orphan_manifests']} manifest(s) no snapshot names ("
                        + ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") + ")")
    return problems


def kill_committer(regs: list[Registrar], before: list[dict], names: list[str]) -> dict:
    """SIGKILLs the fleet's committer, the runner with the most landed commits since `before`
    (the sole committer makes nearly all of them): which one, and when."""
    now = scrape(regs)
    landed = [delta(a, b, f"{COMMITS}:ok") for a, b in zip(now, before)]
    k = max(range(len(regs)), key=lambda i: landed[i])
    os.kill(regs[k].pid, signal.SIGKILL)
    log(f"  SIGKILL to {names[k]} (pid {regs[k].pid}), the committer: {landed[k]:.0f} of "
        f"{sum(landed):.0f} commits landed")
    return {"node": k, "name": names[k], "killed": time.time(),
            "share": landed[k] / sum(landed) if sum(landed) else None}


def stall_store(stall: dict, pid: int) -> bool:
    """--stall-store: stops the S3 server (SIGSTOP) when the stall is due and lets it go on
    (SIGCONT) once it has lasted its seconds, noting both times in `stall`. Whether it acted."""
    now = time.time()
    if "stopped" not in stall and now >= stall["at"]:
        os.kill(pid, signal.SIGSTOP)
        stall["stopped"] = time.time()
        log(f"  SIGSTOP to the S3 server (pid {pid}) for {stall['seconds']:g} s")
        return True
    if "stopped" in stall and now >= stall["stopped"] + stall["seconds"]:
        os.kill(pid, signal.SIGCONT)
        stall["resumed"] = time.time()
        log(f"  SIGCONT to the S3 server after {stall['resumed'] - stall['stopped']:.2f} s")
        return True
    return False


def cmd_run(args) -> dict:
    state = Path(args.state)
    pids = state / "pids"
    pids.mkdir(exist_ok=True)
    names = args.names.split(",")
    # --in-process: one simulator holds every node (names: the one config they all copy).
    n = args.sim_nodes if args.in_process else len(names)
    sim: in_process.Sim | None = None
    sim_ready: dict | None = None
    configs = [state / f"{name}.yaml" for name in names]
    logs = [state / f"segments-{name}" / "segment-catalog.log" for name in names]
    location = f"lake/thadam/v1/bench/{args.dataset}/data"
    crc = Crc32c(args.crc_lib)
    regs: list[Registrar] = []
    children: list[Child] = []
    fronts = pairs(args.fronts)
    front_pids = {k: int(v) for k, v in pairs(args.front_pids).items()}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stall: dict | None = None
    try:
        faults0 = front_counts(fronts) if fronts else None
        # Warm-up: one segment per node; node 0 creates the table with it. Started together
        # (--together MAKER): only the maker, a registrar of its own log with intents off, ships
        # one and creates the table, and stops; no node has committed when the load starts.
        s3 = s3_client()
        maker = args.together
        warm_logs = logs
        warm_config = configs[0]
        if maker:
            warm_logs = [state / f"segments-{maker}" / "segment-catalog.log"]
            warm_config = state / f"{maker}.yaml"
            for path in logs:
                path.parent.mkdir(parents=True, exist_ok=True)
        for k, path in enumerate(warm_logs):
            path.parent.mkdir(parents=True, exist_ok=True)
            ship(s3, LogAppender(path, crc), args.dataset, location, f"{WARMUP_PREFIX}{k:02d}",
                 3_000_000_000_000 + k * 1_000, args.rows)
        warm_name = maker or names[0]
        warm = state / f"{warm_name}-warmup.log"
        with open(warm, "ab") as err:
            proc = subprocess.Popen([args.registrar, "--config", str(warm_config),
                                     "--until-caught-up"], stdout=subprocess.DEVNULL, stderr=err)
            (pids / f"{warm_name}-warmup.pid").write_text(f"{proc.pid}\n")
            try:
                code = proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
                raise SystemExit(f"the warm-up registrar did not catch up in 300 s; see {warm}")
        if code != 0:
            raise SystemExit(f"the warm-up registrar exited with {code}; see {warm}")
        log(f"{args.table}: created by {'the maker' if maker else 'node 0'}'s warm-up; "
            f"starting {n} runner(s)")
        if args.in_process:
            if not maker:
                raise SystemExit("--in-process needs --together MAKER (the table's maker)")
            sim = in_process.Sim(args.in_process, configs[0], args.table, state, n, args.rate,
                                 args.seconds, args.rows, warm_up=args.sim_warm_up)
            regs.append(sim.reg)
            (pids / "sim.time.pid").write_text(f"{sim.reg.time_pid}\n")
            (pids / "sim.pid").write_text(f"{sim.reg.pid}\n")
            sim_ready = sim.wait_ready(600 + n)
            log(f"fleet_sim: {n} nodes started in {sim_ready['start_s']:.1f} s"
                + (f", warmed up in {sim_ready['warm_up_s']:.1f} s" if args.sim_warm_up else ""))
        for name, config in ([] if sim else zip(names, configs)):
            reg = Registrar(args.registrar, str(config), args.table,
                            state / f"{name}-registrar.log", [])
            regs.append(reg)
            (pids / f"{name}.time.pid").write_text(f"{reg.time_pid}\n")
            (pids / f"{name}.pid").write_text(f"{reg.pid}\n")
        deadline = time.time() + 120 + 10 * n
        while not maker:
            m = scrape(regs)
            done = sum(handled(x, {}) for x in m)
            if done >= n - 1 and all(x.get(BACKLOG, 0.0) == 0 for x in m):
                break
            if time.time() > deadline:
                raise SystemExit(f"warm-up: {done:.0f} of {n - 1} warm-up segments registered "
                                 "in time")
            for reg, name in zip(regs, names):
                if not reg.alive():
                    raise SystemExit(f"runner {name} exited ({reg.returncode}) in the warm-up")
            time.sleep(0.5)
        if sim and args.sim_warm_up:
            log("every simulated node registered its warm-up segment")
        elif maker:
            scrape(regs)
            log("runners up, none has committed: they start together with the load")
        else:
            log("warm-up done: every runner committed or skipped its warm-up segment")
            time.sleep(2)

        # The load window.
        feeders: list[Child] = []
        for first in range(0, 0 if sim else n, FEEDER_NODES):
            part = logs[first:first + FEEDER_NODES]
            suffix = "" if n <= FEEDER_NODES else str(first // FEEDER_NODES)
            feeders.append(Child(["feed", "--logs", ",".join(map(str, part)),
                                  "--first", str(first), "--nodes", str(n),
                                  "--dataset", args.dataset,
                                  "--key-prefix", location, "--rate", str(args.rate),
                                  "--seconds", str(args.seconds), "--rows", str(args.rows),
                                  "--crc-lib", args.crc_lib, "--state", args.state],
                                 f"{args.dataset}-feeder{suffix}", pids,
                                 state / f"{args.dataset}-feeder{suffix}.log"))
        children.extend(feeders)
        rivals: list[Child] = []
        if args.rivals > 0:
            writers = math.ceil(args.rivals)
            for k in range(writers):
                rivals.append(Child(["rival", "--table", args.table,
                                     "--rate", str(args.rivals / writers),
                                     "--phase", str(k / writers), "--seconds", str(args.seconds),
                                     "--rows", str(args.rival_rows), "--writer", str(k),
                                     "--state", args.state],
                                    f"{args.dataset}-rival{k}", pids,
                                    state / f"{args.dataset}-rival{k}.log"))
            children.extend(rivals)
        for child in children:
            child.wait_ready(120)
        before = scrape(regs)
        t0 = time.time() + 0.5
        for child in children:
            child.start(t0)
        if sim:
            sim.start(t0)
        while time.time() < t0:
            time.sleep(0.01)
        servers = {"catalog": args.catalog_pid, "s3": args.s3_pid,
                   **{f"front_{k}": pid for k, pid in front_pids.items()}}
        cpu0 = {k: proc_cpu_s(p) for k, p in servers.items()}
        reg_cpu0 = [reg.proc_figures()["cpu_s"] for reg in regs]
        driver_cpu0 = self_cpu_s()
        window_end = t0 + args.seconds
        log(f"load: {n} node(s) x {args.rate:g} seg/s for {args.seconds} s"
            + (f", rivals {args.rivals:g} commits/s" if rivals else ""))
        feeding = sim.feeding if sim else lambda: any(f.proc.poll() is None for f in feeders)
        kill = {"at": t0 + args.kill_committer} if args.kill_committer else None
        if args.stall_store:
            stall_s, stall_for = (float(x) for x in args.stall_store.split(":"))
            stall = {"at": t0 + stall_s, "seconds": stall_for, "after_s": stall_s}
        while feeding():
            step = min(5.0, max(0.2, window_end - time.time()))
            if kill:
                due = kill.get("back_at", kill["at"])
                step = min(step, max(0.05, due - time.time()))
            if stall and "resumed" not in stall:
                due = stall["at"] + (stall["seconds"] if "stopped" in stall else 0.0)
                step = min(step, max(0.01, due - time.time()))
            time.sleep(step)
            if stall and "resumed" not in stall and stall_store(stall, args.s3_pid):
                continue
            if kill and "node" not in kill and time.time() >= kill["at"]:
                kill.update(kill_committer(regs, before, names))
                kill["back_at"] = kill["at"] + args.restart_after
            elif kill and "node" in kill and "back" not in kill \
                    and time.time() >= kill["back_at"]:
                k = kill["node"]
                regs[k].alive()  # reaps it
                regs[k] = Registrar(args.registrar, str(configs[k]), args.table,
                                    state / f"{names[k]}-registrar-back.log", [])
                (pids / f"{names[k]}-back.pid").write_text(f"{regs[k].pid}\n")
                before[k], reg_cpu0[k] = {}, 0.0
                kill["back"] = time.time()
                log(f"  {time.time() - t0:5.1f} s: {names[k]} restarted")
            elif feeding():
                down = kill["node"] if kill and "node" in kill and "back" not in kill else None
                live = [i for i in range(len(regs)) if i != down]
                now = scrape([regs[i] for i in live])
                done = sum(handled(a, before[i]) for i, a in zip(live, now))
                asked = labelled(now, [before[i] for i in live], CATALOG_REQUESTS)
                log(f"  {time.time() - t0:5.1f} s: {done:.0f} registered"
                    + (f"; catalog loads {asked.get('load', 0):.0f}, commits "
                       f"{asked.get('commit', 0):.0f}" if asked else ""))
        parts = [sim.fed()] if sim else [f.finish() for f in feeders]
        fed = {"t0": parts[0]["t0"], "ended": max(p["ended"] for p in parts),
               "per_node": parts[0]["per_node"],
               "nodes": [node for p in parts for node in p["nodes"]],
               "cpu_s": sum(p["cpu_s"] for p in parts), "processes": len(parts)}
        rival_results = [child.finish() for child in rivals]

        # The drain: until every node registered what it was fed, or the cap.
        drain_start = time.time()
        drain_deadline = max(drain_start, window_end) + args.drain_cap
        want = fed["per_node"] * (n if sim else 1)  # per runner
        pending = set(range(len(regs)))
        after: list[dict] = list(before)
        while True:
            for k in sorted(pending):
                after[k] = regs[k].try_metrics() or after[k]
                if handled(after[k], before[k]) >= want:
                    pending.discard(k)
                elif not regs[k].alive():
                    raise SystemExit(f"runner {names[k]} exited ({regs[k].returncode}) "
                                     f"during the run; see {state}/{names[k]}-registrar.log")
            if not pending or time.time() > drain_deadline:
                break
            time.sleep(1.0)
        drained = not pending
        drain_end = time.time()
        cpu = {k: (proc_cpu_s(p) or 0.0) - (cpu0[k] or 0.0) for k, p in servers.items()}
        figures = [reg.proc_figures() for reg in regs]
        cpu["registrars"] = sum(f["cpu_s"] - c for f, c in zip(figures, reg_cpu0))
        cpu["feeder"] = fed["cpu_s"]
        cpu["rivals"] = sum(r["cpu_s"] for r in rival_results)
        cpu["driver"] = self_cpu_s() - driver_cpu0
        after = scrape(regs)
        cleanup = None
        if fronts:
            log(f"drain: {'done' if drained else 'CAP HIT'} {drain_end - drain_start:.1f} s after "
                "the feeder finished; waiting for the intents to be cleaned")
            cleanup = wait_cleanup(bench.catalog().load_table(args.table),
                                   args.cleanup_cap if drained else 0.0, regs, names)
            log("stopping the runners")
        else:
            log(f"drain: {'done' if drained else 'CAP HIT'} {drain_end - drain_start:.1f} s "
                "after the feeder finished; stopping the runners")
        # The store requests once the carried intents' deletes are done too (they run behind
        # the committer's next cycle).
        last = scrape(regs) if fronts else after
        codes = [reg.wait(stop=True) for reg in regs]

        commits = {o: sum(delta(a, b, f"{COMMITS}:{o}") for a, b in zip(after, before))
                   for o in OUTCOMES}
        deleted = None
        if any(k.startswith(DELETED) for m in after for k in m):
            deleted = {o: sum(delta(a, b, f"{DELETED}:{o}") for a, b in zip(after, before))
                       for o in ("deleted", "failed")}
        intervals = [m[INTERVAL] for m in after if INTERVAL in m]
        intents = {
            "published": sum(delta(a, b, PUBLISHED) for a, b in zip(after, before)),
            "carried": labelled(after, before, CARRIED),
            "skipped": sum(labelled(after, before, SKIPPED).values()),
        }
        table = bench.catalog().load_table(args.table)
        left = intent_objects(table)
        intents["left"] = sum(1 for uri in left if uri.endswith(".json"))
        rival_ok = sum(r["ok"] for r in rival_results) if rivals else None
        out = {
            "mode": args.mode,
            "table": args.table,
            "nodes": n,
            "rate": args.rate,
            "seconds": args.seconds,
            "rivals": args.rivals,
            "rows": args.rows,
            "rival_rows": args.rival_rows,
            "drained": drained,
            "drain_s": drain_end - drain_start,
            "drain_cap": args.drain_cap,
            "fed": fed,
            "rival_results": rival_results,
            "commits": commits,
            "commit_window": histogram(before, after, WINDOW),
            "commit_phases": {phase: histogram(before, after, f"{PHASES}@{phase}")
                              for phase in ("load", "build", "answer")},
            "commit_duration": histogram(before, after, "thadam_iceberg_commit_duration_seconds"),
            "commit_interval_s": intervals or None,
            "attempt_files_deleted": deleted,
            "intents": intents,
            "cpu_s": cpu,
            "max_hwm_kb": max(f["hwm_kb"] for f in figures),
            "exit_codes": codes,
            "store_requests": store_request_figures(last, before),
            "catalog_requests": labelled(last, before, CATALOG_REQUESTS) or None,
            **analyse(table, ([sim.records()] if sim else logs) + (warm_logs if maker else []),
                      t0, window_end, drained,
                      rival_ok, kill["at"] if kill else stall["at"] if stall else None),
            "kill": {k: v for k, v in kill.items()} if kill else None,
            "kill_after_s": args.kill_committer,
            "stall": stall,
            "started_together": bool(maker) and not (sim and args.sim_warm_up),
        }
        if any(codes):
            out["exactly_once"]["problems"].append(f"runner exit codes {codes}")
            out["exactly_once"]["status"] = "FAIL"
        if sim:
            exit_report = sim.exit_report() or {"outcomes": ["no exit report"]}
            stopped = [o for o in exit_report["outcomes"] if o != "ok"]
            if stopped:
                out["exactly_once"]["problems"].append(
                    f"{len(stopped)} simulated nodes stopped on an error: {stopped[0]}")
                out["exactly_once"]["status"] = "FAIL"
            out["in_process"] = in_process.memory_figures(
                sim_ready, sim.reg.peak_rss_kb or out["max_hwm_kb"], n)
        if fronts:
            eo = out["exactly_once"]
            left_problems = leftover_problems(args.mode, left, out["orphans"], cleanup)
            eo["problems"].extend(left_problems)
            if left_problems and drained:
                eo["status"] = "FAIL"
            out["faults"] = {"seed": args.fault_seed,
                             "fronts": front_deltas(faults0, front_counts(fronts)),
                             "cleanup": cleanup, "left_keys": sorted(left)[:50]}
        return out
    finally:
        if stall and "stopped" in stall and "resumed" not in stall:
            os.kill(args.s3_pid, signal.SIGCONT)  # never leave the store stopped
        for child in children:
            child.stop()
        for reg in regs:
            if reg.alive():
                try:
                    reg.wait(stop=True)
                except (OSError, SystemExit):
                    pass
        for path in pids.glob("*.pid"):  # all reaped: nothing left for contention.sh to stop
            path.unlink()


# ---- the report ------------------------------------------------------------------------------

def around_cells(a: dict) -> list:
    """The report's cells for the latencies around a kill or a stall (`analyse`'s `around`)."""
    return [a.get("segments", 0),
            f"{ms(a.get('p50'))} / {ms(a.get('p99'))} / {ms(a.get('max'))}",
            f"{a['longest_gap_s']:.1f} s" if a.get("longest_gap_s") else "–"]


def ms(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:,.0f} ms" if v < 10_000 else f"{v / 1000:,.1f} s"


def num(v: float, digits: int = 2) -> str:
    return f"{v:,.{digits}f}"


def common_cells(r: dict) -> dict:
    lat = r["latency_ms"]
    c = r["commits"]
    o = r["orphans"]
    cpu = r["cpu_s"]
    eo = r["exactly_once"]
    conflicts = f"{c['conflict'] / c['ok']:.2f}" if c["ok"] else f"– ({c['conflict']:.0f} / 0)"
    achieved = r["in_window"] / r["seconds"]
    p99 = r["node_p99_ms"]
    in_window = r["registrar_snapshots_in_window"]
    return {
        "commits_per_s": f"{in_window / r['seconds']:.2f}" if r["seconds"] > 0 else "–",
        "achieved": f"{achieved:.2f}" + ("" if r["drained"] else " (drain cap hit)"),
        "latency": f"{ms(lat['p50'])} / {ms(lat['p99'])} / {ms(lat['max'])}",
        "conflicts": conflicts,
        "node_p99": f"{ms(p99[0])} → {ms(p99[-1])}" if p99 else "–",
        "orphans": f"{o['orphan_lists']} / {o['orphan_manifests']}"
                   + (f" / {r['intents']['left']}" if r.get("intents") else ""),
        "cpu": f"{num(cpu['catalog'], 1)} / {num(cpu['s3'], 1)} / {num(cpu['registrars'], 1)}",
        "exactly_once": eo["status"] + (f" ({'; '.join(eo['problems'])})" if eo["problems"]
                                        else ""),
    }


def details_row(r: dict, first: str) -> list[str]:
    c = r["commits"]
    w = r["commit_window"]
    d = r["attempt_files_deleted"]
    fed = r["fed"]
    snaps = r["snapshots_since_t0"]["registrar"]
    behind = max(x["max_behind_s"] for x in fed["nodes"])
    interval = r["commit_interval_s"]
    return [
        first,
        f"{r['load_segments']:,} / {r['registered']:,}",
        f"{r['drain_s']:.1f} s" + ("" if r["drained"] else f" (cap {r['drain_cap']} s hit)"),
        f"{snaps:,} ({r['registered'] / snaps:.1f})" if snaps else "0",
        " / ".join(f"{c[o]:.0f}" for o in ("ok", "conflict", "unknown_state", "failed")),
        (f"{ms(1000 * w['mean_s'])} / {ms(1000 * w['p99_s'] if w['p99_s'] is not None else None)}"
         if w and w["count"] else NO_SERIES),
        phases_p99(r.get("commit_phases")),
        (f"{min(interval):.2f} – {max(interval):.2f} s" if interval else NO_SERIES),
        (f"{d['deleted']:.0f} / {d['failed']:.0f}" if d else NO_SERIES),
        f"{ms(1000 * behind)}",
        f"{r['max_hwm_kb'] / 1024:.1f} MiB",
        f"{num(r['cpu_s']['feeder'], 1)} / {num(r['cpu_s']['driver'], 1)}",
        (f"{i['published']:.0f} / {i['carried'].get('other', 0):.0f} / "
         f"{i['carried'].get('own', 0):.0f} / {i['skipped']:.0f}"
         if (i := r.get("intents")) else NO_SERIES),
    ]


# A series a runner does not export: not in this build, or (a counter) never incremented.
NO_SERIES = "–"


def phases_p99(phases: dict | None) -> str:
    """The p99 of each phase of the commit windows (load / build / answer), summed over runners."""
    if not phases or not any(h and h["count"] for h in phases.values()):
        return NO_SERIES
    return " / ".join(
        ms(1000 * h["p99_s"]) if h and h["count"] and h["p99_s"] is not None else NO_SERIES
        for h in (phases.get(p) for p in ("load", "build", "answer")))

DETAIL_HEADERS = ["segments fed / registered", "drain", "registrar snapshots (seg each)",
                  "commits ok / 409 / unknown / failed", "commit window mean / p99",
                  "window phases p99: load / build / answer",
                  "commit interval (gauge, per node)", "attempt files deleted / failed",
                  "feeder max behind", "runner peak RSS (max)", "CPU s: feeder / driver",
                  "intents published / carried by another node / by their own / skipped"]


def faults_row(r: dict) -> list[str]:
    """What the fronts injected in one run, and what was left after it."""
    f = r["faults"]
    s3 = f["fronts"].get("s3", {"counts": {}, "connections": 0, "peak_open": 0})
    cat = f["fronts"].get("catalog", {"counts": {}, "connections": 0, "peak_open": 0})
    a, c = s3["counts"], cat["counts"]
    spared = sum(v for k, v in {**a, **c}.items() if k.startswith("spared:"))
    errors = Counter()
    for k, v in {**a, **c}.items():
        if k.startswith("errors:"):
            errors[k.removeprefix("errors:")] += v
    cl = f["cleanup"]
    o = r["orphans"]
    cleanup = "–" if cl is None else (
        f"{cl['at_drain']} / {cl['backlog_at_drain']:.0f} → "
        + (f"none after {cl['s']:.1f} s" if cl["cleaned"] else
           f"{cl['left']} / {sum(cl['backlog'].values()):.0f} at {cl['s']:.0f} s "
           f"(cap {cl['cap']:g} s)"))
    first = f"{r['nodes']}" if r["mode"] == "fleet" else f"{r['rivals']:g}"
    return [
        first,
        f"{a.get('fault:lost_intent_put_answer', 0)} / {a.get('requests:put_intent', 0)}",
        f"{a.get('fault:failed_delete', 0)} / {a.get('fault:failed_bulk_delete', 0)}",
        f"{a.get('fault:lost_delete_answer', 0)} / {a.get('fault:lost_bulk_delete_answer', 0)}",
        f"{a.get('requests:delete', 0)} / {a.get('requests:bulk_delete', 0)}",
        f"{c.get('fault:lost_commit_answer', 0)} / {c.get('commits_applied', 0)} "
        f"({c.get('requests:commit', 0)} sent)",
        f"{spared}",
        f"{sum(v for k, v in a.items() if k.startswith('requests:')):,} / "
        f"{sum(v for k, v in c.items() if k.startswith('requests:')):,}",
        f"{s3['connections']} ({s3['peak_open']}) / {cat['connections']} ({cat['peak_open']})",
        f"{num(r['cpu_s'].get('front_s3', 0.0), 1)} / {num(r['cpu_s'].get('front_catalog', 0.0), 1)}",
        ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "0",
        cleanup,
        f"{len(f['left_keys'])} / {o['orphan_lists']} / {o['orphan_manifests']}",
    ]


FAULT_HEADERS = ["lost intent-PUT answers / intent PUTs",
                 "failed deletes (500, not forwarded): DELETE / bulk",
                 "lost delete answers: DELETE / bulk", "deletes seen: DELETE / bulk",
                 "lost commit answers / commits applied", "spared (answer not 2xx)",
                 "requests through the fronts: S3 / catalog",
                 "front connections (peak open): S3 / catalog", "front CPU s: S3 / catalog",
                 "front errors", "intent objects / backlogs at drain end → cleanup",
                 "left: intent objects / orphan lists / manifests"]


def cmd_report(args) -> int:
    results = [json.loads(Path(p).read_text()) for p in args.results]
    fleet = [r for r in results if r["mode"] == "fleet"]
    rivals = [r for r in results if r["mode"] == "rivals"]
    # A faults run passes only OK: one that did not drain did not show that it ends.
    failed = [r for r in results if r["exactly_once"]["status"] == "FAIL"
              or (r.get("faults") and r["exactly_once"]["status"] != "OK")]
    if fleet:
        r0 = fleet[0]
        start = ("started together: no warm-up, the table made by a stopped registrar with "
                 "intents off" if r0.get("started_together")
                 else "every node warmed up (committed once) first")
        where = (" in one process (benches/fleet_sim, `--in-process`)" if r0.get("in_process")
                 else "")
        print(f"### Fleet: N registrars{where} on one table, each fed {r0['rate']:g} seg/s for "
              f"{r0['seconds']} s, {start}")
        print()
        rows, details = [], []
        for r in fleet:
            c = common_cells(r)
            rows.append([r["nodes"], f"{r['nodes'] * r['rate']:g}", c["achieved"], c["latency"],
                         c["commits_per_s"], c["conflicts"], c["node_p99"], c["orphans"],
                         c["cpu"], c["exactly_once"]])
            details.append(details_row(r, str(r["nodes"])))
        print(markdown(["N", "offered seg/s", "achieved seg/s", "upload → snapshot p50 / p99 / max",
                        "catalog commits/s", "409s per landed commit", "per-node p99 best → worst",
                        "orphans: lists / manifests / intents", "CPU s: catalog / S3 / registrars",
                        "exactly once"], rows))
        print()
        print(markdown(["N", *DETAIL_HEADERS], details))
        print()
        sims = [r for r in fleet if r.get("in_process")]
        if sims:
            print("In one process (`--in-process`, benches/fleet_sim): the process's RSS before "
                  "any node started, once all had started (idle), and its peak (VmHWM, GNU "
                  "time); per node: (RSS - RSS before the nodes) / N.")
            print()
            print(markdown(
                ["N", "RSS before the nodes", "RSS started", "peak RSS",
                 "per node: started / peak", "nodes started in"],
                [[r["nodes"], f"{m['before_nodes_kb'] / 1024:.1f} MiB",
                  f"{m['started_kb'] / 1024:.1f} MiB", f"{m['peak_kb'] / 1024:.1f} MiB",
                  f"{m['per_node_started_kb'] / 1024:.2f} / {m['per_node_peak_kb'] / 1024:.2f} MiB",
                  f"{m['start_s']:.1f} s" + (f" (+ warm-up {m['warm_up_s']:.1f} s)"
                                             if m.get("warm_up_s") is not None else "")]
                 for r in sims for m in [r["in_process"]]]))
            print()
        killed = [r for r in fleet if r.get("kill") and r["kill"].get("node") is not None]
        if killed:
            print("The committer killed (`--kill-committer`): segments uploaded within 30 s of "
                  "the kill, either side; the longest the table went without a snapshot in the "
                  "minute after it.")
            print()
            rows = []
            for r in killed:
                k, a = r["kill"], r.get("around") or {}
                share = f"{100 * k['share']:.0f}%" if k.get("share") is not None else "–"
                rows.append([r["nodes"], f"{k['name']} ({share} of the commits)",
                             f"{k['killed'] - k['at'] + r['kill_after_s']:.1f} s",
                             *around_cells(a)])
            print(markdown(["N", "killed", "into the window", "segments around it",
                            "upload → snapshot p50 / p99 / max", "longest gap"], rows))
            print()
        stalled = [r for r in fleet if r.get("stall") and r["stall"].get("stopped")]
        if stalled:
            print("The store stalled (`--stall-store`): the S3 server stopped (SIGSTOP) and let "
                  "go on; segments uploaded within 30 s of the stall, either side; the longest "
                  "the table went without a snapshot in the minute after it began.")
            print()
            rows = []
            for r in stalled:
                st, a = r["stall"], r.get("around") or {}
                rows.append([r["nodes"], f"{st['stopped'] - st['at'] + st['after_s']:.1f} s",
                             f"{st.get('resumed', st['stopped']) - st['stopped']:.2f} s",
                             *around_cells(a)])
            print(markdown(["N", "into the window", "stopped for", "segments around it",
                            "upload → snapshot p50 / p99 / max", "longest gap"], rows))
            print()
        counted = [r for r in fleet if r.get("store_requests")]
        if counted:
            print("S3 requests per registered segment, by kind (thadam_iceberg_store_requests_"
                  "total summed over the nodes, over the segments the table took from them in "
                  "the run; the nodes' that carried no other node's segment over their own "
                  "segments):")
            print()
            rows = []
            for r in counted:
                q = r["store_requests"]
                rows.append((f"{r['nodes']} nodes, all", q["fleet"], q["segments"]))
                if q["publisher_nodes"]:
                    rows.append((f"{r['nodes']} nodes, the {q['publisher_nodes']} that carried "
                                 "none", q["publishers"], q["publisher_segments"]))
            print(requests_per_segment(rows))
            print()
            for r in counted:
                q = r["store_requests"]
                asked = r.get("catalog_requests") or {}
                print(f"{r['nodes']} nodes: {q['segments']:,.0f} segments, requests "
                      + ", ".join(f"{k} {v:,.0f}" for k, v in q["fleet"].items() if v)
                      + ("; catalog requests " + ", ".join(
                          f"{k} {v:,.0f}" for k, v in sorted(asked.items()) if v)
                         if asked else ""))
            print()
    if rivals:
        r0 = rivals[0]
        print(f"### Rival writers: one registrar fed {r0['rate']:g} seg/s for {r0['seconds']} s, "
              f"beside pyiceberg writers appending {r0['rival_rows']} rows per commit at R "
              "commits/s in all")
        print()
        rows, details = [], []
        for r in rivals:
            c = common_cells(r)
            rr = r["rival_results"]
            ok = sum(x["ok"] for x in rr)
            offered = round(r["rivals"] * r["seconds"])
            landed = r["snapshots_since_t0"]["others"]
            gave_up = sum(x["gave_up"] for x in rr)
            errors = sum(x["errors"] for x in rr)
            done = (f"{ok} of {offered} ({ok / r['seconds']:.2f}/s); "
                    f"{sum(x['conflicts'] for x in rr)} 409 retries, {gave_up} gave up"
                    + (f", {errors} errors" if errors else "")
                    + ("" if landed == ok else f"; {landed} rival snapshots in the table"))
            rows.append([f"{r['rivals']:g} ({len(rr)} writer{'s' if len(rr) > 1 else ''})",
                         c["achieved"], c["latency"], c["conflicts"], done, c["orphans"],
                         c["cpu"] + f" / {num(r['cpu_s']['rivals'], 1)}", c["exactly_once"]])
            p50 = [x["append_p50_ms"] for x in rr if x["append_p50_ms"] is not None]
            details.append(details_row(r, f"{r['rivals']:g}")
                           + [ms(max(p50)) if p50 else "–"])
        print(markdown(["rival commits/s", "registrar achieved seg/s",
                        "upload → snapshot p50 / p99 / max", "registrar 409s per landed commit",
                        "rival commits done", "orphans: lists / manifests",
                        "CPU s: catalog / S3 / registrar / rivals", "exactly once (registrar)"],
                       rows))
        print()
        print(markdown(["R", *DETAIL_HEADERS, "rival append p50 (worst writer)"], details))
        print()
    faulted = [r for r in results if r.get("faults")]
    if faulted:
        seeds = sorted({r["faults"]["seed"] for r in faulted})
        print(f"### Faults injected (seed {', '.join(map(str, seeds))})")
        print()
        print(markdown(["N / rival commits/s", *FAULT_HEADERS],
                       [faults_row(r) for r in faulted]))
        print()
    for r in failed:
        status = r["exactly_once"]["status"]
        print(f"FAIL: {r['table']}: {'' if status == 'FAIL' else status + ': '}"
              f"{'; '.join(r['exactly_once']['problems'])}")
    return 1 if failed else 0


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=["fleet", "rivals"], required=True)
    r.add_argument("--table", required=True)
    r.add_argument("--dataset", required=True)
    r.add_argument("--names", required=True)
    r.add_argument("--state", required=True)
    r.add_argument("--registrar", required=True)
    r.add_argument("--crc-lib", required=True)
    r.add_argument("--s3-pid", type=int, required=True)
    r.add_argument("--catalog-pid", type=int, required=True)
    r.add_argument("--rate", type=float, required=True)
    r.add_argument("--seconds", type=int, required=True)
    r.add_argument("--drain-cap", type=float, default=180)
    r.add_argument("--rivals", type=float, default=0)
    r.add_argument("--rows", type=int, default=100)
    r.add_argument("--rival-rows", type=int, default=10)
    r.add_argument("--fronts", help="fault fronts, kind=URL,... (contention.sh --faults)")
    r.add_argument("--front-pids", help="their pids, kind=PID,...")
    r.add_argument("--fault-seed", type=int, help="the fronts' seed (only reported)")
    r.add_argument("--kill-committer", type=float, metavar="S",
                   help="SIGKILL the committer S seconds into the load window")
    r.add_argument("--restart-after", type=float, default=20.0,
                   help="with --kill-committer: restart it this many seconds after the kill")
    r.add_argument("--stall-store", metavar="S:D",
                   help="stop the S3 server (SIGSTOP) S seconds into the load window for D "
                        "seconds (SIGCONT)")
    r.add_argument("--together", metavar="MAKER",
                   help="no warm-up: the table is made by MAKER (a config of its own, intents "
                        "off), and the runners meet the load without having committed")
    r.add_argument("--in-process", metavar="FLEET_SIM",
                   help="run the fleet in one process: this benches/fleet_sim binary, with "
                        "--sim-nodes nodes of the first name's config (needs --together)")
    r.add_argument("--sim-nodes", type=int, default=0, help="with --in-process: N")
    r.add_argument("--sim-warm-up", action="store_true",
                   help="with --in-process: every node registers a segment before the load")
    r.add_argument("--cleanup-cap", type=float, default=120,
                   help="with --fronts: how long to wait for the intent folder to empty")
    f = sub.add_parser("feed")
    f.add_argument("--logs", required=True)
    f.add_argument("--dataset", required=True)
    f.add_argument("--key-prefix", required=True)
    f.add_argument("--rate", type=float, required=True)
    f.add_argument("--seconds", type=int, required=True)
    f.add_argument("--rows", type=int, required=True)
    f.add_argument("--crc-lib", required=True)
    f.add_argument("--first", type=int, default=0, help="the index of the first log's node")
    f.add_argument("--nodes", type=int, default=0, help="N, the fleet's size (default: the logs)")
    f.add_argument("--state", help="the run's state dir (only names the process)")
    v = sub.add_parser("rival")
    v.add_argument("--table", required=True)
    v.add_argument("--rate", type=float, required=True)
    v.add_argument("--phase", type=float, default=0.0)
    v.add_argument("--seconds", type=int, required=True)
    v.add_argument("--rows", type=int, required=True)
    v.add_argument("--writer", type=int, required=True)
    v.add_argument("--state", help="the run's state dir (only names the process)")
    rep = sub.add_parser("report")
    rep.add_argument("--results", nargs="+", required=True)
    args = p.parse_args()
    if args.cmd == "report":
        sys.exit(cmd_report(args))
    result = {"run": cmd_run, "feed": cmd_feed, "rival": cmd_rival}[args.cmd](args)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
