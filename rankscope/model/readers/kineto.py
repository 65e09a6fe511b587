"""Reader for Kineto / torch.profiler Chrome-trace JSON (plain or .gz, current and legacy schema).

The file is decoded once with msgspec into typed structs that keep only the fields rankscope
uses (unknown keys are skipped inside the C decoder), then turned into Arrow columns.
Small files (up to ``DIRECT_BYTES`` of JSON) are decoded in one pass, events straight into a
union of structs tagged on "ph" (``DecodedTrace``); large files are streamed (``stream.py``);
otherwise (unusual or damaged files) events are kept as undecoded JSON slices (``msgspec.Raw``)
and turned into structs a chunk at a time (``RawTrace.chunks``). Damaged files are
salvaged: a truncated gzip stream or JSON document keeps every complete event before the damage,
and the rank is marked partial. Chrome's bare-array form (``[...]``) is read too.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator, Optional, Union

import msgspec

from rankscope.errors import TraceError
from rankscope.model import inflate
from rankscope.model.info import Kind, Problem


# gc=False: hundreds of thousands of decoded structs must not be traversed by every garbage
# collection triggered while columns are built (they hold no reference cycles).
class Args(msgspec.Struct, gc=False, omit_defaults=True, rename={
    "copy_bytes": "bytes", "bandwidth": "memory bandwidth (GB/s)",
    "external_id": "External id", "input_dims": "Input Dims", "input_type": "Input type",
    "coll_name": "Collective name", "in_nelems": "In msg nelems", "out_nelems": "Out msg nelems",
    "pg_name": "Process Group Name", "pg_ranks": "Process Group Ranks", "group_size": "Group size",
    "seq": "Seq", "total_allocated": "Total Allocated", "total_reserved": "Total Reserved",
    "nbytes": "Bytes", "device_id": "Device Id", "concrete_inputs": "Concrete Inputs",
    "src_rank": "Src Rank", "dst_rank": "Dst Rank", "in_split": "In split size", "out_split": "Out split size",
    "global_start": "Global rank start", "global_stride": "Global rank stride",
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
    name: Any = None  # process_name / thread_name metadata events (Ascend names its layers so)
    copy_bytes: Any = None  # memcpy / memset: bytes moved
    bandwidth: Any = None  # memcpy / memset: Kineto's "memory bandwidth (GB/s)"
    # Communication: scalar arguments of c10d ops (the peer of send / recv, all_to_all split sizes) and
    # record_param_comms' p2p peer and split sizes (NCCL); read in model/comm_issue.py.
    concrete_inputs: msgspec.Raw = msgspec.Raw()
    src_rank: Any = None
    dst_rank: Any = None
    in_split: Any = None
    out_split: Any = None
    # NCCL's members of a strided group (first global rank, stride; -1 when not strided): with "Group size",
    # the members where "Process Group Ranks" is cut after 30 (model/comms.py)
    global_start: Any = None
    global_stride: Any = None


# torch writes "Process Group Ranks" as "[0, 1, 2]", cut after 30 members as "[0, ..., 29, ...]"
# (torch/csrc/profiler/util.cpp format_list, kTruncatLength).
_PG_RANKS = re.compile(r"\[\s*(?:\d+(?:\s*,\s*\d+)*(?:\s*,\s*\.\.\.)?)?\s*\]")
_MAX_NELEMS = 1 << 50  # elements of one message: beyond this a count is corrupt, not a tensor


def _nat(v: Any, hi: int) -> bool:
    return type(v) is int and 0 <= v < hi


def _shape_ok(v: Any, depth: int = 0) -> bool:
    """'Input Dims': lists (of lists) of non-negative ints, each shape under ``_MAX_NELEMS`` elements."""
    if not isinstance(v, list) or depth > 8:
        return False
    if all(type(x) is int for x in v):
        n = 1
        for x in v:
            n *= x if x >= 0 else -1
        return 0 <= n < _MAX_NELEMS
    return all(_shape_ok(x, depth + 1) for x in v)


_ARG_CHECKS: dict[str, Any] = {  # label (as torch names the field) -> (attribute, test of a present value)
    "In msg nelems": ("in_nelems", lambda v: _nat(v, _MAX_NELEMS)),
    "Out msg nelems": ("out_nelems", lambda v: _nat(v, _MAX_NELEMS)),
    "Group size": ("group_size", lambda v: _nat(v, (1 << 20) + 1) and v > 0),
    "Process Group Ranks": ("pg_ranks", lambda v: (isinstance(v, str) and _PG_RANKS.fullmatch(v) is not None)
                            or (isinstance(v, list) and all(_nat(x, 1 << 20) for x in v))),
    "dtype": ("dtype", lambda v: isinstance(v, str)),
    "Seq": ("seq", lambda v: _nat(v, 1 << 63)),
    "Process Group Name": ("pg_name", lambda v: isinstance(v, str) or _nat(v, 1 << 63)),
    "Collective name": ("coll_name", lambda v: isinstance(v, str)),
    "External id": ("external_id", lambda v: _nat(v, 1 << 63)),
}


def bad_comm_args(args: list[Any]) -> dict[str, int]:
    """How many values of each collective metadata field (record_param_comms / gloo args) are not what
    torch writes (nelems -1 or 1e300, Group size 'big', ranks '[0,x]', dtype 7): those read as unknown.
    One pass over the few communication events' args."""
    import orjson

    out: dict[str, int] = {}
    for a in args:
        if a is None:
            continue
        for label, (attr, ok) in _ARG_CHECKS.items():
            v = getattr(a, attr)
            if v is not None and not ok(v):
                out[label] = out.get(label, 0) + 1
        dims = bytes(a.input_dims)
        if dims:
            try:
                good = _shape_ok(orjson.loads(dims))
            except (orjson.JSONDecodeError, RecursionError):
                good = False
            if not good:
                out["Input Dims"] = out.get("Input Dims", 0) + 1
    return out


