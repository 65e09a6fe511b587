"""Streaming decode of large Kineto files: inflate a few MB, decode the complete events in it, repeat.

Peak memory is then one piece of JSON plus one chunk of structs, not the whole JSON (a 2 GB trace
stays within a few hundred MB). It relies on one property of JSON: inside a string a quote is
always escaped, so ``}`` ``,`` ``{"`` (an unescaped quote) only occurs between two objects of a
list, which in ``traceEvents`` means between two events (compact or indented layout alike). Any surprise (an unexpected
layout, a damaged stream, an event that does not decode) raises ``StreamFallback`` and the caller
reads the file whole with the salvaging reader instead (``kineto.decode``).
"""
from __future__ import annotations

import os
import re
from typing import Iterator

import msgspec

from rankscope.model import inflate
from rankscope.model.readers.kineto import _DECODER, BOM, Event, RawTrace, Trace, bom_skipped, decode_events

PIECE = 2 << 20
# Files inflating to at least this many bytes are streamed (RANKSCOPE_STREAM_BYTES overrides).
DEFAULT_STREAM_BYTES = 16 << 20
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb'\}\s*,\s*\{\s*"')
_END = re.compile(rb"\}\s*\]\s*([,}])")
_WINDOW = 1 << 20
_TAIL = 1 << 16


class StreamFallback(Exception):
    """The file cannot be streamed; read it whole instead."""


def stream_threshold() -> int:
    try:
        return int(os.environ.get("RANKSCOPE_STREAM_BYTES", DEFAULT_STREAM_BYTES))
    except ValueError:
        return DEFAULT_STREAM_BYTES


def inflated_size(path: str) -> int:
    """Size of the JSON: the file size, or for gzip the ISIZE trailer (size mod 4 GiB)."""
    from rankscope.store import source

    size = source.size(path)
    with source.open_binary(path) as fh:
        if fh.read(2) != b"\x1f\x8b" or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    return isize if isize >= size else isize + (1 << 32)  # a >4 GiB file wraps the trailer


def pieces(path: str, source: inflate.Source | None = None) -> Iterator[bytes]:
    """The file's (inflated) bytes a few MB at a time (bounded, hashed: ``inflate.Source``)."""
    src = source or inflate.Source(path)
    yield from src.pieces()
    if src.damage:  # the salvaging reader keeps what it can and says what was damaged
        raise StreamFallback(src.damage[0])


def _last(pattern: re.Pattern[bytes], buf: bytes) -> re.Match[bytes] | None:
    """The last match, looking at a growing tail of ``buf`` (64 KiB first, not every match)."""
    size = _TAIL
    while True:
        start = max(0, len(buf) - size)
        m = None
        for m in pattern.finditer(buf, start):
            pass
        if m is not None or start == 0:
            return m
        size *= 16


def _events(body: bytes) -> list[Event]:
    try:
        return decode_events(b"[" + body + b"]")
    except (msgspec.DecodeError, UnicodeError) as exc:
        raise StreamFallback(f"events did not decode ({exc})") from exc


class StreamTrace(RawTrace):
    """A RawTrace whose events are decoded while the file is read; ``trace`` (distributedInfo,
    baseTimeNanoseconds, ...) is complete once ``chunks`` has been iterated to the end."""

    def __init__(self, path: str) -> None:
        # No size limit: streaming holds one piece at a time (the ratio bound still stops bombs).
        super().__init__(path, Trace(), streamed=True, source=inflate.Source(path, limit=1 << 62, piece=PIECE))

    def chunks(self, size: int | None = None) -> Iterator[list[Event]]:
        head: bytes | None = None
        buf = b""
        for piece in pieces(self.path, self.source):
            buf += piece
            self.nbytes += len(piece)
            if head is None:
                m = _ARRAY_START.search(buf)
                if m is None:
                    if len(buf) > 64 * _WINDOW:
                        raise StreamFallback("no traceEvents list near the start")
                    continue
                head, buf = buf[:m.start()], buf[m.end():]
                if head.startswith(BOM):  # skipped, and said (as the whole-file reader does)
                    head = head[len(BOM):]
                    self.problems.append(bom_skipped())
            cut = _last(_BOUNDARY, buf)
            if cut is not None:
                body, buf = buf[:cut.start() + 1], buf[buf.index(b"{", cut.start() + 1):]
                yield _events(body)
        yield from self._finish(head, buf)

    def _finish(self, head: bytes | None, buf: bytes) -> Iterator[list[Event]]:
        if head is None:
            raise StreamFallback("no traceEvents list")
        for m in list(_END.finditer(buf))[:8]:
            try:
                last = decode_events(b"[" + buf[:m.start() + 1] + b"]")
                self.trace = _DECODER.decode(head + b'"traceEvents": []' + buf[m.start(1):])
            except msgspec.DecodeError:
                continue
            yield last
            return
        raise StreamFallback("end of the traceEvents list not found (truncated file?)")
