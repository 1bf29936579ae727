"""Fault fronts of benches/contention.sh --faults: HTTP/1.1 proxies on 127.0.0.1 between the
runners and the servers, that forward every request byte for byte (the request line, every
header, the Host header included, and the body: S3 checks SigV4 signatures over them) and every
answer byte for byte, except for the faults they inject:

    fronts.py s3      --upstream http://127.0.0.1:P --port-file F [--seed N]
                      [--lost-intent-puts 0.05] [--failed-deletes 0.10]
                      [--lost-delete-answers 0.05] [--state DIR]
    fronts.py catalog --upstream http://127.0.0.1:P --port-file F [--seed N]
                      [--lost-commit-answers 0.10] [--state DIR]
    fronts.py counts  --url http://127.0.0.1:P                     -> JSON on stdout

S3 front:
  * lost intent-PUT answers: a PUT of an object whose key contains `/_thadam-intents/` is
    forwarded; when S3 stored it (2xx), with probability --lost-intent-puts the front drops
    the connection without answering (the intent WAS stored, the publisher hears nothing);
  * failed deletes: a DELETE of an object or a bulk delete (`POST /<bucket>?delete`) is, with
    probability --failed-deletes, answered `500 InternalError` (an S3 XML error) and NOT
    forwarded (nothing deleted);
  * lost delete answers: otherwise, with probability --lost-delete-answers, it is forwarded and,
    when S3 answered 2xx, the connection is dropped without an answer (deleted, unheard).
Catalog front:
  * lost commit answers: a commit (`POST .../v1/.../namespaces/<ns>/tables/<table>` whose JSON
    body holds an `add-snapshot` update) is forwarded; when the catalog applied it (2xx), with
    probability --lost-commit-answers the connection is dropped without an answer ("commit state
    unknown": the snapshot is in, the committer hears nothing).

An answer is dropped only when upstream took the request (2xx): a dropped 409 or 500 would be
a different fault (an attempt the client must treat as unknown that in fact did not land), one
the issue did not ask for; such requests are counted as `spared`.

How: asyncio streams, one upstream connection per client connection (opened when the client
connects), so keep-alive on one side is keep-alive on the other; a request is read whole
(Content-Length or chunked, `Expect: 100-continue` answered by the front) and written upstream
unchanged, the answer streamed back as it comes (Content-Length, chunked, or until the upstream
closes). When either side closes, so does the other. Every injected fault is logged on stderr
(time, kind, method, target). `GET /_thadam-front/counts` is answered by the front itself (never
forwarded; no S3 bucket and no REST path starts so): its counts as JSON, requests by kind and
faults by kind, connections accepted, and the most connections open at once since the last
query (`peak_open`). The randomness is one `random.Random` per front, seeded from --seed and the
front's kind (decisions are drawn as requests arrive, so concurrent runs differ in which
requests get the faults, not in their rates).
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
import urllib.request
from collections import Counter
from urllib.parse import urlsplit

CONTROL = b"/_thadam-front/"
HEAD_LIMIT = 1 << 20  # StreamReader limit: request and answer heads (and chunk lines)
COPY = 1 << 18  # bytes per read when streaming an answer's body
COMMIT_PATH = re.compile(rb"^(?:https?://[^/]+)?/v1/(?:[^?#]*/)?namespaces/[^/?#]+/tables/[^/?#]+"
                         rb"(?:\?[^#]*)?$")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} fronts.py] {msg}", file=sys.stderr, flush=True)


class Drop(Exception):
    """The answer is to be lost: close the client's connection without a word."""


class Request:
    __slots__ = ("method", "target", "headers", "raw", "body", "close", "fault", "kind")

    def __init__(self, method: bytes, target: bytes, headers: dict[bytes, bytes], raw: bytes,
                 body: bytes, close: bool):
        self.method = method
        self.target = target
        self.headers = headers
        self.raw = raw  # head and body, as they came
        self.body = body  # the body, de-chunked (what a decision may read)
        self.close = close
        self.fault: str | None = None  # a fault to inject if the answer is 2xx
        self.kind = "other"


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """A message head up to and with its blank line; None on a clean EOF before it."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise


def parse_head(head: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """The start line's parts and the headers (lower-case names; repeated ones joined by ,)."""
    lines = head[:-4].split(b"\r\n")
    start = lines[0].split(b" ", 2)
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = headers[name] + b"," + value if name in headers else value
    return start, headers


