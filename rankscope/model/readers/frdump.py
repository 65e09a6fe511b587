"""PyTorch Flight Recorder dumps: the pickle files ``TORCH_FR_DUMP_TEMP_FILE`` / ``_dump_fr_trace``
write (one per rank, the rank as the file name's last number), their JSON form
(``_dump_fr_trace_json``), and rankscope's recorder dumps (the same format plus a ``rankscope`` key).

Only plain data is unpickled: a restricted unpickler refuses every class (a dump is dicts, lists,
tuples, strings and numbers), so a hostile file in a run directory cannot run code the way a plain
``pickle.load`` (what torch's own loader uses) lets it. Entries become ``FrEntry`` rows; the dump's
``pg_config`` (group name -> description and member ranks), ``version``, ``pg_status`` and what
rankscope adds (every thread's Python stack, the step in progress, the dump's reason and wall time)
become fields of ``FrDump``. Fields a writer left out stay empty, never guessed.
"""
from __future__ import annotations

import ast
import bisect
import contextlib
import functools
import gc
import itertools
import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rankscope.errors import TraceError
from rankscope.model.info import Kind, Problem
from rankscope.store import plainpickle

_RANK = re.compile(r"(\d+)(?:\.json)?$")
_PEER = re.compile(r"(?:send|recv) (\d+) ?(?:->|<-) ?(\d+)")
# A ring of 20,000 entries pickles to a few MB; anything far larger is not a dump (memory bounded).
MAX_DUMP = 512 << 20
zlib_error = __import__("zlib").error
Shape = tuple[tuple[int, ...], ...]


@dataclass(eq=False, slots=True)
class FrEntry:
    """One collective or p2p op as a rank's recorder saw it (compared by identity: two entries are two ops)."""

    rank: int
    pg: str  # process group name (torch's pg name, "0" for the default group)
    pg_desc: str
    seq: int  # collective_seq_id (p2p: p2p_seq_id) within the group
    op: str  # all_reduce, all_gather, broadcast, send, recv, ... (normalized)
    state: str  # scheduled / started / completed
    p2p: bool
    timed: bool = True  # False: the timed engine counted it without timing it (sampling); its state says nothing
    peer: int | None = None  # point-to-point: the other side's rank in the group ("nccl:send 0->1", "gloo:recv 1<-0")
    name: str = ""  # the recorder's own op name after the backend: "_broadcast_oop", "coalesced", "allreduce_coalesced"
    in_sizes: Shape = ()
    out_sizes: Shape = ()
    in_dtypes: tuple[str, ...] = ()
    out_dtypes: tuple[str, ...] = ()
    record_id: int = -1  # the entry's number in the rank's ring (every op of every group)
    created_ns: int = 0  # wall clock
    timeout_ms: int = 0
    raw_frames: Any = None  # the dump's frames, as written; read them with ``frames``
    step: int | None = None  # the training step it was issued in, where the recorder knows
    kind: int = -1  # one number per distinct (name, sizes, dtypes): equal entries agree across ranks

    @property
    def frames(self) -> tuple[str, ...]:
        """The Python stack that issued it, innermost first: "file:line func" (formatted when asked: most
        entries' stacks are never shown)."""
        return _frames(self.raw_frames) if self.raw_frames else ()

    @property
    def sizes(self) -> str:
        """Input sizes as the dump writes them: ``[[1000]]``."""
        return str([list(t) for t in self.in_sizes])

    @property
    def dtypes(self) -> str:
        return str(list(self.in_dtypes))


@dataclass
class FrDump:
    rank: int
    path: str
    entries: list[FrEntry]
    status: dict[str, dict[str, int]]  # pg -> last_enqueued / last_started / last_completed
    groups: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # pg_config: name -> (desc, ranks)
    version: str = ""
    stacks: dict[str, list[str]] = field(default_factory=dict)  # rankscope_stacks: thread name -> frames
    dump_ns: int | None = None  # when the dump was written (rankscope's recorder), wall clock
    reason: str = ""  # rankscope's recorder: watchdog, exit, SIGUSR1, trigger, ...
    step: int | None = None  # the training step in progress when the dump was written
    ring_full: bool = False  # the ring dropped its oldest entries (or the dump is an interval): absence says nothing
    problems: list[str] = field(default_factory=list)  # entries left out, fields read as unknown (``Problem``s)


