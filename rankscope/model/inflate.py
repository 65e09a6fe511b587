"""Read a trace file's bytes once: inflate gzip with bounds, check its CRC, hash it for MANIFEST.json.

One pass over the file does everything: the raw bytes are hashed (sha256, size) as they are read,
gzip is inflated by hand (header parsed here, raw deflate, CRC32 and length of the trailer checked
here) so that

* a stream whose payload is complete but whose CRC or length trailer is wrong keeps its content
  (zlib's gzip mode raises at the trailer and loses the last piece) and is marked damaged;
* a truncated stream keeps what could be inflated;
* a "gzip bomb" (a few MB inflating to GB) is refused before it is in memory: the inflated size is
  bounded (``max_inflated_bytes``, ``--max-inflated-size``) and so is the inflation ratio once past
  ``RATIO_FLOOR`` bytes.
"""
from __future__ import annotations

import hashlib
import os
import zlib
from typing import IO, Iterator

from rankscope.errors import TraceError
from rankscope.model.info import Kind, Problem
from rankscope.store import source

PIECE = 2 << 20
# Trace JSON compresses ~10-30:1 (measured on shared/data: 8-25); 100:1 past 64 MiB is a bomb or filler.
MAX_RATIO = 100
RATIO_FLOOR = 64 << 20
DEFAULT_MAX_INFLATED = 8 << 30


def max_inflated_bytes() -> int:
    """Largest inflated (JSON) size read: RANKSCOPE_MAX_JSON_BYTES (set by ``--max-inflated-size``)."""
    try:
        return int(os.environ.get("RANKSCOPE_MAX_JSON_BYTES", DEFAULT_MAX_INFLATED))
    except ValueError:
        return DEFAULT_MAX_INFLATED


def ratio_checked() -> bool:
    """The ratio bound is off once the user raised the size limit explicitly (they know the file)."""
    return "RANKSCOPE_MAX_JSON_BYTES" not in os.environ


def too_large(path: str, size: int, limit: int) -> TraceError:
    return TraceError(path, f"too large to decode in memory ({size / 1e9:.2f} GB of JSON, limit "
                      f"{limit / 1e9:.2f} GB); split the trace (shorter profiling window) or raise the limit "
                      "with --max-inflated-size (RANKSCOPE_MAX_JSON_BYTES) on a machine with more memory",
                      Kind.TOO_LARGE)


def _bomb(path: str, out: int, raw: int) -> TraceError:
    return TraceError(path, f"gzip inflates more than {MAX_RATIO}x ({raw / 1e6:.1f} MB -> over {out / 1e6:.0f} MB "
                      "so far): not a trace (gzip bomb?); if it is one, pass --max-inflated-size to read it",
                      Kind.GZIP_BOMB)


class Source:
    """The inflated bytes of one file, ``pieces()`` at a time; after iteration ``sha256``, ``size``
    (of the raw file), ``problems`` and ``damage`` (reasons the content is not whole) are set."""

    def __init__(self, path: str, limit: int | None = None, piece: int = PIECE) -> None:
        self.path = path
        self.piece = piece
        self.limit = max_inflated_bytes() if limit is None else limit
        self.sha = hashlib.sha256()
        self.size = 0
        self.problems: list[str] = []  # Problem lines
        self.damage: list[str] = []
        self.gzip = False

    @property
    def sha256(self) -> str:
        return self.sha.hexdigest()

    def _read(self, fh: IO[bytes], n: int) -> bytes:
        b = fh.read(n)
        self.sha.update(b)
        self.size += len(b)
        return b

    def pieces(self) -> Iterator[bytes]:
        with source.open_binary(self.path) as fh:  # a local path or any fsspec URL (ranged reads)
            # A small first read: the ratio bound compares with the compressed bytes read so far, so a
            # large first read would let a bomb inflate 100x that much before it is stopped.
            first = self._read(fh, min(self.piece, 64 << 10))
            if first[:2] != b"\x1f\x8b":
                total = 0
                while first:
                    total += len(first)
                    if total > self.limit:
                        raise too_large(self.path, source.size(self.path), self.limit)
                    yield first
                    first = self._read(fh, self.piece)
                return
            self.gzip = True
            # Whole pieces for the consumer: small compressed reads (for the ratio bound) give uneven
            # output; uneven pieces cost the streaming decoder ~20 % more boundary scans and decode calls.
            pending: list[bytes] = []
            size = 0
            for piece in self._inflate(fh, first):
                pending.append(piece)
                size += len(piece)
                if size >= self.piece:
                    yield pending[0] if len(pending) == 1 else b"".join(pending)
                    pending, size = [], 0
            if pending:
                yield b"".join(pending)

    def _inflate(self, fh: IO[bytes], data: bytes) -> Iterator[bytes]:
        start = _header_end(data)
        if start is None:
            self._damaged("gzip header damaged; nothing could be inflated", Kind.GZIP_DAMAGED)
            return
        d, crc, out = zlib.decompressobj(-zlib.MAX_WBITS), 0, 0
        data = data[start:]
        while True:
            while data:
                try:
                    piece = d.decompress(data, self.piece)
                except zlib.error as exc:
                    self._damaged(f"gzip stream damaged ({exc}); kept {out} bytes", Kind.GZIP_DAMAGED)
                    return
                data = d.unconsumed_tail
                crc, out = zlib.crc32(piece, crc), out + len(piece)
                self._bound(out)
                if piece:
                    yield piece
                if d.eof:
                    break
            if d.eof:
                break
            data = self._read(fh, max(self.piece // 16, 1 << 12))
            if not data:
                self._damaged(f"gzip stream damaged (ends early); kept {out} bytes", Kind.GZIP_DAMAGED)
                return
        trailer = d.unused_data + self._read(fh, 8)
        while self._read(fh, PIECE):  # the rest still counts for the MANIFEST hash
            pass
        if len(trailer) < 8:
            self._damaged("gzip trailer missing (content complete)", Kind.GZIP_CHECK)
        elif int.from_bytes(trailer[:4], "little") != crc or int.from_bytes(trailer[4:8], "little") != out % (1 << 32):
            self._damaged("gzip CRC/length check failed (content complete, kept)", Kind.GZIP_CHECK)

    def _bound(self, out: int) -> None:
        if out > self.limit:
            raise too_large(self.path, out, self.limit)
        if ratio_checked() and out > RATIO_FLOOR and out > MAX_RATIO * max(self.size, 1):
            raise _bomb(self.path, out, self.size)

    def _damaged(self, why: str, kind: Kind) -> None:
        p = Problem(why, kind, self.path)
        self.problems.append(p)
        self.damage.append(p)

    def read_all(self) -> bytes:
        return b"".join(self.pieces())


def _header_end(b: bytes) -> int | None:
    """Offset of the deflate data after a gzip header (RFC 1952 section 2.3), None when damaged."""
    if len(b) < 10 or b[2] != 8:
        return None
    flags, i = b[3], 10
    try:
        if flags & 4:  # FEXTRA
            i += 2 + int.from_bytes(b[i:i + 2], "little")
        for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
            if flags & bit:
                i = b.index(b"\0", i) + 1
        if flags & 2:  # FHCRC
            i += 2
    except ValueError:
        return None
    return i if i <= len(b) else None
