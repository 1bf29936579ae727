"""Helpers of benches/e2e.sh: reads tables and segment catalogs, runs pyiceberg's add_files, and
prints the report. Run with the venv python (pyiceberg + pyarrow), with the THADAM_TEST_* variables
of `scripts/servers` in the environment.

    bench.py table     --table NS.NAME                       -> JSON: snapshots, data files, sizes
    bench.py latency   --table NS.NAME --log FILE [--after-seq N]
                                                             -> JSON: per-segment latency figures
    bench.py add-files --log FILE [--after-seq N] --source-table NS.NAME --namespace NS
                       --per-file N [--per-file-no-check N] [--per-file-budget S]
                                                             -> JSON: pyiceberg timings
    bench.py metrics   --url URL --table NS.NAME             -> JSON: a few /metrics figures
    bench.py report    --results DIR                         -> the table, on stdout

Every command but `report` prints one JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import struct
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The segment catalog's layout (src/protocol/segment_log/mod.rs): a 28-byte header
# ("THSEGLOG", u32 LE version 1, 16-byte log id), then records: u32 LE payload length,
# u32 LE crc32c, JSON payload ({"seq":..,"kind":"uploaded",..}).
LOG_MAGIC = b"THSEGLOG"
LOG_HEADER_LEN = 28


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} bench.py] {msg}", file=sys.stderr, flush=True)


def catalog():
    from pyiceberg.catalog import load_catalog

    env = os.environ
    props = {
        "uri": env["THADAM_TEST_CATALOG_URI"],
        "s3.endpoint": env["THADAM_TEST_S3_ENDPOINT"],
        "s3.access-key-id": env["THADAM_TEST_S3_ACCESS_KEY"],
        "s3.secret-access-key": env["THADAM_TEST_S3_SECRET_KEY"],
        "s3.region": env.get("THADAM_TEST_S3_REGION", "us-east-1"),
        "s3.path-style-access": "true",
    }
    # SeaweedFS's catalog (e2e.sh --catalog seaweedfs): its table bucket and OAuth2 credentials.
    if env.get("THADAM_TEST_PY_WAREHOUSE"):
        props["warehouse"] = env["THADAM_TEST_PY_WAREHOUSE"]
    if env.get("THADAM_TEST_PY_CREDENTIAL"):
        props["credential"] = env["THADAM_TEST_PY_CREDENTIAL"]
    return load_catalog("rest", **props)


def read_log(path: str) -> list[dict]:
    """Every complete record of a segment catalog log, in order (a torn tail is ignored, as the
    registrar does; CRCs are not checked: the registrar read the same file without complaint)."""
    data = Path(path).read_bytes()
    if data[:8] != LOG_MAGIC:
        raise SystemExit(f"{path} is not a segment catalog log")
    records, pos = [], LOG_HEADER_LEN
    while pos + 8 <= len(data):
        length, _crc = struct.unpack_from("<II", data, pos)
        if length == 0 or pos + 8 + length > len(data):
            break
        records.append(json.loads(data[pos + 8 : pos + 8 + length]))
        pos += 8 + length
    return records


def uploaded(path: str, after_seq: int = 0) -> list[dict]:
    return [r for r in read_log(path) if r.get("kind") == "uploaded" and r["seq"] > after_seq]


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def data_file_snapshots(table) -> dict[str, int]:
    """file path -> id of the snapshot that added it, from the manifests of the current snapshot.

    Exact and independent of how the registrar encodes its snapshot summaries: every live
    manifest entry carries the id of the snapshot that added its file."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    io = table.io
    manifests = snapshot.manifests(io)

    def entries(manifest):
        return [(e.data_file.file_path, e.snapshot_id) for e in manifest.fetch_manifest_entry(io)]

    out: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for pairs in pool.map(entries, manifests):
            for path, snapshot_id in pairs:
                out[path] = snapshot_id
    return out


def cmd_table(args) -> dict:
    table = catalog().load_table(args.table)
    snapshots = table.metadata.snapshots
    current = table.current_snapshot()
    summary = current.summary if current is not None else None
    metadata_bytes = len(table.io.new_input(table.metadata_location))
    return {
        "table": args.table,
        "snapshots": len(snapshots),
        "data_files": int(summary["total-data-files"]) if summary else 0,
        "records": int(summary["total-records"]) if summary else 0,
        "metadata_json_bytes": metadata_bytes,
        "snapshot_ids": [s.snapshot_id for s in snapshots],
    }