def _load(path: str | Path, rank: int | None = None) -> dict[str, Any]:
    from rankscope.model.info import os_problem
    from rankscope.store import source

    try:
        with source.open_binary(str(path)) as fh:
            raw = fh.read(MAX_DUMP + 1)
    except OSError as exc:
        kind, why = os_problem(str(path), exc)
        raise TraceError(str(path), why, kind, rank) from exc
    if not raw:
        raise TraceError(str(path), "empty file (a dump that was never written, or cut off)", Kind.EMPTY, rank)
    try:
        if raw[:2] == b"\x1f\x8b":  # rankscope.profile's dumps in a run: ranks/<r>/comms.*.rank<r>.json.gz
            import zlib

            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            raw = d.decompress(raw, MAX_DUMP + 1)
            if len(raw) <= MAX_DUMP and not d.eof:
                raise TraceError(str(path), "cut off (its gzip stream does not end)", Kind.GZIP_DAMAGED, rank)
            if len(raw) > MAX_DUMP:
                raise TraceError(str(path), f"larger than {MAX_DUMP >> 20} MiB inflated: not read", Kind.TOO_LARGE, rank)
        if len(raw) > MAX_DUMP:
            raise TraceError(str(path), f"larger than {MAX_DUMP >> 20} MiB: not read", Kind.TOO_LARGE, rank)
        with no_gc():
            doc = json.loads(raw) if raw[:1] in (b"{", b"[") else plainpickle.load(io.BytesIO(raw))
    except zlib_error as exc:
        raise TraceError(str(path), f"not a whole gzip file ({str(exc)[:100]})", Kind.GZIP_DAMAGED, rank) from exc
    except RecursionError as exc:
        raise TraceError(str(path), "nested too deeply to be a Flight Recorder dump", Kind.TOO_DEEP, rank) from exc
    except (ValueError, pickle.UnpicklingError, EOFError) as exc:
        kind = Kind.NOT_JSON if raw[:1] in (b"{", b"[") else Kind.NOT_A_TRACE  # JSON form, else a pickle
        raise TraceError(str(path), f"not a Flight Recorder dump ({str(exc)[:100]})", kind, rank) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise TraceError(str(path), "not a Flight Recorder dump (no 'entries' list)", Kind.NOT_A_TRACE, rank)
    return doc


def read(path: str | Path) -> FrDump:
    """One rank's dump (pickle or JSON; a path or an fsspec URL); ``TraceError`` with one line when
    it is not one."""
    from rankscope.store import source

    p = Path(str(path).rsplit("/", 1)[-1]) if source.is_url(str(path)) else Path(path)
    m = _RANK.search(p.name.removesuffix(".gz"))
    if not m:
        raise TraceError(str(path), "no rank number at the end of the file name (torch names dumps PREFIX<rank>)",
                         Kind.RANK_UNKNOWN)
    rank = int(m.group(1))
    return from_doc(_load(path, rank), rank, str(path))


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off while many small objects are made (entries, calls): they hold no
    cycles, and each collection would walk every entry made so far (5x the time on 128k entries). torch's
    own loader does the same (``read_dir``: ``gc.disable()``)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def from_doc(doc: dict[str, Any], rank: int, path: str = "") -> FrDump:
    """A loaded dump (the dict torch writes) as an ``FrDump`` of ``rank``."""
    marks = _step_marks(doc.get("rankscope_steps"))
    with no_gc():
        out = [e for e in (_entry(x, rank, marks) for x in doc["entries"] if isinstance(x, dict)) if e is not None]
    problems: list[str] = []
    if len(out) < len(doc["entries"]):
        n = len(doc["entries"]) - len(out)
        problems.append(Problem(f"{path}: {n} entries that are not collective records (not an object, no sequence "
                                "number, or a process group that is not [name, description]) were left out",
                                Kind.MALFORMED_EVENTS, path, rank, n))
    status = doc.get("pg_status")
    got = doc.get("rankscope")
    extra: dict[str, Any] = got if isinstance(got, dict) else {}
    ids = [e.record_id for e in out if e.record_id >= 0]
    return FrDump(rank, path, out, {str(k): v for k, v in status.items() if isinstance(v, dict)}
                  if isinstance(status, dict) else {}, _groups(doc.get("pg_config")), str(doc.get("version", "")),
                  _stacks(doc.get("rankscope_stacks")), _int(extra.get("wall_ns")), str(extra.get("reason", "")),
                  _int(extra.get("step")), bool(ids) and min(ids) > 0, problems)


def _entry(e: dict[str, Any], rank: int, marks: list[tuple[int, int]]) -> FrEntry | None:
    pg = e.get("process_group") or ("", "")
    if not isinstance(pg, (list, tuple)) or not pg or not all(isinstance(x, (str, int)) for x in pg):
        return None  # torch writes [name, description]: a call of no known group cannot be matched
    p2p = bool(e.get("is_p2p"))
    seq = _int(e.get("p2p_seq_id" if p2p else "collective_seq_id"))
    if seq is None:
        return None
    name, op, peer = _names(str(e.get("profiling_name", "")), p2p)
    created = _int(e.get("time_created_ns")) or 0
    rid = _int(e.get("record_id"))
    step = _int(e.get("step"))
    if step is None and marks:
        i = bisect.bisect_right([t for _, t in marks], created) - 1
        step = marks[i][0] if i >= 0 else None
    frames = e.get("frames")
    ins, outs = _shape(e.get("input_sizes")), _shape(e.get("output_sizes"))
    dins, douts = _dtypes(e.get("input_dtypes")), _dtypes(e.get("output_dtypes"))
    fp = (name, ins, outs, dins, douts)
    kind = _KIND.get(fp)
    if kind is None:
        if len(_KIND) > 1 << 20:  # a long-lived process (the web UI): forget, never reuse a number
            _KIND.clear()
        kind = _KIND[fp] = next(_NEXT)
    return FrEntry(rank, str(pg[0]), str(pg[1]) if len(pg) > 1 else "", seq, op, str(e.get("state", "")), p2p,
                   e.get("timed") is not False, peer, name, ins, outs, dins, douts, rid if rid is not None else -1,
                   created, _int(e.get("timeout_ms")) or 0, frames or None, step, kind)


