"""Sanity bounds on numbers read from files, and tolerant readers of small JSON side files.

A number from a file never sizes an allocation or a loop unchecked: a world size of 10**9 must not
build a list of 10**9 expected ranks. Each bound says what is plausible for a real training job;
a value outside is dropped (the field, never the rank) with one line saying so. meta.json and
run.json are checked field by field against a declared shape (``META`` / ``RUN``, docs/contract.md)
by ``clean``: a value of the wrong type or out of bounds is dropped, all of a file's drops are
counted and named on one line, and analyses only ever see the documented types.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankscope.model.info import Kind, Problem, os_problem

# The largest jobs run today have ~10**5 ranks; 2**20 leaves room and keeps any per-rank list small.
MAX_WORLD = 1 << 20
# Epoch nanoseconds before year 2100 (4.1e18); base times and timestamps above are corrupt.
MAX_EPOCH_NS = 4_102_444_800 * 10**9
# Clock offsets between hosts of one job: a day is already absurd (NTP keeps them within ms).
MAX_CLOCK_OFFSET_NS = 86_400 * 10**9


def world_size(v: Any, where: str, problems: list[str]) -> int | None:
    """A world size in 1..MAX_WORLD, else None (and a problem line)."""
    if v is None:
        return None
    if type(v) is int and 1 <= v <= MAX_WORLD:
        return v
    problems.append(_bad(f"{where}: world size {_short(v)} ignored (expected an integer 1..{MAX_WORLD})", where))
    return None


def rank(v: Any, where: str, problems: list[str]) -> int | None:
    if v is None:
        return None
    if type(v) is int and 0 <= v < MAX_WORLD:
        return v
    problems.append(_bad(f"{where}: rank {_short(v)} ignored (expected an integer 0..{MAX_WORLD - 1})", where))
    return None


def base_time(v: Any, where: str, problems: list[str]) -> int:
    if v is None or v == 0:
        return 0
    if type(v) is int and 0 < v < MAX_EPOCH_NS:
        return v
    problems.append(_bad(f"{where}: baseTimeNanoseconds {_short(v)} ignored (not a plausible epoch time); "
                         "timestamps kept as written", where))
    return 0


def clock_offset(v: Any, where: str, problems: list[str]) -> int | None:
    if v is None:
        return None
    if type(v) is int and abs(v) <= MAX_CLOCK_OFFSET_NS:
        return v
    problems.append(_bad(f"{where}: clock offset {_short(v)} ns ignored (expected an integer within a day)", where))
    return None


def _bad(text: str, where: str, count: int = 1) -> Problem:
    """A dropped field; the file is what ``where`` starts with ("path: field" or a path)."""
    return Problem(text, Kind.BAD_FIELD, where.split(": ", 1)[0], count=count)


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def read_object(path: Path, problems: list[str]) -> dict[str, Any]:
    """A small JSON object file (run.json, meta.json, MANIFEST.json); {} with one problem line when it is
    unreadable, not JSON, too deeply nested or not an object. Never raises."""
    where = str(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        kind, why = os_problem(where, exc)
        problems.append(Problem(f"{path}: {why}; ignored", kind, where))
        return {}
    return parse_object(text, where, problems)


def parse_object(text: bytes, path: str, problems: list[str]) -> dict[str, Any]:
    """The bytes of a small JSON object file (``path``: where they came from, a local path or a URL);
    {} with one problem line when they are not one. Never raises."""
    where = str(path)
    if len(text) > 64 << 20:
        problems.append(Problem(f"{path}: {len(text) / 1e6:.0f} MB is too large for this small file; ignored",
                                Kind.TOO_LARGE, where))
        return {}
    if text.startswith(b"\xef\xbb\xbf"):
        problems.append(Problem(f"{path}: a UTF-8 byte order mark before the JSON was skipped", Kind.BYTE_ORDER_MARK,
                                where))
        text = text[3:]
    try:
        got = json.loads(text.decode("utf-8", errors="replace"))
    except RecursionError:
        problems.append(Problem(f"{path}: JSON nested too deeply; ignored", Kind.TOO_DEEP, where))
        return {}
    except ValueError as exc:
        problems.append(Problem(f"{path}: not valid JSON ({exc}); ignored", Kind.NOT_JSON, where))
        return {}
    if not isinstance(got, dict):
        problems.append(Problem(f"{path}: expected a JSON object, found {type(got).__name__}; ignored",
                                Kind.NOT_AN_OBJECT, where))
        return {}
    return got


def typed(d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: Path | str, problems: list[str]) -> Any:
    """``d[key]`` when of type ``kind``, else None with a problem line (absent keys are silent)."""
    v = d.get(key)
    if v is None or (isinstance(v, kind) and not (kind is int and isinstance(v, bool))):
        return v
    problems.append(_bad(f"{where}: field {key!r} has the wrong type ({type(v).__name__}); ignored", str(where)))
    return None


# --- declared shapes of meta.json and run.json, checked by ``clean`` ---

ANY = object()  # any JSON value
I64 = (1 << 63) - 1
DAY_NS = MAX_CLOCK_OFFSET_NS


@dataclass(frozen=True)
class Int:
    """An integer (never a bool) in [lo, hi]; a finite float too when ``floats``."""

    lo: float
    hi: float
    floats: bool = False

    def ok(self, v: Any) -> bool:
        if type(v) is int or (self.floats and type(v) is float and math.isfinite(v)):
            return bool(self.lo <= v <= self.hi)
        return False


@dataclass(frozen=True)
class Ranges:
    """Members written as ranges, "0-3,7" (``info.compact_groups``)."""

    def ok(self, v: Any) -> bool:
        from rankscope.intlist import parse_int_list

        try:
            return isinstance(v, str) and all(0 <= r < MAX_WORLD for r in parse_int_list(v))
        except ValueError:
            return False


@dataclass(frozen=True)
class Opt:
    """``spec`` or null."""

    spec: Any


@dataclass(frozen=True)
class ListOf:
    """A list whose bad items are dropped; ``whole``: one bad item drops the list (parallel arrays)."""

    item: Any
    whole: bool = False


@dataclass(frozen=True)
class DictOf:
    """An object whose values all follow ``value`` (bad ones dropped)."""

    value: Any


@dataclass(frozen=True)
class Obj:
    """An object with these fields; other keys are kept as they are (newer writers), null is absent."""

    fields: dict[str, Any]


@dataclass(frozen=True)
class OneOf:
    specs: tuple[Any, ...]


STEP = Int(0, I64)
NS = Int(0, I64)
WALL_NS = Int(0, MAX_EPOCH_NS)
GROUPS = ListOf(Obj({"name": str, "desc": str, "ranks": OneOf((ListOf(Int(0, MAX_WORLD - 1)), Ranges()))}))
WINDOW = Obj({
    "index": Int(0, I64), "steps": ListOf(STEP), "file": str, "collectives_file": str, "closed_by": str,
    "start_wall_ns": WALL_NS, "end_wall_ns": WALL_NS,
    "sched": Obj({"source": str, "step": ListOf(STEP, whole=True), "cpu_ns": ListOf(Opt(NS), whole=True),
                  "runq_wait_ns": ListOf(Opt(NS), whole=True), "intra_op_threads": Int(1, 1 << 20)}),
})
# ``rank`` is left to discovery (it picks the rank and says so); docs/contract.md lists the rest.
META = Obj({
    "format": str, "run_id": str, "local_rank": Int(0, MAX_WORLD - 1), "world_size": Int(1, MAX_WORLD),
    "host": str, "pid": Int(0, 1 << 32), "device": str, "backend": str, "process_groups": GROUPS,
    "layout": DictOf(Int(0, MAX_WORLD)), "versions": DictOf(str),
    "clock": Obj({"anchors": ListOf(Obj({"when": str, "wall_ns": WALL_NS, "mono_ns": NS})),
                  "offset_to_rank0_ns": Int(-DAY_NS, DAY_NS), "offset_error_ns": Int(0, DAY_NS)}),
    "windows": ListOf(WINDOW), "metadata": Obj({"device_memory_bytes": Int(1, 1 << 60)}),
    "idle": Obj({"since_step": STEP, "idle_s": Int(0, 1e12, floats=True), "window_steps_so_far": STEP,
                 "wall_ns": WALL_NS, "closed_windows": ListOf(Int(0, I64))}),
    "triggers": list, "rpc_files": ListOf(str),
})
# run_id, world_size and ranks_expected are checked by discovery (with their own lines).
RUN = Obj({"format": str, "created_ns": WALL_NS, "hosts": ListOf(str), "process_groups": GROUPS,
           "layout": Opt(DictOf(Int(0, MAX_WORLD))), "versions": DictOf(str)})


def clean(doc: dict[str, Any], spec: Obj, where: str, problems: list[str]) -> dict[str, Any]:
    """``doc`` with every value that does not follow ``spec`` dropped, and one line (with the count
    and the first few places) when anything was. Never raises; ``doc`` is not changed."""
    bad: list[str] = []
    ok, got = _clean(doc, spec, "", bad)
    if not bad:
        return doc
    shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
    problems.append(_bad(f"{where}: {len(bad)} values of the wrong type or out of range dropped ({shown})",
                         where, count=len(bad)))
    return got if ok else {}


def read_meta(path: Path, problems: list[str]) -> dict[str, Any]:
    """A rank's meta.json, read (``read_object``) and checked (``clean`` against ``META``)."""
    return clean(read_object(path, problems), META, str(path), problems)


