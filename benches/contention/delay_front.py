"""Delay fronts of benches/contention.sh --catalog-delay / --s3-delay: a server far away, as a
fleet's edge nodes see theirs. A TCP front on 127.0.0.1 between the runners and a server (the
Iceberg REST fixture, s3s-fs or SeaweedFS, or a fault front of fronts.py) that forwards every
byte unchanged both ways and holds each HTTP/1.1 request for a delay drawn uniformly from
[D - J, D + J] ms before passing it on:

    delay_front.py --upstream http://127.0.0.1:P --port-file F --delay D[:J] [--seed N]
                   [--name NAME] [--max-connections 2048] [--idle-timeout 300]
                   [--stats-file F] [--state DIR]

Per request, not per connection and not per chunk: the client-to-server direction is parsed just
enough to find where each request starts (the head up to its blank line, then a body of its
Content-Length or chunked, streamed through as it comes, never buffered whole); the front sleeps
once when a request's head has arrived, then writes the head and streams its body without
further delay, so a keep-alive connection's every request is delayed once and a large PUT body
is not delayed per read. The answers stream back untouched (not parsed). A request behind
another on the same connection (pipelined) waits for the one before it to be forwarded, so
requests keep their order; each connection is served by its own coroutines, so one
connection's delay never holds up another's.

Connection setup: a new connection also waits one draw before the front connects upstream (a
TCP handshake to a far server costs a round trip before the first request can go), so its first
request waits two draws in all. TLS (one or two more round trips) is not modelled: the servers
here speak plain HTTP. A far server's answers would also take a round trip per TCP window of a
large body; the front does not model bandwidth or windows, only a fixed cost per request.

Bounds: at most --max-connections client connections open at once (more are closed on accept,
counted); a connection with no byte either way for --idle-timeout seconds is closed (longer than
the clients' and servers' own idle timeouts, so that they, not the front, close idle
connections); the upstream connect times out after 10 s; a request head is at most 1 MiB. When
the server closes its side, the client's connection is closed; when the client closes its side
(FIN), the server's is half-closed and the answer still streams back.

Nothing is printed per request: one line at start (port, upstream, delay, seed) and one at stop
(SIGTERM/SIGINT) with the counts, also written as JSON to --stats-file: requests, connections,
connections refused, the delays drawn (min, mean, max), bytes each way, errors by kind, the most
connections open at once. The randomness is one `random.Random` per front, seeded from --seed
(drawn and printed when not given) and --name; draws are taken as requests arrive, so a repeated
run draws the same sequence of delays, though concurrent connections may take them in another
order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import signal
import sys
import time
from collections import Counter
from urllib.parse import urlsplit

HEAD_LIMIT = 1 << 20  # StreamReader limit: a request head, a chunk-size line
COPY = 1 << 18  # bytes per read when streaming a body or an answer
CONNECT_TIMEOUT = 10.0
DELAY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(?:[:±]([0-9]+(?:\.[0-9]+)?))?$")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} delay_front.py] {msg}", file=sys.stderr, flush=True)


def parse_delay(spec: str) -> tuple[float, float]:
    """`D` or `D:J` (or `D±J`), milliseconds, J <= D -> (D, J)."""
    m = DELAY.match(spec.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"a delay is D or D:J in milliseconds, not {spec!r}")
    d, j = float(m.group(1)), float(m.group(2) or 0)
    if j > d:
        raise argparse.ArgumentTypeError(f"the jitter exceeds the delay: {spec!r}")
    return d, j


def body_framing(head: bytes) -> tuple[bool, int]:
    """(chunked, content length) of a request head; raises ValueError on what is not one."""
    lines = head.split(b"\r\n")
    while lines and not lines[0]:
        lines.pop(0)  # empty lines before a request line may be ignored (RFC 9112 2.2)
    if not lines or b" HTTP/1." not in lines[0]:
        raise ValueError("not an HTTP/1.x request line")
    is_chunked, length = False, 0
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue  # the blank lines at the end
        name = name.strip().lower()
        if name == b"transfer-encoding":
            is_chunked = b"chunked" in value.lower()
        elif name == b"content-length":
            length = int(value.strip())
            if length < 0:
                raise ValueError("a negative Content-Length")
    return is_chunked, length


class Front:
    """One front: its upstream, its delay, its randomness, its counts and its connections."""

    def __init__(self, name: str, upstream: str, delay: tuple[float, float], seed: int,
                 max_connections: int, idle_timeout: float):
        u = urlsplit(upstream)
        self.name = name
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.delay_ms, self.jitter_ms = delay
        self.seed = seed
        self.rng = random.Random(f"{seed}/{name}")
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.counts: Counter[str] = Counter()
        self.delays = [0.0, float("inf"), 0.0]  # sum, min, max (ms), over every draw
        self.open: set[Connection] = set()
        self.peak_open = 0

    def draw(self) -> float:
        """A delay in seconds, uniform in [D - J, D + J] ms."""
        ms = self.rng.uniform(self.delay_ms - self.jitter_ms, self.delay_ms + self.jitter_ms)
        s = self.delays
        s[0] += ms
        s[1] = min(s[1], ms)
        s[2] = max(s[2], ms)
        return ms / 1000.0

    def stats(self) -> dict:
        c = self.counts
        draws = c["requests"] + c["connections"]
        return {"name": self.name, "upstream": f"{self.host}:{self.port}",
                "delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms, "seed": self.seed,
                "requests": c["requests"], "connections": c["connections"],
                "refused": c["refused"], "open": len(self.open), "peak_open": self.peak_open,
                "idle_closed": c["idle_closed"], "upstream_closed": c["upstream_closed"],
                "delay_ms_drawn": {"n": draws,
                                   "mean": round(self.delays[0] / draws, 2) if draws else None,
                                   "min": round(self.delays[1], 2) if draws else None,
                                   "max": round(self.delays[2], 2) if draws else None},
                "bytes_up": c["bytes_up"], "bytes_down": c["bytes_down"],
                "errors": {k[7:]: v for k, v in c.items() if k.startswith("errors:")}}

    async def serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter):
        if len(self.open) >= self.max_connections:
            self.counts["refused"] += 1
            if self.counts["refused"] == 1:
                log(f"{self.max_connections} connections open: refusing more (counted)")
            cwriter.transport.abort()
            return
        self.counts["connections"] += 1
        conn = Connection(self, creader, cwriter)
        self.open.add(conn)
        self.peak_open = max(self.peak_open, len(self.open))
        try:
            await conn.run()
        except asyncio.CancelledError:  # the front stopping
            pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError, ValueError, OSError) as e:
            self.counts["errors:" + type(e).__name__] += 1
        finally:
            self.open.discard(conn)
            conn.close()

    async def sweep(self) -> None:
        """Closes the connections idle (no byte either way) for longer than --idle-timeout."""
        while True:
            await asyncio.sleep(max(1.0, self.idle_timeout / 10))
            now = time.monotonic()
            for conn in [c for c in self.open if now - c.last > self.idle_timeout]:
                self.counts["idle_closed"] += 1
                conn.abort()


class Connection:
    """A client's connection and its own upstream one: `requests` forwards the client's bytes,
    each request once its delay is over; `answers` streams the server's bytes back."""

    def __init__(self, front: Front, creader, cwriter):
        self.front = front
        self.creader = creader
        self.cwriter = cwriter
        self.ureader: asyncio.StreamReader | None = None
        self.uwriter: asyncio.StreamWriter | None = None
        self.last = time.monotonic()

    def close(self) -> None:
        for w in (self.cwriter, self.uwriter):
            if w is not None:
                w.close()

    def abort(self) -> None:
        for w in (self.cwriter, self.uwriter):
            if w is not None:
                w.transport.abort()

    async def run(self) -> None:
        await asyncio.sleep(self.front.draw())  # the handshake's round trip
        self.ureader, self.uwriter = await asyncio.wait_for(
            asyncio.open_connection(self.front.host, self.front.port, limit=HEAD_LIMIT),
            CONNECT_TIMEOUT)
        up = asyncio.ensure_future(self.requests())
        down = asyncio.ensure_future(self.answers())
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if up.done() and up.exception() is None and not down.done():
                # The client half-closed (FIN after its last request): so does the front
                # upstream, and the answers still stream back until the server closes.
                if self.uwriter.can_write_eof():
                    self.uwriter.write_eof()
                await asyncio.wait({down})
            elif down.done() and down.exception() is None:
                # The server closed its side: so does the front the client's, even with a
                # request in flight (as a server far away would).
                self.front.counts["upstream_closed"] += 1
        finally:
            for t in (up, down):
                if not t.done():
                    t.cancel()
            for r in await asyncio.gather(up, down, return_exceptions=True):
                if isinstance(r, Exception):  # counted; the connection closes
                    self.front.counts["errors:" + type(r).__name__] += 1

    async def requests(self) -> None:
        front, creader, uwriter = self.front, self.creader, self.uwriter
        counts = front.counts
        while True:
            try:
                head = await creader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if e.partial.strip():
                    raise
                return  # a clean EOF between requests
            self.last = time.monotonic()
            is_chunked, length = body_framing(head)
            counts["requests"] += 1
            await asyncio.sleep(front.draw())
            uwriter.write(head)
            counts["bytes_up"] += len(head)
            if is_chunked:
                await self.chunked_body()
            elif length:
                await self.copy_body(length)
            await uwriter.drain()

    async def copy_body(self, left: int) -> None:
        creader, uwriter, counts = self.creader, self.uwriter, self.front.counts
        while left:
            data = await creader.read(min(left, COPY))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            self.last = time.monotonic()
            uwriter.write(data)
            counts["bytes_up"] += len(data)
            left -= len(data)
            await uwriter.drain()

    async def chunked_body(self) -> None:
        creader, uwriter, counts = self.creader, self.uwriter, self.front.counts
        while True:
            line = await creader.readuntil(b"\r\n")
            uwriter.write(line)
            counts["bytes_up"] += len(line)
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # the trailer, up to its blank line
                    t = await creader.readuntil(b"\r\n")
                    uwriter.write(t)
                    counts["bytes_up"] += len(t)
                    if t == b"\r\n":
                        return
            await self.copy_body(size + 2)  # the chunk and its CRLF

    async def answers(self) -> None:
        ureader, cwriter, counts = self.ureader, self.cwriter, self.front.counts
        while data := await ureader.read(COPY):
            self.last = time.monotonic()
            cwriter.write(data)
            counts["bytes_down"] += len(data)
            await cwriter.drain()