def object_times_ms(location: str) -> dict[str, tuple[float, Path | None]]:
    """name -> (when it was written, in ms on this machine's clock; a local path to read it from,
    or None) for every object directly under `location` (`s3://bucket/prefix`). s3s-fs: the
    files' mtimes in its data directory. SeaweedFS: its filer's listing of the folder (each
    chunk's `modified_ts_ns`, nanoseconds; S3's own Last-Modified has only seconds)."""
    key = location.removeprefix("s3://")
    data_dir = os.environ.get("THADAM_TEST_S3_DATA_DIR")
    if data_dir:
        folder = Path(data_dir) / key
        return {p.name: (p.stat().st_mtime_ns / 1e6, p) for p in folder.glob("*")}
    filer = os.environ["THADAM_TEST_SEAWEEDFS_FILER_URI"]
    out: dict[str, tuple[float, Path | None]] = {}
    last = ""
    while True:
        url = f"{filer}/buckets/{key}/?limit=1000&lastFileName={urllib.parse.quote(last)}"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=30) as r:
            listing = json.load(r)
        entries = listing.get("Entries") or []
        for e in entries:
            name = e["FullPath"].rsplit("/", 1)[-1]
            stamps = [c.get("modified_ts_ns", 0) for c in e.get("chunks") or []]
            if stamps and max(stamps) > 0:
                out[name] = (max(stamps) / 1e6, None)
        if not listing.get("ShouldDisplayLoadMore") or not entries:
            return out
        last = entries[-1]["FullPath"].rsplit("/", 1)[-1]


def commit_times_ms(table) -> dict[int, float]:
    """snapshot id -> when the catalog wrote the metadata file that first made it current (the
    file's write time in the S3 server, on this machine's clock; the catalog swaps its pointer
    to that file right after). Metadata files are numbered by version (the fixture's
    `00012-<uuid>.metadata.json`, SeaweedFS's `v12.metadata.json`), so the first one naming a
    snapshot is its commit's."""
    times = object_times_ms(f"{table.metadata.location}/metadata")

    def version(name: str) -> int:
        found = re.match(r"v?(\d+)", name)
        return int(found.group(1)) if found else -1

    pattern = re.compile(rb'"current-snapshot-id"\s*:\s*(-?\d+)')
    out: dict[int, float] = {}
    for name in sorted((n for n in times if n.endswith(".metadata.json")), key=version):
        written, path = times[name]
        if path is not None:
            f = path.open("rb")
        else:
            f = table.io.new_input(f"{table.metadata.location}/metadata/{name}").open()
        with f:
            head = f.read(65536)
            found = pattern.search(head) or pattern.search(head + f.read())
        if found:
            out.setdefault(int(found.group(1)), written)
    return out


def manifest_list_times_ms(table) -> dict[int, float]:
    """snapshot id -> when its manifest list (`snap-<id>-...avro`) was written (see
    object_times_ms): just before the commit that made the snapshot. For catalogs that keep only
    the current snapshot in the metadata (Project Nessie), whose snapshots' own timestamps are
    gone after the next commit: a latency from it is a lower bound by one commit round trip."""
    pattern = re.compile(r"snap-(-?\d+)-")
    out: dict[int, float] = {}
    for name, (written, _) in object_times_ms(f"{table.metadata.location}/metadata").items():
        found = pattern.match(name)
        if found:
            out[int(found.group(1))] = written
    return out


def latency_figures(values: list[float]) -> dict:
    values = sorted(values)
    return {
        "p50_ms": percentile(values, 50),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "max_ms": values[-1] if values else float("nan"),
        "mean_ms": sum(values) / len(values) if values else float("nan"),
        "min_ms": values[0] if values else float("nan"),
    }