def chunked(headers: dict[bytes, bytes]) -> bool:
    return b"chunked" in headers.get(b"transfer-encoding", b"").lower()


async def read_chunked(reader: asyncio.StreamReader, raw: list[bytes] | None,
                       out: asyncio.StreamWriter | None = None) -> bytes:
    """A chunked body: kept raw in `raw` (or written to `out` as it comes), returned decoded
    (only when kept)."""
    data: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            trailer = [line]
            while True:
                t = await reader.readuntil(b"\r\n")
                trailer.append(t)
                if t == b"\r\n":
                    break
            if raw is not None:
                raw.extend(trailer)
            else:
                out.write(b"".join(trailer))
            return b"".join(data)
        chunk = await reader.readexactly(size + 2)
        if raw is not None:
            raw.append(line)
            raw.append(chunk)
            data.append(chunk[:-2])
        else:
            out.write(line)
            out.write(chunk)
            await out.drain()


class Front:
    """One front: its upstream, its fault fractions, its randomness and its counts."""

    def __init__(self, kind: str, upstream: str, seed: int, fractions: dict[str, float]):
        u = urlsplit(upstream)
        self.kind = kind
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.fractions = fractions
        self.rng = random.Random(f"{seed}/{kind}")
        self.counts: Counter[str] = Counter()
        self.connections = 0
        self.open = 0
        self.peak_open = 0
        self.in_flight: dict[int, tuple[float, str]] = {}  # forwarded, not yet answered

    # ---- decisions -------------------------------------------------------------------------

    def classify(self, req: Request, close: bool) -> bytes | None:
        """Counts the request, decides its fault: returns a canned answer to send instead of
        forwarding, or None (then req.fault may name a fault to inject on a 2xx answer)."""
        m, target = req.method, req.target
        path, _, query = target.partition(b"?")
        f = self.fractions
        if self.kind == "s3":
            if m == b"PUT":
                req.kind = "put_intent" if b"/_thadam-intents/" in path else "put"
                if req.kind == "put_intent" and self.rng.random() < f["lost_intent_puts"]:
                    req.fault = "lost_intent_put_answer"
            elif m == b"DELETE" or (m == b"POST" and re.search(rb"(?:^|&)delete(?:=|&|$)",
                                                                query)):
                req.kind = "delete" if m == b"DELETE" else "bulk_delete"
                r = self.rng.random()
                if r < f["failed_deletes"]:
                    self.counts[f"requests:{req.kind}"] += 1
                    self.counts[f"fault:failed_{req.kind}"] += 1
                    log(f"failed {req.kind} (500, not forwarded): {m.decode()} "
                        f"{target.decode(errors='replace')[:300]}")
                    return s3_internal_error(self.counts["fault:failed_delete"]
                                             + self.counts["fault:failed_bulk_delete"], close)
                if r < f["failed_deletes"] + f["lost_delete_answers"]:
                    req.fault = f"lost_{req.kind}_answer"
            elif m in (b"GET", b"HEAD"):
                req.kind = "list" if (m == b"GET" and path.count(b"/") <= 1
                                      or b"list-type=" in query) else m.decode().lower()
            else:
                req.kind = m.decode(errors="replace").lower()
        else:
            if m == b"POST" and COMMIT_PATH.match(target) and b"add-snapshot" in req.body:
                req.kind = "commit"
                req.fault = "lost_commit_answer"  # drawn on the 2xx, see decide()
            else:
                req.kind = m.decode(errors="replace").lower()
        self.counts[f"requests:{req.kind}"] += 1
        return None

    def decide(self, req: Request, status: int) -> bool:
        """On the answer's status: whether to lose it (req.fault set, and a 2xx)."""
        if req.fault is None:
            return False
        ok = 200 <= status < 300
        if req.kind == "commit":
            if not ok:
                return False
            self.counts["commits_applied"] += 1
            if self.rng.random() >= self.fractions["lost_commit_answers"]:
                return False
        elif not ok:
            self.counts[f"spared:{req.fault}"] += 1
            return False
        self.counts[f"fault:{req.fault}"] += 1
        log(f"{req.fault.replace('_', ' ')} ({status} dropped): {req.method.decode()} "
            f"{req.target.decode(errors='replace')[:300]}")
        return True

    def snapshot(self) -> dict:
        now = time.time()
        oldest = sorted(self.in_flight.values())[:5]
        return {"kind": self.kind, "fractions": self.fractions, "counts": dict(self.counts),
                "connections": self.connections, "open": self.open,
                "peak_open": self.peak_open, "in_flight": len(self.in_flight),
                "oldest_in_flight": [{"age_s": round(now - t, 1), "request": what}
                                     for t, what in oldest]}

    # ---- one client connection -------------------------------------------------------------

    async def serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter):
        self.connections += 1
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        conn = Connection(self, creader, cwriter)
        try:
            await conn.run()
        except (Drop, asyncio.CancelledError):  # lost on purpose; the front stopping
            pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError, OSError) as e:
            self.counts["errors:" + type(e).__name__] += 1
        finally:
            self.open -= 1
            conn.close()


