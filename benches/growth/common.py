"""What benches/growth/history.py and backlog.py share: the registrar as a child process (its
/metrics endpoint, /proc figures, GNU time's peak RSS and CPU at exit), Prometheus text parsing, table figures
read from s3s-fs's data directory, and markdown tables."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
import bench  # noqa: E402  (benches/e2e/bench.py: catalog(), read_log(), percentile())

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} {Path(sys.argv[0]).name}] {msg}", file=sys.stderr,
          flush=True)


REGISTERED_HELP = "# HELP thadam_iceberg_segments_registered_total "
# Set (1.0) in a parse whose segments_registered_total includes the segments carried by others.
REGISTERED_INCLUDES_CARRIED = "registered_includes_carried"


def parse_metrics(text: str, table: str) -> dict[str, float]:
    """Series of one table (plus unlabelled ones), keyed `name` or `name{le=..}` for buckets
    (`name@phase` for a histogram by `phase`);
    series that differ only in other labels are summed: by `outcome`, `whose`, `reason` or `kind`
    under `name:value`, by any other (cause) under `name`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(REGISTERED_HELP) and "carried into it" in line:
            # Since the fleet exactly-once work, a node's segments_registered_total counts its
            # log's segments whoever committed them (carried by others included).
            out[REGISTERED_INCLUDES_CARRIED] = 1.0
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = bench.parse_labels(rest.rstrip("}")) if rest else {}
        if labels.get("table", table) != table:
            continue
        if "phase" in labels:
            # One histogram per phase: `name@phase` (+ `_bucket`, `_count`, `_sum`).
            for suffix in ("_bucket", "_count", "_sum"):
                if name.endswith(suffix):
                    name = f"{name[:-len(suffix)]}@{labels['phase']}{suffix}"
                    break
        key = name
        if "le" in labels:
            key = f"{name}{{le={labels['le']}}}"
        elif "outcome" in labels:
            key = f"{name}:{labels['outcome']}"
        elif "whose" in labels or "reason" in labels:
            key = f"{name}:{labels.get('whose') or labels['reason']}"
        elif "kind" in labels:
            key = f"{name}:{labels['kind']}"
        try:
            out[key] = out.get(key, 0.0) + float(value)
        except ValueError:
            continue
    return out


class Registrar:
    """The release registrar as a grandchild, under GNU time: started with --metrics-addr
    127.0.0.1:0 (and any extra arguments), its address read from stdout, its log on `log_path`.

    Why GNU time: a child forked from this Python process carries the interpreter's RSS
    (~140 MiB with pyiceberg loaded) into its ru_maxrss across exec, so wait4's figure would be
    Python's, not the registrar's. GNU time is forked from a small process, and reports its
    child's own peak (ru_maxrss, what VmHWM is at exit) and CPU times. /proc figures are read
    from the registrar itself (time's child)."""

    def __init__(self, binary: str, config: str, table: str, log_path: Path, extra: list[str]):
        self.table = table
        self.time_file = Path(str(log_path) + ".time")
        self.argv = ["/usr/bin/time", "-f", "%M %U %S", "-o", str(self.time_file),
                     binary, "--config", config, "--metrics-addr", "127.0.0.1:0", *extra]
        self.log_file = open(log_path, "ab")
        self.started = time.time()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.log_file)
        self.time_pid = self.proc.pid
        self.url = None
        self.peak_rss_kb = None
        self.cpu_s = None
        self.returncode = None
        found = threading.Event()

        def read_stdout():
            for raw in self.proc.stdout:
                m = re.search(rb"listening on (http://\S+)", raw)
                if m and self.url is None:
                    self.url = m.group(1).decode()
                    found.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        deadline = time.time() + 60
        while not found.wait(0.05):
            if not self.alive() or time.time() > deadline:
                raise SystemExit(f"the registrar did not print its metrics address "
                                 f"(exit {self.returncode}); see {log_path}")
        children = Path(f"/proc/{self.time_pid}/task/{self.time_pid}/children").read_text()
        if not children.split():
            raise SystemExit("cannot find the registrar under /usr/bin/time")
        self.pid = int(children.split()[0])

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            return parse_metrics(resp.read().decode(), self.table)

    def try_metrics(self) -> dict[str, float] | None:
        try:
            return self.metrics()
        except OSError:
            return None  # exiting (--until-caught-up) or not serving yet

    def proc_figures(self) -> dict[str, float]:
        """CPU seconds (utime+stime) and VmRSS / VmHWM in KiB, from /proc."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        status = Path(f"/proc/{self.pid}/status").read_text()

        def kib(name):
            m = re.search(rf"^{name}:\s+(\d+) kB", status, re.M)
            return int(m.group(1)) if m else 0

        return {"cpu_s": cpu, "rss_kb": kib("VmRSS"), "hwm_kb": kib("VmHWM")}

    def _reaped(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.returncode  # reaped here: Popen must not wait again
        self.log_file.close()
        try:
            fields = self.time_file.read_text().split()
            # "Command exited with non-zero status N" may precede the figures.
            self.peak_rss_kb, user, system = int(fields[-3]), float(fields[-2]), float(fields[-1])
            self.cpu_s = user + system
        except (OSError, ValueError, IndexError):
            pass

    def alive(self) -> bool:
        """Whether it still runs; reaps GNU time once it exited."""
        if self.returncode is not None:
            return False
        pid, status = os.waitpid(self.time_pid, os.WNOHANG)
        if pid == 0:
            return True
        self._reaped(status)
        return False

    def wait(self, stop: bool = False) -> int:
        """Waits for the exit (SIGTERM to the registrar first if `stop`: GNU time would die of
        it and leave the registrar running); returns the exit code."""
        if self.returncode is None:
            if stop:
                os.kill(self.pid, signal.SIGTERM)
            self._reaped(os.waitpid(self.time_pid, 0)[1])
        if self.peak_rss_kb is None:
            raise SystemExit(f"no figures from /usr/bin/time in {self.time_file}")
        return self.returncode

    def wait_for(self, key: str, target: float, timeout: float, poll: float = 0.1) -> dict:
        """Polls /metrics until series `key` reaches `target`; returns those metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.try_metrics()
            if m is not None and m.get(key, 0.0) >= target:
                return m
            if not self.alive():
                raise SystemExit(f"the registrar exited ({self.returncode}) before "
                                 f"{key} reached {target}")
            if time.time() > deadline:
                raise SystemExit(f"{key} did not reach {target} within {timeout:.0f} s "
                                 f"(at {None if m is None else m.get(key)})")
            time.sleep(poll)


