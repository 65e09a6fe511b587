"""Reader for Kineto / torch.profiler Chrome-trace JSON (plain or .gz, current and legacy schema).

The file is decoded once with msgspec into typed structs that keep only the fields rankscope
uses (unknown keys are skipped inside the C decoder), then turned into Arrow columns.
Damaged files are salvaged: a truncated gzip stream or JSON document keeps every complete
event before the damage, and the rank is marked partial.
"""
from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import msgspec

from rankscope.errors import TraceError


class Args(msgspec.Struct, rename={
    "external_id": "External id", "input_dims": "Input Dims", "input_type": "Input type",
    "coll_name": "Collective name", "in_nelems": "In msg nelems", "out_nelems": "Out msg nelems",
    "pg_name": "Process Group Name", "pg_ranks": "Process Group Ranks", "group_size": "Group size",
    "seq": "Seq", "total_allocated": "Total Allocated", "total_reserved": "Total Reserved",
    "nbytes": "Bytes", "device_id": "Device Id",
}):
    # Loose types on purpose: one odd value must not make a whole file unreadable; tables.py
    # coerces per column and reports what it could not use.
    external_id: Any = None
    correlation: Any = None
    stream: Any = None
    device: Any = None
    input_dims: msgspec.Raw = msgspec.Raw()
    input_type: msgspec.Raw = msgspec.Raw()
    coll_name: Any = None
    in_nelems: Any = None
    out_nelems: Any = None
    dtype: Any = None
    pg_name: Any = None
    pg_ranks: Any = None
    group_size: Any = None
    seq: Any = None
    total_allocated: Any = None
    total_reserved: Any = None
    nbytes: Any = None
    device_id: Any = None


class Event(msgspec.Struct):
    ph: str = ""
    name: str = ""
    cat: Optional[str] = None
    ts: Any = None
    dur: Any = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: Optional[Args] = None


class PGConfig(msgspec.Struct):
    pg_name: str = ""
    pg_desc: str = ""
    ranks: Union[list, str, None] = None
    pg_size: Optional[int] = None


class DistInfo(msgspec.Struct):
    backend: Optional[str] = None
    rank: Optional[int] = None
    world_size: Optional[int] = None
    pg_config: Optional[list[PGConfig]] = None


class Trace(msgspec.Struct):
    traceEvents: list[Event] = []
    distributedInfo: Optional[DistInfo] = None
    baseTimeNanoseconds: Optional[int] = None
    deviceProperties: Optional[list[dict[str, Any]]] = None


_DECODER = msgspec.json.Decoder(Trace)


@dataclass
class RawTrace:
    """A decoded trace plus what went wrong while reading it."""

    path: str
    trace: Trace
    problems: list[str] = field(default_factory=list)
    partial: bool = False
    nbytes: int = 0


def read_bytes(path: str | Path) -> tuple[bytes, list[str]]:
    """Read a (possibly gzipped) file; a truncated gzip stream yields what could be inflated."""
    raw = Path(path).read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw, []
    try:
        return gzip.decompress(raw), []
    except (EOFError, OSError, zlib.error) as exc:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = d.decompress(raw)
        except zlib.error:
            data = b""
        return data, [f"gzip stream damaged ({exc.__class__.__name__}: {exc}); kept {len(data)} bytes"]


def _salvage(data: bytes) -> Trace | None:
    """Cut a truncated JSON document after its last complete event and close it."""
    start = data.find(b'"traceEvents"')
    if start < 0:
        return None
    end = len(data)
    for _ in range(200):
        end = data.rfind(b"}", start, end)
        if end < 0:
            return None
        for tail in (b"]}", b"}]}"):
            try:
                return _DECODER.decode(data[: end + 1] + tail)
            except msgspec.DecodeError:
                continue
    return None


def decode(path: str | Path) -> RawTrace:
    """Decode one trace file; raises TraceError only when nothing at all can be read."""
    p = str(path)
    try:
        data, problems = read_bytes(path)
    except OSError as exc:
        raise TraceError(p, f"cannot read file ({exc.strerror or exc})") from exc
    if not data.strip():
        raise TraceError(p, "empty file" if not problems else problems[0])
    partial = bool(problems)
    try:
        trace = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(p, f"not a Kineto trace ({exc})") from exc
    except msgspec.DecodeError as exc:
        trace = _salvage(data)
        if trace is None:
            raise TraceError(p, f"not valid JSON ({exc})") from exc
        problems.append(f"truncated JSON ({exc}); kept {len(trace.traceEvents)} complete events")
        partial = True
    return RawTrace(p, trace, problems, partial, len(data))