def cmd_latency(args) -> dict:
    table = catalog().load_table(args.table)
    bucket = os.environ["THADAM_TEST_BUCKET"]
    timestamps = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    added_by = data_file_snapshots(table)
    segments = uploaded(args.log, args.after_seq)
    committed_at = commit_times_ms(table)
    listed_at = {} if all(s in timestamps for s in set(added_by.values())) else manifest_list_times_ms(table)
    latencies, to_commit, missing, per_snapshot, from_lists = [], [], 0, {}, 0
    for seg in segments:
        snapshot_id = added_by.get(f"s3://{bucket}/{seg['object_key']}")
        if snapshot_id is None:
            missing += 1
            continue
        if snapshot_id in timestamps:
            latencies.append(timestamps[snapshot_id] - seg["uploaded_at_ms"])
        elif snapshot_id in listed_at:
            from_lists += 1
            latencies.append(listed_at[snapshot_id] - seg["uploaded_at_ms"])
        else:
            missing += 1
            continue
        if snapshot_id in committed_at:
            to_commit.append(committed_at[snapshot_id] - seg["uploaded_at_ms"])
        per_snapshot[snapshot_id] = per_snapshot.get(snapshot_id, 0) + 1
    return {
        "table": args.table,
        "segments": len(segments),
        "registered": len(latencies),
        "missing": missing,
        "snapshots": len(per_snapshot),
        "max_segments_per_snapshot": max(per_snapshot.values(), default=0),
        # Segments whose snapshot the catalog no longer lists (Nessie keeps only the current
        # one): timed by their manifest list's write instead (see manifest_list_times_ms).
        "timed_by_manifest_list": from_lists,
        **latency_figures(latencies),
        "to_commit": {"segments": len(to_commit), **latency_figures(to_commit)},
    }


def names(args) -> dict[str, str]:
    """The names of pyiceberg's tables: short ones where the catalog adds a UUID to locations."""
    long = {k: f"pyiceberg_{k}" for k in ("batched", "per_file", "per_file_nocheck")}
    short = {"batched": "pb", "per_file": "pf", "per_file_nocheck": "pn"}
    return short if getattr(args, "short_names", False) else long


def create_like(cat, ident: str, schema):
    from pyiceberg.exceptions import NoSuchTableError

    try:
        cat.drop_table(ident)
    except NoSuchTableError:
        pass
    table = cat.create_table(ident, schema=schema)
    want = {f.name: f.field_id for f in schema.fields}
    got = {f.name: f.field_id for f in table.schema().fields}
    if want != got:
        raise SystemExit(f"{ident}: field ids {got} differ from the source table's {want}")
    return table