class Connection:
    """A client's connection and its upstream one. Two coroutines: `requests` reads the
    client's requests and forwards them (or queues the front's own answer), `answers` streams
    upstream's answers back in order (or loses one). An upstream connection that closed while
    idle (a server's idle timeout) is replaced before the next request is forwarded, never
    with a request on it; one that closes with a request in flight closes the client's too."""

    def __init__(self, front: Front, creader, cwriter):
        self.front = front
        self.creader = creader
        self.cwriter = cwriter
        self.ureader: asyncio.StreamReader | None = None
        self.uwriter: asyncio.StreamWriter | None = None
        self.queue: asyncio.Queue = asyncio.Queue()

    async def connect(self) -> None:
        if self.uwriter is not None:
            self.uwriter.close()
        try:
            self.ureader, self.uwriter = await asyncio.open_connection(
                self.front.host, self.front.port, limit=HEAD_LIMIT)
        except OSError as e:
            self.front.counts["errors:upstream_connect"] += 1
            log(f"cannot reach upstream {self.front.host}:{self.front.port}: {e}")
            raise

    def close(self) -> None:
        while not self.queue.empty():  # requests forwarded that will never be answered here
            item = self.queue.get_nowait()
            if isinstance(item, Request):
                self.front.in_flight.pop(id(item), None)
        for w in (self.cwriter, self.uwriter):
            if w is not None:
                w.close()

    async def run(self) -> None:
        await self.connect()
        reqs = asyncio.ensure_future(self.requests())
        try:
            await self.answers()
        finally:
            if not reqs.done():
                reqs.cancel()
            try:
                await reqs
            except (asyncio.CancelledError, Exception):  # noqa: BLE001  (closing anyway)
                pass

    async def requests(self) -> None:
        """The client's requests, in order: each classified, then forwarded (queued for its
        answer) or answered by the front (queued as bytes, so answers keep their order)."""
        front, creader, queue = self.front, self.creader, self.queue
        try:
            while True:
                head = await read_head(creader)
                if head is None:
                    return
                (method, target, *rest), headers = parse_head(head)
                version = rest[0] if rest else b"HTTP/1.0"
                conn = headers.get(b"connection", b"").lower()
                close = b"close" in conn or (version == b"HTTP/1.0" and b"keep-alive" not in conn)
                if b"100-continue" in headers.get(b"expect", b"").lower():
                    self.cwriter.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                raw = [head]
                if chunked(headers):
                    body = await read_chunked(creader, raw)
                else:
                    n = int(headers.get(b"content-length", b"0") or b"0")
                    body = await creader.readexactly(n) if n else b""
                    raw.append(body)
                if target.startswith(CONTROL):
                    queue.put_nowait(answer(200, "OK", "application/json",
                                            json.dumps(front.snapshot()).encode(), close))
                    front.peak_open = front.open  # the peak since the last query
                else:
                    req = Request(method, target, headers, b"".join(raw), body, close)
                    canned = front.classify(req, close)
                    if canned is not None:
                        queue.put_nowait(canned)
                    else:
                        if self.ureader.at_eof() and queue.empty():
                            front.counts["upstream_reconnects"] += 1
                            await self.connect()
                        self.uwriter.write(req.raw)
                        front.in_flight[id(req)] = (time.time(), f"{method.decode()} "
                                                    f"{target.decode(errors='replace')[:200]}")
                        queue.put_nowait(req)
                        await self.uwriter.drain()
                if close:
                    return
        finally:
            queue.put_nowait(None)

    async def answers(self) -> None:
        """The answers, in the requests' order: upstream's streamed back (or lost), the
        front's own written. Returns when the client is done or either side closed."""
        front, cwriter, queue = self.front, self.cwriter, self.queue
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, bytes):
                cwriter.write(item)
                await cwriter.drain()
                if b"Connection: close" in item[:item.index(b"\r\n\r\n")]:
                    return
                continue
            req: Request = item
            ureader = self.ureader
            try:
                while True:
                    head = await read_head(ureader)
                    if head is None:
                        front.counts["errors:upstream_closed_in_flight"] += 1
                        return  # upstream closed with a request in flight: so does the client's
                    (_, status, *_), headers = parse_head(head)
                    code = int(status)
                    if 100 <= code < 200 and code != 101:
                        continue  # an interim answer (100 Continue): the front gave its own
                    break
            finally:
                front.in_flight.pop(id(req), None)
            if front.decide(req, code):
                raise Drop()
            cwriter.write(head)
            close = req.close or b"close" in headers.get(b"connection", b"").lower()
            if req.method == b"HEAD" or code in (204, 304):
                pass
            elif chunked(headers):
                await read_chunked(ureader, None, cwriter)
            elif b"content-length" in headers:
                left = int(headers[b"content-length"])
                while left:
                    data = await ureader.read(min(left, COPY))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", left)
                    cwriter.write(data)
                    left -= len(data)
                    await cwriter.drain()
            else:  # until upstream closes
                while data := await ureader.read(COPY):
                    cwriter.write(data)
                    await cwriter.drain()
                close = True
            await cwriter.drain()
            if close:
                return