async def run(front: Front, port_file: str, stats_file: str | None) -> None:
    # Two descriptors per client connection.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * front.max_connections + 64))
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError) as e:
            log(f"cannot raise the open files limit from {soft}: {e}")
    server = await asyncio.start_server(front.serve, "127.0.0.1", 0, limit=HEAD_LIMIT,
                                        backlog=1024)
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sweeper = asyncio.ensure_future(front.sweep())
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, port_file)
    log(f"{front.name} front on 127.0.0.1:{port} -> {front.host}:{front.port}, "
        f"{front.delay_ms:g}±{front.jitter_ms:g} ms per request and per new connection, "
        f"seed {front.seed}")
    async with server:
        await stop.wait()
        sweeper.cancel()
        stats = front.stats()
        for conn in list(front.open):
            conn.abort()
    log(f"{front.name} front stopping: {json.dumps(stats, sort_keys=True)}")
    if stats_file:
        tmp = stats_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(stats, f, sort_keys=True)
            f.write("\n")
        os.replace(tmp, stats_file)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="http://HOST:PORT of the server")
    p.add_argument("--port-file", required=True, help="where to write the port listened on")
    p.add_argument("--delay", type=parse_delay, required=True, help="D[:J] milliseconds")
    p.add_argument("--seed", type=int, help="default: drawn, and printed")
    p.add_argument("--name", default="front", help="names the front (and its randomness)")
    p.add_argument("--max-connections", type=int, default=2048)
    p.add_argument("--idle-timeout", type=float, default=300.0, help="seconds")
    p.add_argument("--stats-file", help="the counts as JSON, written on stop")
    p.add_argument("--state", help="the bench's state dir (only names the process)")
    args = p.parse_args()
    if args.max_connections < 1 or args.idle_timeout <= 0:
        p.error("--max-connections and --idle-timeout must be positive")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big") >> 1
    front = Front(args.name, args.upstream, args.delay, seed, args.max_connections,
                  args.idle_timeout)
    asyncio.run(run(front, args.port_file, args.stats_file))


if __name__ == "__main__":
    main()
