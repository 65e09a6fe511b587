"""PyTorch Flight Recorder dumps: the pickle files ``TORCH_FR_DUMP_TEMP_FILE`` / ``_dump_fr_trace``
write (one per rank, the rank as the file name's last number), and their JSON form
(``_dump_fr_trace_json``).

Only plain data is unpickled: a restricted unpickler refuses every class (a dump is dicts, lists,
tuples, strings and numbers), so a hostile file in a run directory cannot run code the way a plain
``pickle.load`` (what torch's own loader uses) lets it. Entries become ``FrEntry`` rows.
"""
from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankscope.errors import TraceError
from rankscope.store import plainpickle

_RANK = re.compile(r"(\d+)(?:\.json)?$")
_PEER = re.compile(r"(?:send|recv) (\d+) ?(?:->|<-) ?(\d+)")
# A ring of 20,000 entries pickles to a few MB; anything far larger is not a dump (memory bounded).
MAX_DUMP = 512 << 20
zlib_error = __import__("zlib").error


@dataclass(frozen=True)
class FrEntry:
    """One collective or p2p op as a rank's recorder saw it."""

    rank: int
    pg: str  # process group name (torch's pg name, "0" for the default group)
    pg_desc: str
    seq: int  # collective_seq_id (p2p: p2p_seq_id) within the group
    op: str  # all_reduce, all_gather, broadcast, send, recv, ...
    sizes: str  # input sizes, e.g. "[[1000]]"
    dtypes: str
    state: str  # scheduled / started / completed
    p2p: bool
    timed: bool = True  # False: the timed engine counted it without timing it (sampling); its state says nothing
    peer: int | None = None  # point-to-point: the other side's global rank ("nccl:send 0->1", "gloo:recv 1<-0")


@dataclass
class FrDump:
    rank: int
    path: str
    entries: list[FrEntry]
    status: dict[str, dict[str, int]]  # pg -> last_enqueued / last_started / last_completed


def _op(name: str) -> str:
    from rankscope.model.comms import normalize_op  # gloo:all_reduce, nccl:all_reduce -> all_reduce

    got = normalize_op(name)
    return got if got != "other" else name.split(":", 1)[-1]


def read(path: str | Path) -> FrDump:
    """One rank's dump (pickle or JSON; a path or an fsspec URL); ``TraceError`` with one line when
    it is not one."""
    from rankscope.store import source

    p = Path(str(path).rsplit("/", 1)[-1]) if source.is_url(str(path)) else Path(path)
    m = _RANK.search(p.name.removesuffix(".gz"))
    if not m:
        raise TraceError(str(path), "no rank number at the end of the file name (torch names dumps PREFIX<rank>)")
    with source.open_binary(str(path)) as fh:
        raw = fh.read(MAX_DUMP + 1)
    if not raw:
        raise TraceError(str(path), "empty file (a dump that was never written, or cut off)")
    try:
        if raw[:2] == b"\x1f\x8b":  # rankscope.profile's dumps in a run: ranks/<r>/comms.*.rank<r>.json.gz
            import zlib

            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            raw = d.decompress(raw, MAX_DUMP + 1)
            if len(raw) > MAX_DUMP:
                raise TraceError(str(path), f"larger than {MAX_DUMP >> 20} MiB inflated: not read")
        if len(raw) > MAX_DUMP:
            raise TraceError(str(path), f"larger than {MAX_DUMP >> 20} MiB: not read")
        doc = json.loads(raw) if raw[:1] in (b"{", b"[") else plainpickle.load(io.BytesIO(raw))
    except (ValueError, pickle.UnpicklingError, EOFError, RecursionError, zlib_error) as exc:
        raise TraceError(str(path), f"not a Flight Recorder dump ({str(exc)[:100]})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise TraceError(str(path), "not a Flight Recorder dump (no 'entries' list)")
    rank = int(m.group(1))
    out = []
    for e in doc["entries"]:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group") or ("", "")
        p2p = bool(e.get("is_p2p"))
        seq = e.get("p2p_seq_id" if p2p else "collective_seq_id")
        if not isinstance(seq, int):
            continue
        name = str(e.get("profiling_name", ""))
        pm = _PEER.search(name) if p2p else None
        op = name.split(":", 1)[-1].split(" ")[0] if pm else _op(name)  # "gloo:send 0->1" -> "send"
        out.append(FrEntry(rank, str(pg[0]), str(pg[1]) if len(pg) > 1 else "", seq, op,
                           str(e.get("input_sizes")), str(e.get("input_dtypes")), str(e.get("state", "")), p2p,
                           e.get("timed") is not False, int(pm.group(2)) if pm else None))
    status = doc.get("pg_status")
    groups = {str(k): v for k, v in status.items() if isinstance(v, dict)} if isinstance(status, dict) else {}
    return FrDump(rank, str(path), out, groups)


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
    files = [r] if r.is_file() else sorted(p for p in r.rglob("*") if p.is_file() and is_dump_name(p.name))
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
