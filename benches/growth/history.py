"""Helper of benches/history.sh: per-commit cost as a table's history grows, one segment per
snapshot, measured at checkpoints; and pyiceberg's add_files of one file per call as the anchor.

    history.py run --config C --registrar BIN --log LOG --table NS.NAME --commits N
                   --checkpoints "10 100 ..." --window W --merge on|off --crc-lib SO
                   --sources-dir DIR --state DIR --peer-commits P --peer-table NS.NAME
                   [--peer-dup-check on|off]                     -> JSON on stdout
    history.py report --results FILE                            -> markdown on stdout

The table exists (the warm-up registered one shipped segment: commit 1, and the template of
every placed object). Every object is placed up front (hard links in s3s-fs's directory, see
seglog.py); the registrar (--max-batch 1, one snapshot per segment) runs throughout. For
checkpoint C with window W = min(--window, C/2): the catalog records of commits up to C-W are
appended at once, the driver waits until they are committed and samples the registrar (/proc
CPU time, /metrics histogram); then the W records of the window, wait, sample again. So every
commit of the window is made with segments already waiting: its cost is the registrar's and the
catalog's, never the shipper's, and the figures are the window's alone. At the checkpoint,
with the registrar idle, the driver reads the table's files from s3s-fs's directory and times
pyiceberg's plan_files().

Commit interval: the time between consecutive commits of the window, from the mtimes of the
metadata.json files that made each snapshot current (written by the catalog; W-1 intervals, so
the wait before the window's first commit is never in it). With a backlog waiting, it is the
full per-commit cost: footer read, manifest and manifest-list writes, the catalog's commit.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import random
import re
import sys
import time
import uuid
from pathlib import Path

from common import (Registrar, bench, human_bytes, local_path, log, markdown, mib, table_figures,
                    time_plan_files)
from seglog import (Crc32c, LogAppender, place_objects, segments_like, template_segment,
                    verify_placed)

# Bytes written per commit are read from the last BYTES_SAMPLE commits of each window (one
# manifest list read per commit; at 50,000 commits each holds up to 50,000 entries).
BYTES_SAMPLE = 20


def set_properties(cat, ident: str, merge: bool) -> dict:
    """The table properties of the run. delete-after-commit keeps the catalog's metadata.json
    files at 100 previous versions on disk (the metadata log in metadata.json holds 100 either
    way: it changes no figure, it only keeps 50,000 commits within the disk)."""
    props = {
        "commit.manifest-merge.enabled": "true" if merge else "false",
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "100",
    }
    table = cat.load_table(ident)
    with table.transaction() as tx:
        tx.set_properties(props)
    return props


def other_logs(n: int) -> dict:
    """The watermark properties of `n` other segment logs (a fleet of n more nodes on the table),
    shaped as the registrar writes them: `thadam.watermark.<log uuid>` = `<seq>:<fingerprint>`
    (16 bytes, base64url). Seeded, so that every run holds the same bytes."""
    rng = random.Random(33)
    marks = {}
    for _ in range(n):
        log_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        fp = base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")
        marks[f"thadam.watermark.{log_id}"] = f"{rng.randrange(1, 10_000_000)}:{fp}"
    return marks


def set_other_logs(cat, ident: str, n: int) -> None:
    """Sets `n` other logs' watermarks on the table, in one commit."""
    if n <= 0:
        return
    table = cat.load_table(ident)
    with table.transaction() as tx:
        tx.set_properties(other_logs(n))


def metadata_files(table) -> dict[int, tuple[float, int]]:
    """snapshot id -> (mtime ms, bytes) of the first metadata.json on disk that made it current
    (files are numbered by version: 00012-<uuid>.metadata.json)."""
    folder = local_path(table.metadata.location) / "metadata"
    files = sorted(folder.glob("*.metadata.json"), key=lambda p: int(p.name.split("-", 1)[0]))
    pattern = re.compile(rb'"current-snapshot-id"\s*:\s*(-?\d+)')
    out: dict[int, tuple[float, int]] = {}
    for path in files:
        try:
            with path.open("rb") as f:
                head = f.read(65536)
                found = pattern.search(head) or pattern.search(head + f.read())
            st = path.stat()
        except FileNotFoundError:
            continue  # removed by the catalog's delete-after-commit meanwhile
        if found:
            out.setdefault(int(found.group(1)), (st.st_mtime_ns / 1e6, st.st_size))
    return out


def written_by(table, snapshot) -> int:
    """Bytes of the manifest list and the manifests this snapshot wrote (manifests whose
    added_snapshot_id is its own: the new one, or the merged one)."""
    size = local_path(snapshot.manifest_list).stat().st_size
    for m in snapshot.manifests(table.io):
        if m.added_snapshot_id == snapshot.snapshot_id:
            size += m.manifest_length
    return size