class _Complete(msgspec.Struct, gc=False):
    """The fields rankscope reads from a complete ('X') event."""

    name: str = ""
    cat: Optional[str] = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: Optional[Args] = None


class Event(_Complete, gc=False):
    """Any trace event (the fallback decoding): ``ph`` is a field."""

    ph: str = ""


# Fast path: a union tagged on "ph". Complete events ('X') and instants ('i', the [memory]
# events) get their fields; every other phase (flows, metadata, counters, ...) decodes to an empty
# struct whose keys the C decoder skips: ~20% less decode time and far fewer objects to free on
# flow-heavy traces. ``ph`` is a class attribute, so code written for ``Event`` reads them alike.
# An unknown or missing "ph" fails validation and the chunk is decoded with ``Event`` instead.
class XEvent(_Complete, gc=False, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"


class Instant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    ph: ClassVar[str] = "i"
    name: str = ""
    ts: Any = None
    args: Optional[Args] = None


_OTHER_PHASES = "BEICbnestfPNODMVvRcSTpF()"
_OTHERS = tuple(msgspec.defstruct(f"Phase{ord(c)}", [], tag_field="ph", tag=c, gc=False,
                                  namespace={"ph": c, "name": ""}) for c in _OTHER_PHASES)


class DistInfo(msgspec.Struct):
    # Loose types: a rank written as a string or a huge world size is checked (model/sanity.py) and
    # dropped as one field, not a reason to refuse the whole file.
    backend: Any = None
    rank: Any = None
    world_size: Any = None
    pg_config: Any = None


class Trace(msgspec.Struct, gc=False):
    # Events stay undecoded (zero-copy slices of the JSON buffer) until ``RawTrace.chunks`` turns
    # them into structs a chunk at a time: peak memory is the JSON plus one chunk of structs,
    # not the JSON plus every event as Python objects.
    traceEvents: list[msgspec.Raw] = []
    distributedInfo: Any = None  # read through ``dist_info``
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None


class _TypedTrace(msgspec.Struct, gc=False):
    """A whole document with its events decoded at once (small files, ``decode``)."""

    traceEvents: list[Union[(XEvent, Instant) + _OTHERS]] = []  # type: ignore[valid-type]
    distributedInfo: Any = None  # read through ``dist_info``
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None


def dist_info(trace: Any) -> DistInfo | None:
    """``distributedInfo`` as a DistInfo, None when absent or not an object (fields stay unchecked:
    model/sanity.py bounds them)."""
    d = trace.distributedInfo
    if isinstance(d, DistInfo) or d is None:
        return d
    if not isinstance(d, dict):
        return None
    return DistInfo(**{k: d.get(k) for k in ("backend", "rank", "world_size", "pg_config")})


_DECODER = msgspec.json.Decoder(Trace)
_TYPED_DOC = msgspec.json.Decoder(_TypedTrace)
# Files up to this many JSON bytes are decoded in one pass (events straight into structs); their
# structs then all exist at once, which this bound keeps small (larger files are streamed).
DIRECT_BYTES = 16 << 20
_ARRAY_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[Event])
_EVENT = msgspec.json.Decoder(Event)
_TYPED = msgspec.json.Decoder(list[Union[(XEvent, Instant) + _OTHERS]])  # type: ignore[misc]