def local_path(location: str) -> Path:
    """s3://bucket/key -> the file s3s-fs keeps it in."""
    return Path(os.environ["THADAM_TEST_S3_DATA_DIR"]) / location.removeprefix("s3://")


def table_figures(table) -> dict:
    """Sizes of what a reader must fetch to plan a scan: metadata.json, the current manifest
    list and its manifests."""
    snap = table.current_snapshot()
    out = {
        "snapshots": len(table.metadata.snapshots),
        "metadata_json_bytes": local_path(table.metadata_location).stat().st_size,
        "manifest_list_bytes": 0,
        "manifests": 0,
        "manifest_bytes": 0,
        "data_files": 0,
    }
    if snap is not None:
        out["manifest_list_bytes"] = local_path(snap.manifest_list).stat().st_size
        manifests = snap.manifests(table.io)
        out["manifests"] = len(manifests)
        out["manifest_bytes"] = sum(m.manifest_length for m in manifests)
        out["data_files"] = int(snap.summary["total-data-files"])
    return out


def time_plan_files(ident: str) -> dict:
    """pyiceberg's cost of planning a full scan, as a reader pays it: load the table, then
    table.scan().plan_files() (reads the manifest list and every manifest)."""
    cat = bench.catalog()
    t = time.perf_counter()
    table = cat.load_table(ident)
    loaded = time.perf_counter()
    tasks = list(table.scan().plan_files())
    done = time.perf_counter()
    return {"load_s": loaded - t, "plan_files_s": done - loaded, "tasks": len(tasks)}


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# thadam_iceberg_store_requests_total's kinds, and S3 Standard's request prices (us-east-1 list
# prices, USD per 1,000 requests): PUT, COPY, POST and LIST in one tier, GET and HEAD in
# another, DELETE free. A multipart create and complete are POSTs, its parts PUTs: all `put`.
STORE_REQUEST = "thadam_iceberg_store_requests_total"
REQUEST_KINDS = ("put", "copy", "list", "get", "head", "delete", "other")
PRICE_PER_1000 = {"put": 0.005, "copy": 0.005, "list": 0.005, "get": 0.0004, "head": 0.0004,
                  "delete": 0.0, "other": 0.0004}


def store_requests(m: dict[str, float]) -> dict[str, float]:
    """The store requests by kind in a parse_metrics dict (one runner's, or summed)."""
    return {k: m.get(f"{STORE_REQUEST}:{k}", 0.0) for k in REQUEST_KINDS}


def requests_per_segment(rows: list[tuple[str, dict[str, float], float]]) -> str:
    """A markdown table: for each (label, requests by kind, segments registered), the requests per
    segment by kind, and what a million segments cost at S3 Standard's request prices."""
    out = []
    for label, counts, segments in rows:
        if not segments:
            out.append([label, *("n/a" for _ in REQUEST_KINDS), "n/a", "n/a"])
            continue
        per = {k: counts.get(k, 0.0) / segments for k in REQUEST_KINDS}
        dollars = sum(per[k] * PRICE_PER_1000[k] for k in REQUEST_KINDS) * 1_000_000 / 1000
        out.append([label, *(f"{per[k]:.4f}" for k in REQUEST_KINDS),
                    f"{sum(per.values()):.4f}", f"${dollars:,.2f}"])
    return markdown(["", *REQUEST_KINDS, "total", "per million segments (S3 Standard)"], out)


def mib(kb: float) -> str:
    return f"{kb / 1024:.1f}"


def human_bytes(n: float) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"
