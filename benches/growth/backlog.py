"""Helper of benches/backlog.sh: one backlog of N segments, placed (not shipped), then the
release registrar with --until-caught-up; and the report.

    backlog.py run --config C --registrar BIN --log LOG --table NS.NAME --segments N
                   --crc-lib SO --sources-dir DIR --state DIR      -> JSON on stdout
    backlog.py report --results FILE...                            -> markdown on stdout

The table exists (the bench script's warm-up registered one shipped segment, which is also the
template every placed object copies). Peak RSS and CPU time are GNU time's (ru_maxrss of the
registrar: VmHWM at exit); /metrics and /proc are sampled every 100 ms for the backlog gauge,
the RSS curve and the first commit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from common import (Registrar, bench, human_bytes, log, markdown, mib, requests_per_segment,
                    store_requests, table_figures, time_plan_files)
from seglog import (Crc32c, LogAppender, place_objects, segments_like, template_segment,
                    verify_placed)

# pyiceberg's plan_files is timed on the registered table up to this many files (the
# 100,000-segment backlog and its warm-up's file): at ~40-80 us per file, a million would take
# over a minute, with every file's entry held as Python objects.
PLAN_FILES_MAX = 110_000


def cmd_run(args) -> dict:
    env = os.environ
    bucket = env["THADAM_TEST_BUCKET"]
    data_dir = Path(env["THADAM_TEST_S3_DATA_DIR"])
    crc = Crc32c(args.crc_lib)
    template = template_segment(bench.read_log(args.log))
    template_path = data_dir / bucket / template["object_key"]
    template_bytes = template_path.read_bytes()
    segments = segments_like(template, "bl", 1, args.segments)

    t = time.perf_counter()
    place_objects(template_path, data_dir, bucket, [s["object_key"] for s in segments],
                  Path(args.sources_dir))
    place_s = time.perf_counter() - t
    verify_placed(bucket, segments[-1]["object_key"], template_bytes)
    log(f"placed {len(segments):,} objects in {place_s:.1f} s (hard links; one read back "
        "through S3)")
    t = time.perf_counter()
    LogAppender(Path(args.log), crc).append_uploaded(segments)
    records_s = time.perf_counter() - t
    log(f"appended {len(segments):,} uploaded records in {records_s:.1f} s")

    cat = bench.catalog()
    before = table_figures(cat.load_table(args.table))
    log(f"registering {len(segments):,} segments (registrar --until-caught-up)")
    reg = Registrar(args.registrar, args.config, args.table,
                    Path(args.state) / f"backlog-{args.segments}-registrar.log",
                    ["--until-caught-up"])
    started_ms = reg.started * 1000
    samples = []
    first_commit_s = None
    last_m = None
    next_progress = time.time() + 10
    while reg.alive():
        m = reg.try_metrics()
        if m is not None:
            last_m = m
        try:
            p = reg.proc_figures()
        except OSError:
            p = None  # exited between the two reads
        now = time.time()
        if m is not None and p is not None:
            samples.append({
                "t": now - reg.started,
                "backlog": m.get("thadam_iceberg_backlog_segments"),
                "registered": m.get("thadam_iceberg_segments_registered_total", 0.0),
                "commits": m.get("thadam_iceberg_commits_total:ok", 0.0),
                **p,
            })
            if first_commit_s is None and samples[-1]["commits"] > 0:
                first_commit_s = samples[-1]["t"]
            if now > next_progress:
                log(f"{samples[-1]['registered']:,.0f} registered, RSS {mib(p['rss_kb'])} MiB")
                next_progress = now + 10
        time.sleep(0.1)
    wall_s = time.time() - reg.started
    code = reg.wait()
    if code != 0:
        raise SystemExit(f"the registrar exited with {code}; see its log in {args.state}")
    table = cat.load_table(args.table)
    after = table_figures(table)
    added = after["data_files"] - before["data_files"]
    if added != len(segments):
        raise SystemExit(f"{added} data files added for {len(segments)} segments")
    new = sorted(s.timestamp_ms for s in table.metadata.snapshots
                 if s.timestamp_ms >= started_ms)
    plan = None
    if after["data_files"] <= PLAN_FILES_MAX:
        plan = time_plan_files(args.table)
        log(f"pyiceberg plan_files: {plan['plan_files_s']:.2f} s for {plan['tasks']:,} files in "
            f"{after['manifests']:,} manifests")
    gauges = [s["backlog"] for s in samples if s["backlog"] is not None]
    return {
        "segments": len(segments),
        "object_bytes": len(template_bytes),
        "rows": template["row_count"],
        "place_s": place_s,
        "records_s": records_s,
        "wall_s": wall_s,
        "first_snapshot_s": (new[0] - started_ms) / 1000 if new else None,
        "first_commit_seen_s": first_commit_s,
        "last_snapshot_s": (new[-1] - started_ms) / 1000 if new else None,
        "snapshots": after["snapshots"] - before["snapshots"],
        "max_rss_kb": reg.peak_rss_kb,
        "cpu_s": reg.cpu_s,
        "backlog_gauge_max": max(gauges) if gauges else None,
        "backlog_gauge_first": gauges[0] if gauges else None,
        "rss_curve_kb": [(round(s["t"], 1), s["rss_kb"]) for s in samples[:: max(1, len(samples) // 20)]],
        "metadata_json_bytes": after["metadata_json_bytes"],
        "manifests": after["manifests"],
        "plan_files_s": plan["plan_files_s"] if plan else None,
        "plan_files_tasks": plan["tasks"] if plan else None,
        "samples": len(samples),
        # The last sample before the registrar exited (up to 100 ms before its last requests):
        # its store requests by kind, the segments registered and the footers read by then.
        "store_requests": store_requests(last_m) if last_m else None,
        "requests_registered": last_m.get("thadam_iceberg_segments_registered_total", 0.0)
        if last_m else None,
        "requests_footers_read": last_m.get("thadam_iceberg_footer_reads_total", 0.0)
        if last_m else None,
    }


def cmd_report(args) -> None:
    runs = [json.loads(Path(p).read_text()) for p in args.results]
    rows = []
    for r in runs:
        steady = None
        if r["first_snapshot_s"] is not None and r["last_snapshot_s"] and \
                r["last_snapshot_s"] > r["first_snapshot_s"]:
            steady = r["segments"] / (r["last_snapshot_s"] - r["first_snapshot_s"])
        gauge = r["backlog_gauge_max"]
        rows.append([
            f"{r['segments']:,}",
            f"{r['wall_s']:.1f}",
            f"{r['segments'] / r['wall_s']:,.0f}",
            f"{steady:,.0f}" if steady else "n/a",
            f"{r['first_snapshot_s']:.2f}" if r["first_snapshot_s"] is not None else "n/a",
            f"{r['snapshots']:,}",
            f"**{mib(r['max_rss_kb'])}**",
            f"{r['max_rss_kb'] * 1024 / r['segments']:,.0f}",
            f"{r['cpu_s']:.1f}",
            f"{gauge:,.0f}" if gauge is not None else "not seen",
            human_bytes(r["metadata_json_bytes"]),
            (f"{r['plan_files_s']:.2f} ({r['plan_files_tasks']:,} files, {r['manifests']} "
             "manifests)") if r.get("plan_files_s") is not None else "not timed",
        ])
    print(markdown(["segments", "wall s (to caught-up)", "seg/s (wall)",
                    "seg/s (first→last snapshot)", "first commit s", "snapshots",
                    "peak RSS MiB (VmHWM)", "peak RSS B/segment", "CPU s (user+sys)",
                    "backlog gauge max", "metadata.json after",
                    "pyiceberg plan_files s"], rows))
    print()
    r0 = runs[0]
    print(f"Each segment: {r0['rows']} rows, {r0['object_bytes']:,} bytes (hard links of one "
          "shipped segment placed in s3s-fs's directory; placing and writing the catalog "
          "records is not timed: " + ", ".join(
              f"{r['segments']:,}: {r['place_s']:.1f} s + {r['records_s']:.1f} s" for r in runs)
          + "). Wall time runs from the registrar's start (process start, catalog connection, "
          "log replay included) to its exit on --until-caught-up; first commit = the first new "
          "snapshot's timestamp-ms after the start. Backlog gauge: thadam_iceberg_backlog_"
          "segments, the highest value seen in /metrics sampled every 100 ms. pyiceberg "
          "plan_files: a fresh load, then table.scan().plan_files() over the whole table (every "
          f"file of the table, the warm-up's included), registrar stopped; not timed above "
          f"{PLAN_FILES_MAX:,} files.")
    for r in runs:
        curve = ", ".join(f"{t:g}s {kb / 1024:.0f}" for t, kb in r["rss_curve_kb"])
        print(f"\nRSS (MiB) over time, {r['segments']:,} segments: {curve}")
    counted = [r for r in runs if r.get("store_requests")]
    if counted:
        print("\nS3 requests per registered segment, by kind (a lone registrar: thadam_iceberg_"
              "store_requests_total over segments_registered_total at the registrar's last "
              "/metrics sample, less one GET for each footer read by then of a segment not yet "
              "registered):\n")
        rows = []
        for r in counted:
            counts = dict(r["store_requests"])
            ahead = max(0.0, (r.get("requests_footers_read") or 0.0) - r["requests_registered"])
            counts["get"] = counts["get"] - ahead
            rows.append((f"{r['segments']:,} segments", counts, r["requests_registered"]))
        print(requests_per_segment(rows))
        for r in counted:
            print(f"\n{r['segments']:,} segments, at the last sample: "
                  f"{r['requests_registered']:,.0f} registered, "
                  f"{r.get('requests_footers_read') or 0:,.0f} footers read, requests "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in r["store_requests"].items() if v))


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    for a in ("--config", "--registrar", "--log", "--table", "--crc-lib", "--sources-dir",
              "--state"):
        r.add_argument(a, required=True)
    r.add_argument("--segments", type=int, required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--results", nargs="+", required=True)
    args = p.parse_args()
    if args.cmd == "report":
        cmd_report(args)
        return
    json.dump(cmd_run(args), sys.stdout)
    print()


if __name__ == "__main__":
    main()