def answer(code: int, reason: str, ctype: str, body: bytes, close: bool = False) -> bytes:
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode() + body


def s3_internal_error(n: int, close: bool) -> bytes:
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
            '<Message>We encountered an internal error. Please try again.</Message>'
            f'<RequestId>thadam-front-{n}</RequestId></Error>').encode()
    return answer(500, "Internal Server Error", "application/xml", body, close)


async def run(front: Front, port_file: str) -> None:
    # Two descriptors per client connection: a 256-node fleet keeps ~1,000 connections open.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
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
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, port_file)
    log(f"{front.kind} front on 127.0.0.1:{port} -> {front.host}:{front.port}, "
        f"fractions {front.fractions}")
    async with server:
        await stop.wait()
    log(f"{front.kind} front stopping: {json.dumps(front.snapshot(), sort_keys=True)}")


def fraction(v: str) -> float:
    x = float(v)
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"not a fraction in [0, 1]: {v}")
    return x


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s3 = sub.add_parser("s3")
    s3.add_argument("--lost-intent-puts", type=fraction, default=0.05)
    s3.add_argument("--failed-deletes", type=fraction, default=0.10)
    s3.add_argument("--lost-delete-answers", type=fraction, default=0.05)
    cat = sub.add_parser("catalog")
    cat.add_argument("--lost-commit-answers", type=fraction, default=0.10)
    for q in (s3, cat):
        q.add_argument("--upstream", required=True)
        q.add_argument("--port-file", required=True)
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--state", help="the bench's state dir (only names the process)")
    c = sub.add_parser("counts")
    c.add_argument("--url", required=True)
    args = p.parse_args()
    if args.cmd == "counts":
        with urllib.request.urlopen(args.url.rstrip("/") + CONTROL.decode() + "counts",
                                    timeout=10) as r:
            print(r.read().decode())
        return
    if args.cmd == "s3":
        fractions = {"lost_intent_puts": args.lost_intent_puts,
                     "failed_deletes": args.failed_deletes,
                     "lost_delete_answers": args.lost_delete_answers}
        if fractions["failed_deletes"] + fractions["lost_delete_answers"] > 1:
            p.error("--failed-deletes + --lost-delete-answers must not exceed 1")
    else:
        fractions = {"lost_commit_answers": args.lost_commit_answers}
    asyncio.run(run(Front(args.cmd, args.upstream, args.seed, fractions), args.port_file))


if __name__ == "__main__":
    main()