def add_one_by_one(cat, ident, schema, paths, limit, budget, check) -> dict:
    table = create_like(cat, ident, schema)
    limit = len(paths) if limit <= 0 else min(limit, len(paths))
    calls: list[float] = []
    start = time.perf_counter()
    for path in paths[:limit]:
        t = time.perf_counter()
        table.add_files([path], check_duplicate_files=check)
        calls.append(time.perf_counter() - t)
        if len(calls) % 50 == 0:
            log(f"{ident}: {len(calls)} files, {time.perf_counter() - start:.1f} s")
        if budget and time.perf_counter() - start > budget:
            break
    took = time.perf_counter() - start
    files = int(table.current_snapshot().summary["total-data-files"])
    if files != len(calls):
        raise SystemExit(f"{ident}: {files} data files after {len(calls)} add_files calls")
    tenth = max(1, len(calls) // 10)
    return {
        "files": len(calls),
        "seconds": took,
        "rate": len(calls) / took,
        "check_duplicate_files": check,
        "first_calls_ms": 1000 * sum(calls[:tenth]) / tenth,
        "last_calls_ms": 1000 * sum(calls[-tenth:]) / tenth,
        "snapshots": len(table.metadata.snapshots),
    }


def cmd_add_files(args) -> dict:
    cat = catalog()
    bucket = os.environ["THADAM_TEST_BUCKET"]
    paths = [f"s3://{bucket}/{seg['object_key']}" for seg in uploaded(args.log, args.after_seq)]
    source = cat.load_table(args.source_table)
    schema = source.schema()
    out: dict = {"files": len(paths)}

    # Batched first: one add_files call with every path (pyiceberg reads the footers on its
    # thread pool and commits once), in a process that has done nothing else yet, as a job
    # that registers a batch would run. After hundreds of per-file calls the same call took
    # twice as long (8.6 s instead of ~4 s: the interpreter's heap, and its garbage collector,
    # had grown with them), which would flatter the registrar.
    batched = create_like(cat, f"{args.namespace}.{names(args)['batched']}", schema)
    pids = [int(p) for p in args.server_pids.split(",") if p]
    servers0 = [process_cpu_s(p) for p in pids]
    own0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    batched.add_files(paths)
    took = time.perf_counter() - start
    own1 = resource.getrusage(resource.RUSAGE_SELF)
    servers = [process_cpu_s(p) - c for p, c in zip(pids, servers0)]
    check = cat.load_table(f"{args.namespace}.{names(args)['batched']}").current_snapshot()
    files = int(check.summary["total-data-files"]) if check is not None else 0
    if files != len(paths):
        raise SystemExit(f"pyiceberg batched: {files} data files, expected {len(paths)}")
    out["batched"] = {"files": len(paths), "seconds": took, "rate": len(paths) / took,
                      "cpu_s": (own1.ru_utime - own0.ru_utime) + (own1.ru_stime - own0.ru_stime)}
    if len(servers) == 2:
        if pids[0] == pids[1]:
            # One process serves both (SeaweedFS's catalog): counted once, as the S3 server's.
            servers[1] = 0.0
        out["batched"]["s3s_cpu_s"], out["batched"]["catalog_cpu_s"] = servers

    # File by file: one add_files (one commit) per file, as a per-file registrar does, on one
    # long-lived table object (no reload between calls). With pyiceberg's default
    # check_duplicate_files=True (its guard against registering a file twice, which reads every
    # manifest of the table on each call), and optionally without it.
    out["per_file"] = add_one_by_one(
        cat, f"{args.namespace}.{names(args)['per_file']}", schema, paths, args.per_file,
        args.per_file_budget, check=True)
    if args.per_file_no_check:
        out["per_file_no_check"] = add_one_by_one(
            cat, f"{args.namespace}.{names(args)['per_file_nocheck']}", schema, paths,
            args.per_file_no_check, args.per_file_budget, check=False)
    return out


def process_cpu_s(pid: int) -> float:
    """The CPU time (user + system) process `pid` has used so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After "pid (comm)": state is fields[0], utime and stime are the 14th and 15th fields.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_labels(text: str) -> dict[str, str]:
    """`a="x",b="y"` -> {"a": "x", "b": "y"} (our label values hold no quotes or commas)."""
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key:
            out[key.strip()] = value.strip().strip('"')
    return out


def cmd_metrics(args) -> dict:
    """The registrar's own view, from its Prometheus text: counters, histogram sums and counts
    of the table, and the registration-lag buckets (cumulative)."""
    with urllib.request.urlopen(args.url, timeout=10) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    lag_buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = parse_labels(rest.rstrip("}"))
        if labels.get("table") != args.table:
            continue
        if name == "thadam_iceberg_registration_lag_seconds_bucket":
            lag_buckets.append((float(labels["le"]), float(value)))
        elif "le" not in labels:
            key = name + (f":{labels['outcome']}" if "outcome" in labels else "")
            values[key] = values.get(key, 0.0) + float(value)
    lag_buckets.sort()
    return {"values": values, "lag_buckets": lag_buckets}


def cpu_split(own: float, s3s: float, catalog: float, wall: float) -> str:
    """`own + s3 + catalog = total s (cores busy)`: what a run cost the machine, by process."""
    total = own + s3s + catalog
    return (f"{own:.2f} + {s3s:.2f} + {catalog:.2f} = {total:.2f} s "
            f"({total / wall:.1f} cores busy)")


def fmt_rate(r: float) -> str:
    return f"{r:,.1f} seg/s"


def cmd_report(args) -> None:
    """The one table, from the raw results benches/e2e.sh left in --results."""
    d = Path(args.results)

    def load(name):
        p = d / name
        if not p.exists():
            return None
        return json.loads(p.read_text()) if name.endswith(".json") else p.read_text().strip()

    rows: list[tuple[str, str, str]] = []
    summary: list[str] = []

    def row(what: str, value: str = "", how: str = "") -> None:
        rows.append((what, value, how))

    run, before, after = load("backlog-run.json"), load("backlog-before.json"), load("backlog-after.json")
    reg_rate = None
    if run and before and after:
        reg_rate = run["segments"] / run["seconds"]
        made = after["snapshots"] - before["snapshots"]
        added = after["data_files"] - before["data_files"]
        row("1. BACKLOG", f"{run['segments']:,} segments",
            f"{run['rows']} rows each, already shipped (shipping took {run['ship_seconds']:.1f} s, "
            "not counted)")
        row("registrar wall time", f"{run['seconds']:.2f} s",
            "process start to exit with --until-caught-up (startup included); table existed")
        row("registrar throughput", fmt_rate(reg_rate),
            f"data files added: {added:,}" + ("" if added == run["segments"] else "  << MISMATCH"))
        row("snapshots made", f"{made}",
            f"{added / max(made, 1):,.1f} segments per snapshot (table metadata, before vs after)")
        row("peak RSS, registrar", f"{run['max_rss_kb'] / 1024:.1f} MiB",
            f"GNU time max resident set size; CPU {run['cpu_s']:.2f} s user+sys")
        grown = after["metadata_json_bytes"] - before["metadata_json_bytes"]
        row("metadata.json growth", f"{grown / max(added, 1):.0f} B/segment",
            f"{before['metadata_json_bytes']:,} -> {after['metadata_json_bytes']:,} bytes")
        if "s3s_cpu_s" in run:
            row("CPU of the run", cpu_split(run["cpu_s"], run["s3s_cpu_s"], run["catalog_cpu_s"],
                                            run["seconds"]),
                "registrar + S3 server + catalog (user+sys over the run): the cores all three share")

    flow, lat, met, shipper = (load("flow-run.json"), load("flow-latency.json"),
                               load("flow-metrics.json"), load("flow-shipper.txt"))
    if flow and lat:
        row("2. STEADY FLOW", f"{lat['segments']:,} segments",
            (shipper or "").split(" to s3://", 1)[0] + "; registrar running throughout")
        row("registered", f"{lat['registered']:,}",
            f"in {lat['snapshots']:,} snapshots, at most {lat['max_segments_per_snapshot']} "
            "segments in one" + (f"; {lat['missing']} MISSING" if lat["missing"] else ""))
        row("latency p50", f"{lat['p50_ms']:.0f} ms",
            "exact, per segment: uploaded_at_ms of its Uploaded record -> timestamp-ms of")
        row("latency p99", f"{lat['p99_ms']:.0f} ms",
            "the snapshot whose manifest entry added its file (p90 "
            f"{lat['p90_ms']:.0f}, max {lat['max_ms']:.0f}, mean {lat['mean_ms']:.0f} ms)")
        if lat.get("timed_by_manifest_list"):
            row("  timed by manifest list", f"{lat['timed_by_manifest_list']:,}",
                "segments whose snapshot the catalog no longer lists (Nessie keeps only the "
                "current one): mtime of its manifest list, written just before the commit")
        tc = lat.get("to_commit") or {}
        if tc.get("segments"):
            row("to the catalog's commit: p50", f"{tc['p50_ms']:.0f} ms",
                "exact, per segment: uploaded_at_ms -> mtime of the first metadata.json making")
            row("to the catalog's commit: p99", f"{tc['p99_ms']:.0f} ms",
                f"its snapshot current (written by the catalog; {tc['segments']} segments; "
                f"max {tc['max_ms']:.0f} ms)")
        vals = (met or {}).get("values", {})
        commits = vals.get("thadam_iceberg_commit_duration_seconds_count", 0)
        if commits:
            mean_commit = 1000 * vals["thadam_iceberg_commit_duration_seconds_sum"] / commits
            row("commit duration, mean", f"{mean_commit:.0f} ms",
                f"/metrics, {int(commits)} commits; the snapshot timestamp is taken inside it, "
                "before the catalog's commit round trip")
        buckets = (met or {}).get("lag_buckets") or []
        if buckets and buckets[-1][1]:
            le, count = buckets[0]
            row("/metrics lag cross-check", f"{100 * count / buckets[-1][1]:.1f}% <= {le:g} s",
                "registration_lag histogram (to commit completion; buckets only)")
        row("peak RSS, registrar", f"{flow['max_rss_kb'] / 1024:.1f} MiB",
            f"VmHWM; CPU {flow['cpu_s']:.2f} s user+sys; all registered "
            f"{flow['seconds']:.1f} s after the shipper started")

    pyi = load("add_files.json")
    if pyi:
        row("3. PYICEBERG add_files", f"{pyi['files']:,} files",
            "the same objects, tables of the same schema in the same catalog")
        modes = [("file by file", pyi["per_file"])]
        if "per_file_no_check" in pyi:
            modes.append(("file by file, no dup check", pyi["per_file_no_check"]))
        for name, m in modes:
            part = ("all files" if m["files"] == pyi["files"]
                    else f"first {m['files']:,} of {pyi['files']:,} files only")
            row(name, fmt_rate(m["rate"]),
                f"{m['files']} calls in {m['seconds']:.1f} s ({part}); per call "
                f"{m['first_calls_ms']:.0f} ms first tenth -> {m['last_calls_ms']:.0f} ms last; "
                f"check_duplicate_files={m['check_duplicate_files']}")
        b = pyi["batched"]
        row("one batched call", fmt_rate(b["rate"]),
            f"{b['files']:,} paths in {b['seconds']:.2f} s, 1 snapshot")
        if "s3s_cpu_s" in b:
            row("CPU of the batched call",
                cpu_split(b["cpu_s"], b["s3s_cpu_s"], b["catalog_cpu_s"], b["seconds"]),
                "pyiceberg + S3 server + catalog (user+sys over the call)")
        if reg_rate:
            segs = run["segments"]
            row("4. RATIOS", "", f"registrar seg/s on the {segs:,}-segment backlog / pyiceberg seg/s "
                "(> 1x: the registrar is faster)")

            def verdict(ratio: float, target: float) -> str:
                return f"target >= {target:g}x: {'MET' if ratio >= target else 'NOT MET'}"

            for name, m in modes:
                ratio = reg_rate / m["rate"]
                row(f"vs {name}", f"{ratio:.1f}x",
                    f"{fmt_rate(reg_rate)} vs {fmt_rate(m['rate'])}"
                    + (f"; {verdict(ratio, 10)}" if m["check_duplicate_files"] else ""))
            ratio = reg_rate / b["rate"]
            row("vs one batched call", f"{ratio:.1f}x",
                f"{fmt_rate(reg_rate)} ({run['seconds']:.2f} s) vs {fmt_rate(b['rate'])} "
                f"({b['seconds']:.2f} s) for the same {segs:,} files; {verdict(ratio, 10)}")
            summary.append(
                f"RATIO: the registrar registered the {segs:,}-segment backlog {ratio:.1f}x as fast "
                f"as pyiceberg's single batched add_files of the same {b['files']:,} files "
                f"({fmt_rate(reg_rate)} vs {fmt_rate(b['rate'])}; target >= 10x, issue #13).")

    w1 = max(len(r[0]) for r in rows) + 2
    w2 = max(len(r[1]) for r in rows)
    print("=" * 100)
    env = load("env.txt")
    if env:
        print(env)
        print("-" * 100)
    for what, value, how in rows:
        indent = "" if what[:1].isdigit() else "   "
        if what[:1].isdigit() and rows.index((what, value, how)) > 0:
            print()
        print(f"{indent + what:<{w1 + 3}} {value:>{w2}}  {how}".rstrip())
    print("=" * 100)
    for line in summary:
        print(line)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("--table", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--table", required=True)
    lat.add_argument("--log", required=True)
    lat.add_argument("--after-seq", type=int, default=0)
    a = sub.add_parser("add-files")
    a.add_argument("--log", required=True)
    a.add_argument("--after-seq", type=int, default=0)
    a.add_argument("--source-table", required=True)
    a.add_argument("--namespace", required=True)
    # Nessie puts a table at {warehouse}/{namespace}/{name}_{uuid}: with long names pyiceberg's
    # manifest-list keys pass what s3s-fs can store (~126 bytes for a multipart upload).
    a.add_argument("--short-names", action="store_true")
    a.add_argument("--per-file", type=int, default=0, help="files to add one by one (0: all)")
    a.add_argument("--per-file-no-check", type=int, default=0,
                   help="also add this many one by one with check_duplicate_files=False")
    a.add_argument("--per-file-budget", type=float, default=0.0, help="stop one-by-one after S s")
    a.add_argument("--server-pids", default="",
                   help="S3PID,CATALOGPID: their CPU around the batched call is recorded")
    m = sub.add_parser("metrics")
    m.add_argument("--url", required=True)
    m.add_argument("--table", required=True)
    r = sub.add_parser("report")
    r.add_argument("--results", required=True)
    args = p.parse_args()
    if args.cmd == "report":
        cmd_report(args)
        return
    result = {"table": cmd_table, "latency": cmd_latency, "add-files": cmd_add_files,
              "metrics": cmd_metrics}[args.cmd](args)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