def decode_events(buf: bytes) -> list[Any]:
    """A JSON array of trace events -> structs (tagged fast path, ``Event`` when it does not fit).
    Raises msgspec.DecodeError when the events are not valid even as ``Event``."""
    try:
        return _TYPED.decode(buf)
    except msgspec.ValidationError:
        return _EVENTS.decode(buf)
CHUNK = 8192
# Decoding needs the JSON bytes plus the structs (~3x the JSON); refuse above this many JSON bytes
# instead of letting the OS kill the worker. Override with RANKSCOPE_MAX_JSON_BYTES (--max-inflated-size).
DEFAULT_MAX_JSON_BYTES = inflate.DEFAULT_MAX_INFLATED
max_json_bytes = inflate.max_inflated_bytes


@dataclass
class RawTrace:
    """A decoded trace plus what went wrong while reading it."""

    path: str
    trace: Trace
    problems: list[str] = field(default_factory=list)
    partial: bool = False
    nbytes: int = 0
    streamed: bool = False  # events decoded while the file is read (model/stream.py)
    source: Optional[inflate.Source] = None  # how the bytes were read: sha256, damage

    # Subclasses that rewrite events in place (Ascend) need plain ``Event`` structs.
    typed = True

    def _one_by_one(self, part: list[msgspec.Raw], dec: Any) -> Iterator[list[Event]]:
        try:
            yield dec(b"[" + b",".join(part) + b"]")
        except msgspec.DecodeError:
            yield [e for e in (_maybe_event(r) for r in part) if e is not None]

    def chunks(self, size: int | None = None) -> Iterator[list[Event]]:
        """The events as structs, ``size`` at a time. An event that is not a valid trace event
        (not an object, 'ph' not a string, ...) is left out and counted in ``problems``."""
        evs, size = self.trace.traceEvents, size or CHUNK
        dec = decode_events if self.typed else _EVENTS.decode
        bad = 0
        for i in range(0, len(evs), size):
            part = evs[i:i + size]
            buf = b"[" + b",".join(part) + b"]"
            try:
                got = dec(buf)
            except (UnicodeError, msgspec.DecodeError) as exc:
                if not _valid_text(buf):
                    # invalid UTF-8 inside an event (the document decoder keeps them raw): msgspec up to 0.22
                    # raises UnicodeDecodeError, 0.23 DecodeError("Invalid UTF-8 encoded string")
                    fixed = buf.decode("utf-8", "replace")
                    n = fixed.count("\ufffd") - buf.count("\ufffd".encode())
                    self.problems.append(Problem(f"{n} invalid UTF-8 bytes in names were replaced by U+FFFD",
                                                 Kind.INVALID_TEXT, count=n))
                    yield from self._one_by_one(_ARRAY_DECODER.decode(fixed.encode("utf-8")), dec)
                    continue
                if not isinstance(exc, msgspec.DecodeError):
                    raise
                good = []
                for r in part:
                    try:
                        good.append(_EVENT.decode(r))
                    except msgspec.DecodeError:
                        bad += 1
                yield good
                continue
            yield got
        if bad:
            self.problems.append(Problem(f"{bad} malformed events (not trace event objects) were left out",
                                         Kind.MALFORMED_EVENTS, count=bad))


