"""A fleet in one process (contention.sh --in-process): `benches/fleet_sim` runs every node of
the fleet as a registrar in one tokio runtime and ships their segments itself, in place of the
runner processes and the feeders. This wraps it for `contention.py run`, which treats it as one
runner (its /metrics add up over the nodes) and reads the same figures as for processes.

The exchange goes through files in the sim's own directory (see the header of
benches/fleet_sim/main.rs): `sim-ready.json` once the nodes started, `sim-start` (t0) to
start the load, `sim-records.jsonl` and `sim-fed.json` once every segment is shipped,
`sim-exit.json` after a SIGTERM stopped every node.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from common import Registrar


class Sim:
    """The simulator under GNU time (growth/common.Registrar: its /metrics, /proc figures and
    peak RSS), with N nodes of the config `config`."""

    def __init__(self, binary: str, config: Path, table: str, state: Path, nodes: int,
                 rate: float, seconds: int, rows: int, warm_up: bool):
        self.dir = state / "sim"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nodes = nodes
        extra = ["--nodes", str(nodes), "--rate", str(rate), "--seconds", str(seconds),
                 "--rows", str(rows), "--state", str(self.dir)] + (["--warm-up"] if warm_up else [])
        self.reg = Registrar(binary, str(config), table, state / "sim.log", extra)

    def wait_ready(self, timeout: float) -> dict:
        """The memory before and after the nodes started (and the warm-up, with --warm-up)."""
        path = self.dir / "sim-ready.json"
        deadline = time.time() + timeout
        while not path.exists():
            if not self.reg.alive():
                raise SystemExit(f"fleet_sim exited ({self.reg.returncode}) while starting its "
                                 f"nodes; see {self.reg.log_file.name}")
            if time.time() > deadline:
                raise SystemExit(f"fleet_sim did not start its {self.nodes} nodes in "
                                 f"{timeout:.0f} s")
            time.sleep(0.2)
        return json.loads(path.read_text())

    def start(self, t0: float) -> None:
        part = self.dir / "sim-start.partial"
        part.write_text(f"{t0!r}\n")
        os.replace(part, self.dir / "sim-start")

    def feeding(self) -> bool:
        return not (self.dir / "sim-fed.json").exists() and self.reg.alive()

    def fed(self) -> dict:
        path = self.dir / "sim-fed.json"
        if not path.exists():
            raise SystemExit(f"fleet_sim exited ({self.reg.returncode}) before it shipped "
                             f"every segment; see {self.reg.log_file.name}")
        return json.loads(path.read_text())

    def records(self) -> Path:
        return self.dir / "sim-records.jsonl"

    def exit_report(self) -> dict | None:
        """Each node's outcome and the memory at the end, once stopped."""
        path = self.dir / "sim-exit.json"
        return json.loads(path.read_text()) if path.exists() else None


def memory_figures(ready: dict, peak_kb: int, nodes: int) -> dict:
    """What a simulated node costs: the process's peak RSS less its RSS before any node
    started (the runtime, the metrics endpoint and the pipelines' own S3 client), per node; and
    the same for the RSS once every node started (idle, before the load)."""
    before = ready["before_nodes"]["rss_kb"]
    return {"before_nodes_kb": before, "started_kb": ready["started"]["rss_kb"],
            "peak_kb": peak_kb, "nodes": nodes,
            "per_node_started_kb": (ready["started"]["rss_kb"] - before) / nodes,
            "per_node_peak_kb": (peak_kb - before) / nodes,
            "start_s": ready["start_s"], "warm_up_s": ready.get("warm_up_s")}


def read_records(path: Path) -> list[dict]:
    """The sim's records: one JSON object per line, the fields of a log's `uploaded` record."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
