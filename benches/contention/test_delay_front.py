"""Self-test of delay_front.py (benches/contention.sh --catalog-delay / --s3-delay), a few seconds:

    $THADAM_VENV_PYTHON benches/contention/test_delay_front.py            # the checks below
    $THADAM_VENV_PYTHON benches/contention/test_delay_front.py --load 1000 [--connections 128]
                        [--seconds 10] [--delay 100:20]                     # the front's CPU

It starts a tiny HTTP/1.1 server (this script's `serve`, asyncio, keep-alive) and a front before
it (--delay 100:20 by default), then checks, through the front:
  * keep-alive: every request of one connection takes D +- J more than straight to the server
    (the first one two draws: the connection's setup, then the request);
  * large bodies are delayed once, not per read: a 32 MiB PUT (Content-Length) and a chunked PUT
    of 256 chunks each take one delay more than straight, and arrive byte for byte;
  * a large answer streams back whole; two pipelined requests are answered in order;
  * connections are independent: 16 requests at once on 16 warm connections take one delay;
  * a server that closes (Connection: close) closes the client's connection;
  * the draws (the front's stats on stop) are the seed's first draws, all in [D - J, D + J];
  * with --max-connections 2 --idle-timeout 1: a third connection is refused, idle ones closed.
Exit 0 when all pass. `--load R` instead sends R requests/s in all over --connections keep-alive
connections for --seconds, and prints the front's CPU (utime+stime from /proc) and the delays
seen (p50, p99 of each request's time minus its time straight).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRONT = HERE / "delay_front.py"
SLACK_MS = 40.0  # scheduling noise allowed above D + J on a busy 2-core machine
# (the times straight to the server of the large bodies are the best of three)


# ---- the tiny server ---------------------------------------------------------------------------

async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = head[:-4].split(b"\r\n")
            method, target, _ = lines[0].split(b" ", 2)
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                headers[k.strip().lower()] = v.strip()
            h = hashlib.sha256()
            n = 0
            if b"chunked" in headers.get(b"transfer-encoding", b""):
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass
                        break
                    data = await reader.readexactly(size + 2)
                    h.update(data[:-2])
                    n += size
            else:
                left = int(headers.get(b"content-length", b"0"))
                while left:
                    data = await reader.read(min(left, 1 << 16))
                    if not data:
                        return
                    h.update(data)
                    n += len(data)
                    left -= len(data)
            close = headers.get(b"connection", b"").lower() == b"close"
            if target.startswith(b"/big/"):
                body = b"x" * int(target[5:])
            else:
                body = json.dumps({"method": method.decode(), "target": target.decode(),
                                   "len": n, "sha256": h.hexdigest()}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n"
                         % (len(body), b"Connection: close\r\n" if close else b"") + body)
            await writer.drain()
            if close:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve(port_file: str) -> None:
    server = await asyncio.start_server(serve_one, "127.0.0.1", 0, backlog=1024)
    Path(port_file).write_text(f"{server.sockets[0].getsockname()[1]}\n")
    async with server:
        await server.serve_forever()


# ---- processes -----------------------------------------------------------------------------

def wait_port(proc: subprocess.Popen, port_file: Path) -> int:
    for _ in range(100):
        if port_file.exists() and port_file.read_text().endswith("\n"):
            return int(port_file.read_text())
        if proc.poll() is not None:
            sys.exit(f"{proc.args} exited with {proc.returncode}")
        time.sleep(0.05)
    sys.exit(f"{proc.args} did not start")


def start_server(tmp: Path) -> tuple[subprocess.Popen, int]:
    pf = tmp / "server.port"
    proc = subprocess.Popen([sys.executable, __file__, "serve", "--port-file", str(pf)])
    return proc, wait_port(proc, pf)


def start_front(tmp: Path, name: str, upstream: int, delay: str, seed: int,
                *extra: str) -> tuple[subprocess.Popen, int]:
    pf = tmp / f"{name}.port"
    proc = subprocess.Popen([sys.executable, str(FRONT), "--upstream",
                             f"http://127.0.0.1:{upstream}", "--port-file", str(pf),
                             "--delay", delay, "--seed", str(seed), "--name", name,
                             "--stats-file", str(tmp / f"{name}.json"), *extra],
                            stderr=open(tmp / f"{name}.log", "w"))
    return proc, wait_port(proc, pf)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the checks --------------------------------------------------------------------------------

class Checks:
    def __init__(self, d: float, j: float):
        self.lo, self.hi = d - j, d + j
        self.failed = 0

    def check(self, ok: bool, what: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        self.failed += not ok

    def added(self, ms: float, what: str, draws: int = 1, copy_ms: float = 0.0) -> None:
        """`ms` more than straight: `draws` delays (+ `copy_ms`, the front's copying of a
        large body, allowed on top)."""
        allowed = f" + {copy_ms:.0f} ms copying" if copy_ms else ""
        self.check(draws * self.lo - 2 <= ms <= draws * self.hi + SLACK_MS + copy_ms,
                   f"{what}: +{ms:.1f} ms (want {draws}x [{self.lo:g}, {self.hi:g}]{allowed})")


def timed(conn: http.client.HTTPConnection, method: str, target: str,
          body=None, headers=None) -> tuple[float, int, bytes]:
    t = time.perf_counter()
    headers = headers or {}
    conn.request(method, target, body=body, headers=headers,
                 encode_chunked="Transfer-Encoding" in headers)
    r = conn.getresponse()
    data = r.read()
    return (time.perf_counter() - t) * 1000, r.status, data


def functional(tmp: Path, delay: str) -> int:
    from delay_front import parse_delay  # noqa: E402  (beside this file)
    d, j = parse_delay(delay)
    c = Checks(d, j)
    seed = 4242
    srv, sport = start_server(tmp)
    front, fport = start_front(tmp, "test", sport, delay, seed)
    small, small_port = start_front(tmp, "small", sport, "0", 1, "--max-connections", "2",
                                    "--idle-timeout", "1")
    try:
        direct = http.client.HTTPConnection("127.0.0.1", sport, timeout=30)
        via = http.client.HTTPConnection("127.0.0.1", fport, timeout=30)
        base = statistics.median(timed(direct, "GET", "/x")[0] for _ in range(5))
        first = timed(via, "GET", "/x")[0]
        c.added(first - base, "the first request of a new connection (setup + request)", 2)
        for i in range(10):
            ms, status, _ = timed(via, "GET", f"/k{i}")
            c.added(ms - base, f"keep-alive request {i + 1}/10 (status {status})")
        c.check(via.sock is not None, "the 10 requests shared one connection")

        big = os.urandom(32 << 20)
        sha = hashlib.sha256(big).hexdigest()
        put_direct = min(timed(direct, "PUT", "/big-put", big)[0] for _ in range(3))
        ms, _, data = timed(via, "PUT", "/big-put", big)
        got = json.loads(data)
        c.added(ms - put_direct, "a 32 MiB PUT (Content-Length, 128+ reads)", copy_ms=put_direct)
        c.check(got["len"] == len(big) and got["sha256"] == sha, "its body arrived byte for byte")

        chunks = [os.urandom(65536) for _ in range(256)]
        csha = hashlib.sha256(b"".join(chunks)).hexdigest()
        ch_direct = min(timed(direct, "PUT", "/chunked", iter(chunks),
                              {"Transfer-Encoding": "chunked"})[0] for _ in range(3))
        ms, _, data = timed(via, "PUT", "/chunked", iter(chunks), {"Transfer-Encoding": "chunked"})
        got = json.loads(data)
        c.added(ms - ch_direct, "a chunked PUT of 256 chunks", copy_ms=ch_direct)
        c.check(got["len"] == 256 * 65536 and got["sha256"] == csha,
                "its body arrived byte for byte")

        get_direct = min(timed(direct, "GET", f"/big/{16 << 20}")[0] for _ in range(3))
        ms, _, data = timed(via, "GET", f"/big/{16 << 20}")
        c.added(ms - get_direct, "a 16 MiB answer", copy_ms=get_direct)
        c.check(data == b"x" * (16 << 20), "it streamed back whole")
        via.close()
        direct.close()

        with socket.create_connection(("127.0.0.1", fport), timeout=30) as s:
            t = time.perf_counter()
            s.sendall(b"GET /p1 HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"PUT /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
            buf = b""
            while buf.count(b"HTTP/1.1 200") < 2 or not buf.endswith(b"}"):
                data = s.recv(65536)
                if not data:
                    break
                buf += data
            ms = (time.perf_counter() - t) * 1000
        c.check(buf.find(b'"/p1"') < buf.find(b'"/p2"') and b'"len": 3' in buf,
                "two pipelined requests answered in order")
        c.added(ms - base, "the pipelined pair on a new connection (setup + two requests)", 3)

        conns = [http.client.HTTPConnection("127.0.0.1", fport, timeout=30) for _ in range(16)]
        for conn in conns:
            timed(conn, "GET", "/warm")
        times: list[float] = []
        gate = threading.Barrier(17)

        def one(conn):
            gate.wait()
            times.append(timed(conn, "GET", "/together")[0])

        threads = [threading.Thread(target=one, args=(conn,)) for conn in conns]
        for t in threads:
            t.start()
        gate.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = (time.perf_counter() - t0) * 1000
        c.added(wall - base, "16 requests at once on 16 warm connections (wall time)")
        c.check(max(times) <= c.hi + base + SLACK_MS + 30,
                f"none waited for another's delay (slowest +{max(times) - base:.1f} ms)")
        for conn in conns:
            conn.close()

        with socket.create_connection(("127.0.0.1", fport), timeout=30) as s:
            s.sendall(b"GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            buf = b""
            while data := s.recv(65536):
                buf += data
        c.check(buf.startswith(b"HTTP/1.1 200") and buf.endswith(b"}"),
                "a server's Connection: close closes the client's connection after the answer")

        a = socket.create_connection(("127.0.0.1", small_port), timeout=5)
        b = socket.create_connection(("127.0.0.1", small_port), timeout=5)
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", small_port), timeout=5) as third:
            try:
                refused = third.recv(1) == b""
            except ConnectionResetError:
                refused = True
        c.check(refused, "--max-connections 2: a third connection is closed on accept")
        time.sleep(2.5)
        closed = []
        for s in (a, b):
            try:
                closed.append(s.recv(1) == b"")
            except ConnectionResetError:
                closed.append(True)
            s.close()
        c.check(all(closed), "--idle-timeout 1: idle connections closed within 2.5 s")
    finally:
        stop(front)
        stop(small)
        stop(srv)
    stats = json.loads((tmp / "test.json").read_text())
    small_stats = json.loads((tmp / "small.json").read_text())
    rng = random.Random(f"{seed}/test")
    n = stats["delay_ms_drawn"]["n"]
    want = [rng.uniform(d - j, d + j) for _ in range(n)]
    c.check(abs(stats["delay_ms_drawn"]["mean"] - sum(want) / n) < 0.01,
            f"the {n} draws are the seed's first {n} (mean {stats['delay_ms_drawn']['mean']} ms)")
    c.check(d - j <= stats["delay_ms_drawn"]["min"] <= stats["delay_ms_drawn"]["max"] <= d + j,
            f"all in [{d - j:g}, {d + j:g}]: min {stats['delay_ms_drawn']['min']}, "
            f"max {stats['delay_ms_drawn']['max']}")
    c.check(stats["requests"] == 49 and stats["connections"] == 19,
            f"counted {stats['requests']} requests on {stats['connections']} connections "
            "(want 49 on 19)")
    c.check(small_stats["refused"] == 1 and small_stats["idle_closed"] == 2,
            f"counted {small_stats['refused']} refused, {small_stats['idle_closed']} idle-closed")
    print(f"{'all passed' if not c.failed else f'{c.failed} FAILED'}", flush=True)
    return 1 if c.failed else 0


# ---- the load ----------------------------------------------------------------------------------

async def load_client(port: int, period: float, until: float, out: list[float],
                      offset: float) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(offset)
    nxt = time.perf_counter()
    while nxt < until:
        t = time.perf_counter()
        writer.write(b"GET /l HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(n)
        out.append((time.perf_counter() - t) * 1000)
        nxt += period
        await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
    writer.close()


async def load_phase(port: int, rps: float, conns: int, seconds: float) -> list[float]:
    out: list[float] = []
    period = conns / rps
    until = time.perf_counter() + seconds + period + 1
    await asyncio.gather(*(load_client(port, period, until, out, period * i / conns)
                           for i in range(conns)))
    return out


def load(tmp: Path, delay: str, rps: float, conns: int, seconds: float) -> int:
    srv, sport = start_server(tmp)
    front, fport = start_front(tmp, "load", sport, delay, 1)
    try:
        straight = asyncio.run(load_phase(sport, rps, conns, min(seconds, 3)))
        c0, t0 = cpu_s(front.pid), time.perf_counter()
        times = asyncio.run(load_phase(fport, rps, conns, seconds))
        cpu, wall = cpu_s(front.pid) - c0, time.perf_counter() - t0
    finally:
        stop(front)
        stop(srv)
    q = statistics.quantiles(times, n=100)
    qs = statistics.quantiles(straight, n=100)
    print(f"{len(times)} requests in {wall:.1f} s ({len(times) / wall:.0f}/s) over {conns} "
          f"connections through a {delay} ms front: front CPU {cpu:.2f} s "
          f"({100 * cpu / wall:.1f}% of a core); time per request p50 {q[49]:.1f} ms, "
          f"p99 {q[98]:.1f} ms (straight: p50 {qs[49]:.1f} ms, p99 {qs[98]:.1f} ms)")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--port-file", required=True)
    p.add_argument("--delay", default="100:20")
    p.add_argument("--load", type=float, help="requests/s in all (instead of the checks)")
    p.add_argument("--connections", type=int, default=128)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    if args.cmd == "serve":
        asyncio.run(serve(args.port_file))
        return
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory(prefix="thadam-delay-front.") as tmp:
        if args.load:
            sys.exit(load(Path(tmp), args.delay, args.load, args.connections, args.seconds))
        sys.exit(functional(Path(tmp), args.delay))


if __name__ == "__main__":
    main()