def window_figures(table, window: int) -> dict:
    """Commit intervals and bytes written over the last `window` snapshots of the table."""
    snaps = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)[-window:]
    files = metadata_files(table)
    times = [files[s.snapshot_id][0] for s in snaps if s.snapshot_id in files]
    intervals = sorted(b - a for a, b in zip(times, times[1:]))
    stamps = [s.timestamp_ms for s in snaps]
    stamp_intervals = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    sample = snaps[-BYTES_SAMPLE:]
    per_commit = []
    for s in sample:
        if s.snapshot_id in files:
            per_commit.append(files[s.snapshot_id][1] + written_by(table, s))
    return {
        "window_snapshots": len(snaps),
        "interval_p50_ms": bench.percentile(intervals, 50),
        "interval_p90_ms": bench.percentile(intervals, 90),
        "interval_samples": len(intervals),
        "stamp_interval_p50_ms": bench.percentile(stamp_intervals, 50),
        "bytes_per_commit": sum(per_commit) / len(per_commit) if per_commit else None,
        "bytes_sample": len(per_commit),
        "metadata_files_on_disk": len(list(
            (local_path(table.metadata.location) / "metadata").glob("*.metadata.json"))),
    }


def histogram_window(before: dict, after: dict, name: str) -> dict:
    """Mean and bucket-interpolated median of a histogram over the window (deltas)."""
    count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
    total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
    buckets = []
    for key, value in after.items():
        m = re.fullmatch(re.escape(name) + r"_bucket\{le=(.+)\}", key)
        if m:
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            buckets.append((le, value - before.get(key, 0.0)))
    buckets.sort()
    median = None
    if count > 0:
        prev_le, prev_n = 0.0, 0.0
        for le, n in buckets:
            if n >= count / 2:
                if le == float("inf"):
                    median = prev_le
                else:
                    frac = (count / 2 - prev_n) / max(n - prev_n, 1e-9)
                    median = prev_le + frac * (le - prev_le)
                break
            prev_le, prev_n = le, n
    return {"count": count, "mean_ms": 1000 * total / count if count else None,
            "p50_ms_approx": 1000 * median if median is not None else None}


