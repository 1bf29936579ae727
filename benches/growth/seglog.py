"""Segments without shipping them: copies of one real segment placed straight into s3s-fs's data
directory under distinct keys, and `uploaded` records for them appended to the segment catalog.

Used by benches/backlog.sh and benches/history.sh, where uploading every object through S3
would dominate the run (1M PUTs) or pace the registrar (a trickle must be bounded by the catalog,
not by the shipper).

s3s-fs 0.14.1 maps bucket B, key K to the file `<root>/B/K` (src/fs.rs get_object_path). Its
sidecars are optional: `.bucket-*.object-*.metadata.json` (user metadata, content type) and
`.internal.json` (stored ETag and checksums); without them a HEAD/GET answers with the file's
size and mtime and an ETag it computes as the MD5 of the file. So a hard link (or copy) of a
shipped object under a new path is an object of that key; `verify_placed` reads one back through
boto3 (HEAD and GET, SigV4) before a bench relies on that. ext4 allows 65,000 links per inode,
so one source copy serves at most LINKS_PER_SOURCE keys.

The catalog records are written by `LogAppender`, a second implementation of the format that
src/protocol/segment_log/mod.rs documents for third-party writers: header, then per record u32
length, u32 CRC-32C, JSON; one write and one fdatasync per batch; the file's advisory lock
(flock, what the Rust writer's File::try_lock takes) held while appending, so a concurrent Rust
writer would fail rather than interleave.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import struct
import time
import uuid
from pathlib import Path

LOG_MAGIC = b"THSEGLOG"
LOG_VERSION = 1
LINKS_PER_SOURCE = 60_000


class Crc32c:
    """CRC-32C through the small C library benches/growth/crc32c.c (built by the bench script)."""

    def __init__(self, library: str):
        lib = ctypes.CDLL(library)
        lib.thadam_crc32c.restype = ctypes.c_uint32
        lib.thadam_crc32c.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self._fn = lib.thadam_crc32c
        # The standard check value of CRC-32C: a wrong table would make every record corrupt.
        if self(b"123456789") != 0xE3069283:
            raise SystemExit(f"{library}: CRC-32C self-test failed")

    def __call__(self, data: bytes) -> int:
        return self._fn(data, len(data))


def last_seq(path: Path) -> int:
    """The last record's seq (0 for an empty log), scanning lengths only (the registrar and the
    Rust writer already validated what is there)."""
    data = path.read_bytes() if path.exists() else b""
    if not data:
        return 0
    if data[:8] != LOG_MAGIC:
        raise SystemExit(f"{path} is not a segment catalog log")
    pos, last = 28, 0
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0 or pos + 8 + length > len(data):
            break
        last = json.loads(data[pos + 8 : pos + 8 + length])["seq"]
        pos += 8 + length
    if pos != len(data):
        raise SystemExit(f"{path}: {len(data) - pos} bytes after the last complete record")
    return last


class LogAppender:
    """Appends `uploaded` records to a segment catalog log, holding its lock while appending."""

    def __init__(self, path: Path, crc: Crc32c):
        self.path = Path(path)
        self.crc = crc
        self.next_seq = last_seq(self.path) + 1

    def append_uploaded(self, segments: list[dict], batch: int = 20_000) -> None:
        """segments: dicts with dataset, segment_id, object_key, file_size, row_count. Written in
        batches of `batch` records (one write + fdatasync each), stamped uploaded_at_ms now."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise SystemExit(f"{self.path}: another writer holds the log's lock") from e
                raise
            if os.fstat(fd).st_size == 0:
                os.write(fd, LOG_MAGIC + struct.pack("<I", LOG_VERSION) + uuid.uuid4().bytes)
            for start in range(0, len(segments), batch):
                now_ms = int(time.time() * 1000)
                parts = []
                for seg in segments[start : start + batch]:
                    payload = json.dumps(
                        {"seq": self.next_seq, "kind": "uploaded", **seg, "uploaded_at_ms": now_ms},
                        separators=(",", ":"),
                    ).encode()
                    parts.append(struct.pack("<II", len(payload), self.crc(payload)) + payload)
                    self.next_seq += 1
                data = b"".join(parts)
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
                os.fdatasync(fd)
        finally:
            os.close(fd)  # releases the lock


def place_objects(template: Path, data_dir: Path, bucket: str, keys: list[str],
                  sources_dir: Path) -> None:
    """Makes every key an object with the template's bytes: hard links to copies of the template
    kept in sources_dir (same file system), a plain copy where linking is refused."""
    sources_dir.mkdir(parents=True, exist_ok=True)
    source = None
    made_dirs: set[Path] = set()
    for i, key in enumerate(keys):
        if i % LINKS_PER_SOURCE == 0:
            source = sources_dir / f"source-{i // LINKS_PER_SOURCE:04d}.parquet"
            if not source.exists():
                shutil.copyfile(template, source)
        target = data_dir / bucket / key
        if target.parent not in made_dirs:
            target.parent.mkdir(parents=True, exist_ok=True)
            made_dirs.add(target.parent)
        try:
            os.link(source, target)
        except FileExistsError:
            pass  # placed by an earlier stage of the same run
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM):
                raise
            shutil.copyfile(template, target)


def verify_placed(bucket: str, key: str, expected: bytes) -> None:
    """HEAD and GET of a placed object through s3s-fs (SigV4, like the registrar's reads)."""
    import boto3
    from botocore.config import Config

    env = os.environ
    s3 = boto3.client(
        "s3",
        endpoint_url=env["THADAM_TEST_S3_ENDPOINT"],
        aws_access_key_id=env["THADAM_TEST_S3_ACCESS_KEY"],
        aws_secret_access_key=env["THADAM_TEST_S3_SECRET_KEY"],
        region_name=env.get("THADAM_TEST_S3_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}),
    )
    head = s3.head_object(Bucket=bucket, Key=key)
    if head["ContentLength"] != len(expected):
        raise SystemExit(f"placed object {key}: HEAD says {head['ContentLength']} bytes, "
                         f"expected {len(expected)}")
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if body != expected:
        raise SystemExit(f"placed object {key}: GET returned other bytes than the template")
    tail = s3.get_object(Bucket=bucket, Key=key, Range="bytes=-8")["Body"].read()
    if tail != expected[-8:] or tail[-4:] != b"PAR1":
        raise SystemExit(f"placed object {key}: a ranged GET of the footer magic failed")


def template_segment(records: list[dict]) -> dict:
    """The last `uploaded` record of a log (the warm-up segment, shipped through S3)."""
    uploaded = [r for r in records if r.get("kind") == "uploaded"]
    if not uploaded:
        raise SystemExit("the segment catalog has no uploaded record to copy")
    return uploaded[-1]


def segments_like(template: dict, prefix: str, first: int, count: int) -> list[dict]:
    """`count` segments with the template's dataset, size and rows, ids `{prefix}-{n:08}` from
    `first` on, keys in the template's folder."""
    folder = template["object_key"].rsplit("/", 1)[0]
    out = []
    for n in range(first, first + count):
        sid = f"{prefix}-{n:08d}"
        out.append({
            "dataset": template["dataset"],
            "segment_id": sid,
            "object_key": f"{folder}/{sid}.parquet",
            "file_size": template["file_size"],
            "row_count": template["row_count"],
        })
    return out