_KIND: dict[tuple[object, ...], int] = {}  # (name, sizes, dtypes) -> its number, for every dump read
_NEXT = itertools.count()


@functools.lru_cache(maxsize=8192)
def _names(full: str, p2p: bool) -> tuple[str, str, int | None]:
    """(the recorder's op name, the normalized op, the peer in the group) of a profiling name: one parse per
    distinct name, not per entry."""
    pm = _PEER.search(full) if p2p else None
    name = full.split(":", 1)[-1].split(" ")[0]
    if pm:
        return name, name, int(pm.group(2))  # "send a->b": b; "recv b<-a": a
    from rankscope.model.schema import normalize_op  # gloo:all_reduce, nccl:all_reduce -> all_reduce

    got = normalize_op(full)
    return name, got if got != "other" else name, None


def _int(x: Any) -> int | None:
    """An int, or a string of one (torch's own tests write sequence numbers as strings)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, str) and x.strip().lstrip("-").isdigit():
        return int(x)
    return None


def _shape(x: Any) -> Shape:
    if not isinstance(x, (list, tuple)):
        return ()
    try:
        return tuple(tuple(t) for t in x)  # lists of ints as torch writes them
    except TypeError:
        return tuple(tuple(t) if isinstance(t, (list, tuple)) else () for t in x)


def _dtypes(x: Any) -> tuple[str, ...]:
    """A list of dtype names; a bare string is one name ("float32"), an empty string none."""
    if isinstance(x, str):
        return (x,) if x else ()
    return tuple(str(d) for d in x) if isinstance(x, (list, tuple)) else ()


def _frames(x: Any) -> tuple[str, ...]:
    """Flight Recorder's frames (outermost last: {name, filename, line}) as "file:line func", innermost first."""
    if not isinstance(x, list):
        return ()
    return tuple(f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}" for f in x if isinstance(f, dict))


def _groups(cfg: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """pg_config: {name: {name, desc, ranks: "[0, 1]"}}; groups with no name or no ranks (gloo's recorder
    leaves one such entry) are left out."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    if not isinstance(cfg, dict):
        return out
    for k, v in cfg.items():
        if not isinstance(v, dict) or not str(k):
            continue  # gloo's recorder writes one nameless entry
        ranks = v.get("ranks")
        try:
            got = ast.literal_eval(ranks) if isinstance(ranks, str) else ranks
        except (ValueError, SyntaxError):
            continue
        if isinstance(got, (list, tuple)) and got and all(isinstance(r, int) for r in got):
            out[str(k)] = (str(v.get("desc", "")), tuple(sorted(got)))
    return out


def _stacks(x: Any) -> dict[str, list[str]]:
    if not isinstance(x, dict):
        return {}
    return {str(k): [str(f) for f in v] for k, v in x.items() if isinstance(v, list)}


def _step_marks(x: Any) -> list[tuple[int, int]]:
    """rankscope_steps: [[step, wall_ns when it began], ...] -> sorted by time."""
    if not isinstance(x, list):
        return []
    got = [(_int(m[0]), _int(m[1])) for m in x if isinstance(m, (list, tuple)) and len(m) == 2]
    return sorted(((s, t) for s, t in got if s is not None and t is not None), key=lambda m: m[1])


def find(root: str | Path) -> list[Path] | list[str]:
    """The dump files under ``root`` (a directory, a file or an fsspec URL prefix): names ending in a
    rank number (``rank_3``, ``nccl_trace_rank_3``, ``comms.rank3.json``), not other run files."""
    from rankscope.store import source

    if source.is_url(str(root)):
        fs, base = source.filesystem(str(root))
        proto = str(root).split("://", 1)[0]
        names = sorted(fs.find(base))
        return [f"{proto}://{n}" for n in names if is_dump_name(n.rsplit("/", 1)[-1])]
    r = Path(root)
    # the name first: is_file() raises on a file in a directory that can be listed but not entered
    files = [r] if r.is_file() else sorted(p for p in r.rglob("*") if is_dump_name(p.name) and p.is_file())
    return files


def is_dump_name(name: str) -> bool:
    """A dump's file name: ending in a rank number (torch's PREFIX<rank>, optionally .json), or rankscope's
    ``comms.<n>-<reason>.rank<r>.json.gz`` in a run directory; not a trace, cache or report."""
    if name in _NOT_DUMPS:
        return False
    if name.startswith("comms.") and name.endswith(".json.gz"):
        return bool(_RANK.search(name.removesuffix(".gz")))
    return bool(_RANK.search(name)) and not name.endswith((".parquet", ".gz", ".html"))


_NOT_DUMPS = ("meta.json", "run.json", "MANIFEST.json")