def plan_checkpoints(spec: str, total: int, window: int) -> list[tuple[int, int]]:
    """(checkpoint, window) pairs up to `total` commits, `total` itself included."""
    points = sorted({int(c) for c in spec.replace(",", " ").split() if int(c) <= total} | {total})
    return [(c, max(1, min(window, c // 2))) for c in points if c >= 2]


def run_registrar(args, cat, template, segments, out) -> None:
    crc = Crc32c(args.crc_lib)
    appender = LogAppender(Path(args.log), crc)
    reg = Registrar(args.registrar, args.config, args.table,
                    Path(args.state) / "history-registrar.log", ["--max-batch", "1"])
    commits_key = "thadam_iceberg_commits_total:ok"
    shipped = 0  # placed segments whose records are in the log
    started = time.time()

    def commit_up_to(total_commits: int):
        """Appends records until the table will have `total_commits` commits (the warm-up's
        included), waits until the registrar made them."""
        nonlocal shipped
        want = total_commits - 1
        if want > shipped:
            appender.append_uploaded(segments[shipped:want])
            count = want - shipped
            shipped = want
            reg.wait_for(commits_key, want, timeout=120 + 10 * count)
        return reg.metrics()

    checkpoints = []
    for c, w in plan_checkpoints(args.checkpoints, args.commits, args.window):
        m0 = commit_up_to(c - w)
        p0 = reg.proc_figures()
        t0 = time.time()
        m1 = commit_up_to(c)
        p1 = reg.proc_figures()
        t1 = time.time()
        table = cat.load_table(args.table)
        point = {
            "commits": c,
            "window": w,
            "window_wall_s": t1 - t0,
            "cpu_ms_per_commit": 1000 * (p1["cpu_s"] - p0["cpu_s"]) / w,
            "rss_kb": p1["rss_kb"],
            "hwm_kb": p1["hwm_kb"],
            "histogram": histogram_window(m0, m1, "thadam_iceberg_commit_duration_seconds"),
            **window_figures(table, w),
            **table_figures(table),
            **time_plan_files(args.table),
            "elapsed_s": time.time() - started,
        }
        checkpoints.append(point)
        log(f"registrar: {c:,} commits: interval p50 {point['interval_p50_ms']:.1f} ms, "
            f"metadata.json {human_bytes(point['metadata_json_bytes'])}, "
            f"{point['manifests']:,} manifests, plan_files {point['plan_files_s']:.2f} s")
    code = reg.wait(stop=True)
    if code != 0:
        raise SystemExit(f"the registrar exited with {code} on SIGTERM; see {args.state}")
    out["registrar"] = {
        "checkpoints": checkpoints,
        "wall_s": time.time() - started,
        "segments": shipped,
        "max_rss_kb": reg.peak_rss_kb,
        "cpu_s": reg.cpu_s,
    }
    final = cat.load_table(args.table).current_snapshot()
    files = int(final.summary["total-data-files"])
    if files != shipped + 1:
        raise SystemExit(f"{args.table}: {files} data files after {shipped + 1} segments")


def run_peer(args, cat, segments, merge: bool, out) -> None:
    """pyiceberg add_files, one file per call, into a table of the same schema and
    properties, on one long-lived table object, as a per-file writer would."""
    bucket = os.environ["THADAM_TEST_BUCKET"]
    # With delete-after-commit pyiceberg also deletes the old metadata.json itself after each
    # commit, which the catalog already did: one warning per call, nothing wrong.
    logging.getLogger("pyiceberg.catalog").setLevel(logging.ERROR)
    source = cat.load_table(args.table)
    peer = bench.create_like(cat, args.peer_table, source.schema())
    set_properties(cat, args.peer_table, merge)
    peer = cat.load_table(args.peer_table)
    check = args.peer_dup_check == "on"
    paths = [f"s3://{bucket}/{s['object_key']}" for s in segments[: args.peer_commits]]
    calls: list[float] = []
    cpu: list[float] = []
    checkpoints = []
    plan = dict(plan_checkpoints(args.checkpoints, len(paths), args.window))
    started = time.time()
    for path in paths:
        t, c = time.perf_counter(), time.process_time()
        peer.add_files([path], check_duplicate_files=check)
        calls.append(1000 * (time.perf_counter() - t))
        cpu.append(1000 * (time.process_time() - c))
        n = len(calls)
        if n in plan:
            w = plan[n]
            window = sorted(calls[-w:])
            table = cat.load_table(args.peer_table)
            checkpoints.append({
                "commits": n,
                "window": w,
                "call_p50_ms": bench.percentile(window, 50),
                "call_p90_ms": bench.percentile(window, 90),
                "cpu_ms_per_commit": sum(cpu[-w:]) / w,
                **window_figures(table, w),
                **table_figures(table),
                **time_plan_files(args.peer_table),
            })
            log(f"pyiceberg: {n:,} add_files calls: per call p50 "
                f"{checkpoints[-1]['call_p50_ms']:.0f} ms")
    out["peer"] = {"checkpoints": checkpoints, "wall_s": time.time() - started,
                   "check_duplicate_files": check, "calls": len(calls)}


def cmd_run(args) -> dict:
    env = os.environ
    bucket = env["THADAM_TEST_BUCKET"]
    data_dir = Path(env["THADAM_TEST_S3_DATA_DIR"])
    merge = args.merge == "on"
    cat = bench.catalog()
    out: dict = {"merge": merge, "commits": args.commits,
                 "properties": set_properties(cat, args.table, merge),
                 "other_logs": args.other_logs}
    set_other_logs(cat, args.table, args.other_logs)
    template = template_segment(bench.read_log(args.log))
    template_path = data_dir / bucket / template["object_key"]
    segments = segments_like(template, "hist", 1, max(args.commits - 1, args.peer_commits))
    t = time.perf_counter()
    place_objects(template_path, data_dir, bucket, [s["object_key"] for s in segments],
                  Path(args.sources_dir))
    verify_placed(bucket, segments[-1]["object_key"], template_path.read_bytes())
    log(f"placed {len(segments):,} objects in {time.perf_counter() - t:.1f} s")
    out["rows"] = template["row_count"]
    out["object_bytes"] = template["file_size"]
    run_registrar(args, cat, template, segments[: args.commits - 1], out)
    if args.peer_commits > 0:
        run_peer(args, cat, segments, merge, out)
    return out


def fmt(v, spec=".1f", none="n/a"):
    return none if v is None or v != v else format(v, spec)


def cmd_report(args) -> None:
    r = json.loads(Path(args.results).read_text())
    reg = r["registrar"]
    print(f"Registrar, one segment per snapshot (`--max-batch 1`), "
          f"`commit.manifest-merge.enabled={str(r['merge']).lower()}`; "
          f"{reg['segments'] + 1:,} commits in {reg['wall_s']:.0f} s "
          f"(checkpoint measurements included), peak RSS {mib(reg['max_rss_kb'])} MiB, "
          f"CPU {reg['cpu_s']:.1f} s:")
    print()
    rows = []
    for p in reg["checkpoints"]:
        h = p["histogram"]
        rows.append([
            f"{p['commits']:,}", p["window"],
            f"**{fmt(p['interval_p50_ms'])}**", fmt(p["interval_p90_ms"]),
            fmt(p["stamp_interval_p50_ms"], ".0f"), fmt(h["mean_ms"]),
            fmt(p["cpu_ms_per_commit"]),
            human_bytes(p["bytes_per_commit"]) if p["bytes_per_commit"] else "n/a",
            human_bytes(p["metadata_json_bytes"]), human_bytes(p["manifest_list_bytes"]),
            f"{p['manifests']:,}", f"{mib(p['rss_kb'])} / {mib(p['hwm_kb'])}",
            f"{p['plan_files_s']:.2f}",
        ])
    print(markdown(["commits", "window", "commit interval p50 ms", "p90 ms",
                    "snapshot timestamp interval p50 ms", "commit duration mean ms (/metrics)",
                    "CPU ms/commit", "bytes written/commit", "metadata.json",
                    "manifest list", "manifests", "RSS / VmHWM MiB", "pyiceberg plan_files s"],
                   rows))
    peer = r.get("peer")
    if peer:
        print()
        print(f"pyiceberg `add_files`, one file per call, check_duplicate_files="
              f"{peer['check_duplicate_files']}, same table properties; {peer['calls']} calls "
              f"in {peer['wall_s']:.0f} s:")
        print()
        rows = []
        by_commits = {p["commits"]: p for p in reg["checkpoints"]}
        for p in peer["checkpoints"]:
            ours = by_commits.get(p["commits"])
            ratio = (p["call_p50_ms"] / ours["interval_p50_ms"]
                     if ours and ours["interval_p50_ms"] else None)
            rows.append([
                f"{p['commits']:,}", p["window"], f"**{p['call_p50_ms']:.1f}**",
                f"{p['call_p90_ms']:.1f}", fmt(p["cpu_ms_per_commit"]),
                human_bytes(p["bytes_per_commit"]) if p["bytes_per_commit"] else "n/a",
                human_bytes(p["metadata_json_bytes"]), human_bytes(p["manifest_list_bytes"]),
                f"{p['manifests']:,}", f"{p['plan_files_s']:.2f}",
                f"{ratio:.1f}×" if ratio else "n/a",
            ])
        print(markdown(["commits", "window", "per call p50 ms", "p90 ms",
                        "CPU ms/call (Python)", "bytes written/commit", "metadata.json",
                        "manifest list", "manifests", "plan_files s",
                        "pyiceberg p50 / registrar interval p50"], rows))
    print()
    print(f"Each segment {r['rows']} rows, {r['object_bytes']:,} bytes. Commit interval: "
          "between consecutive commits of the window (mtimes of the metadata.json files the "
          "catalog wrote), segments already waiting, so it is the whole per-commit cost. "
          "The file system stamps mtimes in clock ticks (~4 ms): the snapshot timestamp interval "
          "(timestamp-ms, taken by the registrar) is the ms-exact cross-check. Commit duration: "
          "thadam_iceberg_commit_duration_seconds over the window (sum/count). CPU: the registrar's utime+stime "
          "over the window / commits. Bytes written/commit: metadata.json + manifest list + "
          f"the manifests the snapshot added, mean of the window's last {BYTES_SAMPLE} commits. "
          "metadata.json, manifest list, manifests: the current ones at the checkpoint. "
          "plan_files: pyiceberg `table.scan().plan_files()` on a fresh load, registrar idle. "
          "Table properties: " + ", ".join(f"`{k}={v}`" for k, v in r["properties"].items())
          + (f", and the watermarks of {r['other_logs']:,} other segment logs (the registrar's "
             "table only)" if r.get("other_logs") else "")
          + "; metadata.json files on disk at the last checkpoint: "
          f"{reg['checkpoints'][-1]['metadata_files_on_disk']:,}.")


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    for a in ("--config", "--registrar", "--log", "--table", "--crc-lib", "--sources-dir",
              "--state", "--checkpoints", "--peer-table"):
        r.add_argument(a, required=True)
    r.add_argument("--commits", type=int, required=True)
    r.add_argument("--window", type=int, default=100)
    r.add_argument("--merge", choices=["on", "off"], required=True)
    r.add_argument("--peer-commits", type=int, default=200)
    r.add_argument("--peer-dup-check", choices=["on", "off"], default="on")
    r.add_argument("--other-logs", type=int, default=0)
    rep = sub.add_parser("report")
    rep.add_argument("--results", required=True)
    args = p.parse_args()
    if args.cmd == "report":
        cmd_report(args)
        return
    if args.window > 100:
        raise SystemExit("--window is at most 100: the catalog keeps the last 100 metadata.json "
                         "files (write.metadata.previous-versions-max)")
    json.dump(cmd_run(args), sys.stdout)
    print()


if __name__ == "__main__":
    main()