def _valid_text(buf: bytes) -> bool:
    """Whether ``buf`` is valid UTF-8 (asked only on a decode error)."""
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _maybe_event(r: msgspec.Raw) -> Event | None:
    try:
        return _EVENT.decode(r)
    except (msgspec.DecodeError, UnicodeError):
        return None


def read_bytes(path: str | Path) -> tuple[bytes, list[str]]:
    """Read a (possibly gzipped) file; refuses files larger than ``max_json_bytes()``."""
    src = inflate.Source(str(path))
    data = src.read_all()
    return data, src.problems


_EVENT_END = re.compile(rb"\}\s*[,\]]")
_FIRST = re.compile(rb"\s*(\S)")


def _first_char(data: bytes) -> bytes:
    """First non-blank byte without copying the buffer (b"" for a blank document)."""
    m = _FIRST.match(data)
    return m.group(1) if m else b""


def _salvage(data: bytes) -> Trace | None:
    """Cut a truncated JSON document after its last complete event and close it.

    Candidates are '}' followed by ',' or ']' (an object that ended inside a list), tried from the
    end; at most 64 full decodes, so a damaged 1 GB file cannot take hours."""
    start = data.find(b'"traceEvents"')
    bare = start < 0 and _first_char(data) == b"["
    if start < 0 and not bare:
        return None
    tail_at = max(start, 0) + max(0, len(data) - (1 << 20))
    ends = [m.start() for m in _EVENT_END.finditer(data, tail_at)][::-1][:64]
    for end in ends:
        for tail in ((b"]",) if bare else (b"]}", b"}]}")):
            try:
                if bare:
                    return Trace(traceEvents=_ARRAY_DECODER.decode(data[: end + 1] + tail))
                return _DECODER.decode(data[: end + 1] + tail)
            except msgspec.DecodeError:
                continue
    return None


_NAN = re.compile(rb"(?<=:)\s*-?(?:NaN|nan|Infinity|inf)\b")


def _nonstandard(data: bytes, problems: list[str]) -> tuple[Trace | None, bytes]:
    """Python's json and some C++ writers emit bare NaN / Infinity, which is not JSON: read them
    as missing values (the column checks then report the events) instead of failing the file."""
    fixed, n = _NAN.subn(b"null", data)
    if not n:
        return None, data
    problems.append(Problem(f"{n} non-standard NaN/Infinity values read as missing", Kind.NAN, count=n))
    try:
        return _decode_doc(fixed), fixed
    except msgspec.DecodeError:
        return None, fixed


_LONE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _valid_utf8(data: bytes, problems: list[str]) -> bytes:
    """Invalid UTF-8 bytes (a name cut mid-character, latin-1 text) become U+FFFD instead of failing
    the file; only on the error path, so valid files pay nothing."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        bad = text.count("\ufffd") - data.count("\ufffd".encode())
        data = text.encode("utf-8")
        problems.append(Problem(f"{bad} invalid UTF-8 bytes in names were replaced by U+FFFD", Kind.INVALID_TEXT,
                                count=bad))
    # A lone UTF-16 surrogate escape ("\ud800" without its pair) is rejected by the decoder.
    fixed, n = _LONE.subn(rb"\\ufffd", data)
    if n:
        problems.append(Problem(f"{n} invalid text escapes (lone surrogates) in names were replaced by U+FFFD",
                                Kind.INVALID_TEXT, count=n))
        return fixed
    return data


def _decode_doc(data: bytes) -> Trace:
    """Object form ({"traceEvents": [...]}) or Chrome's bare array form ([...])."""
    if _first_char(data) == b"[":
        return Trace(traceEvents=_ARRAY_DECODER.decode(data))
    return _DECODER.decode(data)