def _clean(v: Any, spec: Any, at: str, bad: list[str]) -> tuple[bool, Any]:
    """(whether ``v`` follows ``spec``, ``v`` with its bad parts dropped); ``bad`` gets where and what."""
    if spec is ANY:
        return True, v
    if isinstance(spec, Opt):
        return (True, v) if v is None else _clean(v, spec.spec, at, bad)
    if isinstance(spec, OneOf):
        for s in spec.specs:
            trial: list[str] = []
            ok, got = _clean(v, s, at, trial)
            if ok and not trial:
                return True, got
        return _wrong(v, at, bad)
    if isinstance(spec, (Int, Ranges)):
        return (True, v) if spec.ok(v) else _wrong(v, at, bad)
    if isinstance(spec, type):
        return (True, v) if isinstance(v, spec) and not isinstance(v, bool) else _wrong(v, at, bad)
    if isinstance(spec, ListOf):
        return _list(v, spec, at, bad)
    if not isinstance(v, dict):
        return _wrong(v, at, bad)
    out = dict(v)
    items = v.items() if isinstance(spec, DictOf) else ((k, v[k]) for k in spec.fields if k in v)
    for k, x in items:
        sub = spec.value if isinstance(spec, DictOf) else spec.fields[k]
        if x is None:
            continue
        ok, got = _clean(x, sub, f"{at}.{k}" if at else str(k), bad)
        if ok:
            out[k] = got
        else:
            del out[k]
    return True, out


def _list(v: Any, spec: ListOf, at: str, bad: list[str]) -> tuple[bool, Any]:
    if not isinstance(v, list):
        return _wrong(v, at, bad)
    out: list[Any] = []
    mine: list[str] = []
    for i, x in enumerate(v):
        ok, got = _clean(x, spec.item, f"{at}[{i}]", mine)
        if ok:
            out.append(got)
        elif spec.whole:  # its items line up with another list's: one bad item drops it all
            bad.append(f"{mine[0]} (the whole list dropped)")
            return False, None
    bad += mine
    return True, out


def _wrong(v: Any, at: str, bad: list[str]) -> tuple[bool, Any]:
    bad.append(f"{at}: {_short(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__}")
    return False, None