@dataclass
class DecodedTrace(RawTrace):
    """A small file decoded in one pass: ``chunks`` hands out slices of the decoded events."""

    events: list[Any] = field(default_factory=list)

    def chunks(self, size: int | None = None) -> Iterator[list[Event]]:
        evs, size = self.events, size or CHUNK
        self.events = []
        for i in range(0, len(evs), size):
            yield evs[i:i + size]


def decode(path: str | Path) -> RawTrace:
    """Decode one trace file; raises TraceError only when nothing at all can be read."""
    p = str(path)
    src = inflate.Source(p)
    try:
        data = src.read_all()
    except OSError as exc:
        raise os_error(p, exc) from exc
    problems = list(src.problems)
    bom: list[str] = []
    if data[:3] == BOM:  # a UTF-8 byte order mark (Windows editors): not JSON; skipped, and said
        data = data[3:]
        bom = [bom_skipped()]
    if not problems and len(data) <= DIRECT_BYTES and _first_char(data) == b"{":
        try:  # one pass, no intermediate Raw slices; anything unusual takes the general path
            doc = _TYPED_DOC.decode(data)
        except (msgspec.DecodeError, UnicodeError):
            pass
        else:
            trace = Trace(distributedInfo=doc.distributedInfo, baseTimeNanoseconds=doc.baseTimeNanoseconds,
                          deviceProperties=doc.deviceProperties)
            empty: list[str] = [] if doc.traceEvents else [no_events()]
            return DecodedTrace(p, trace, bom + empty, False, len(data), source=src, events=doc.traceEvents)
    got = decode_bytes(p, data, problems)
    got.problems[:0] = bom
    got.source = src
    return got


BOM = b"\xef\xbb\xbf"


def bom_skipped() -> Problem:
    return Problem("a UTF-8 byte order mark before the JSON was skipped", Kind.BYTE_ORDER_MARK)


def no_events() -> Problem:
    return Problem("no trace events (metadata only: was the profiler stopped before any step?)", Kind.NO_EVENTS)


def os_error(p: str, exc: OSError) -> TraceError:
    """A file that cannot be opened: a symbolic link loop and a dangling link are named as such."""
    from rankscope.model.info import os_problem

    kind, why = os_problem(p, exc)
    return TraceError(p, why, kind)


def decode_bytes(p: str, data: bytes, problems: list[str]) -> RawTrace:
    """Decode the (inflated) bytes of trace file ``p``; see ``decode``."""
    if not _first_char(data):
        first = problems[0] if problems else None
        raise TraceError(p, str(first or "empty file"), getattr(first, "kind", Kind.EMPTY))
    partial = bool(problems)
    try:
        trace = _decode_doc(data)
    except msgspec.ValidationError as exc:
        raise TraceError(p, f"not a Kineto trace ({exc})", Kind.NOT_A_TRACE) from exc
    except (msgspec.DecodeError, UnicodeError) as exc:
        repaired, fixed = _valid_utf8(data, problems), None
        if repaired is not data:
            data = repaired
            with contextlib.suppress(msgspec.DecodeError):
                fixed = _decode_doc(data)
        if fixed is None:
            fixed, data = _nonstandard(data, problems)
        got = fixed or _salvage(data)
        if got is None:
            raise TraceError(p, f"not valid JSON ({exc})", Kind.NOT_JSON) from exc
        trace = got
        if fixed is None:
            problems.append(Problem(f"truncated JSON ({exc}); kept {len(trace.traceEvents)} complete events",
                                    Kind.TRUNCATED))
            partial = True
    if not trace.traceEvents:
        problems.append(no_events())
    return RawTrace(p, trace, problems, partial, len(data))
