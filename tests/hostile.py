"""A corpus of broken and hostile inputs, each built in a fresh 3-rank run directory, and the runner
that analyzes all of them in one process (``python -m tests.hostile``).

The healthy run is built from a tiny real-shaped Kineto trace (the event layout of torch 2.x's
profiler on gloo, as in tests/helpers.py: ProfilerStep spans, nested aten ops, gloo:all_reduce with
Input Dims, a record_param_comms inside it carrying the collective metadata fields torch writes
(the field set of ../shared/data/hta/nccl_parser_config, as ProcessGroupGloo records them too),
[memory] instants, distributedInfo with pg_config, baseTimeNanoseconds) plus run.json, meta.json and
MANIFEST.json as rankscope's collector writes them (store/spool.py, docs/contract.md). Rank 2 is slow
(its aten::mm takes 1.6x): the straggler verdict names it, cause compute. Every case damages rank 1
(or a run-level file) in one way and says:

- ``expect``: every problem record (model/info.py ``Problem``: kind, file relative to the run, rank,
  count of what was repaired or dropped) the analysis must report, and no other;
- ``rank1``: what must become of rank 1: "dropped" (not analyzed, named missing with the reason),
  "damaged" (analyzed, named damaged, never in a verdict), "kept" (field repaired or dropped, the
  rank analyzed normally) or "any" (run-level damage; ranks 0 and 2 are what must survive);
- ``non_root``: the damage is a permission that root ignores: the analysis must run as another user.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rankscope.model.info import Kind
from tests.helpers import x

RANKS = 3
STEPS = 4
NOBODY = 65534  # the user that runs the analysis when the tests run as root (permission cases)
_REPO = Path(__file__).resolve().parents[1]
PER_STEP = 6  # events per step in rank_doc: step, mm, relu, all_reduce, record_param_comms, memory


def _param_comms(t: float, dur: float, i: int, world: int) -> dict[str, Any]:
    """record_param_comms with the args torch writes (the fields of nccl_parser_config/nccl_data.json.gz)."""
    return x("record_param_comms", t, dur, **{
        "External id": 2099 + i, "Record function id": 1959 + i, "Process Group Name": "0",
        "Process Group Description": "default_pg", "Process Group Ranks": str(list(range(world))),
        "Group size": world, "Global rank start": 0, "Global rank stride": 1, "In msg nelems": 1000,
        "Out msg nelems": 1000, "In split size": "[]", "Out split size": "[]", "dtype": "Float",
        "Collective name": "allreduce", "Ev Idx": 50 + i})


def rank_doc(rank: int, *, world: int = RANKS, slow: float = 1.0) -> dict[str, Any]:
    """One rank's trace document: STEPS steps of forward / mm / all_reduce."""
    evs: list[dict[str, Any]] = []
    for i in range(STEPS):
        t = 1000.0 + i * 2000
        mm = 600 * slow
        ar = 600 + (600 - mm if slow < 1 else 0)
        evs += [x(f"ProfilerStep#{i + 1}", t, mm + 900, cat="user_annotation"),
                x("aten::mm", t + 20, mm),
                x("aten::relu", t + mm + 40, 50),
                x("gloo:all_reduce", t + mm + 200, ar, cat="user_annotation",
                  **{"Input Dims": [[1000]], "Input type": ["float"]}),
                _param_comms(t + mm + 210, ar - 20, i, world),
                {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                 "ts": t + 30, "args": {"Total Allocated": 1024, "Total Reserved": 0, "Bytes": 1024,
                                        "Device Id": -1, "Device Type": 0}}]
    return {"schemaVersion": 1, "deviceProperties": [], "baseTimeNanoseconds": 1_700_000_000_000_000_000,
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(world))}]},
            "traceEvents": evs}


def trace_path(root: Path, rank: int) -> Path:
    return root / "ranks" / str(rank) / f"rank{rank}.pt.trace.json.gz"


def write_manifest(d: Path, rank: int) -> None:
    files = [{"path": p.name, "size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
             for p in sorted(d.iterdir()) if p.is_file() and p.name != "MANIFEST.json"]
    (d / "MANIFEST.json").write_text(json.dumps({"format": "rankscope.manifest/1", "rank": rank, "run_id": "R",
                                                 "files": files, "dropped": []}))


def meta_doc(r: int) -> dict[str, Any]:
    """ranks/<r>/meta.json as rankscope.collect.meta.meta_doc writes it (one window of STEPS steps)."""
    return {"format": "rankscope.meta/1", "run_id": "R", "rank": r, "local_rank": 0, "world_size": RANKS,
            "host": f"node-{r}", "pid": 4000 + r, "device": "cpu", "backend": "gloo",
            "process_groups": [{"name": "0", "desc": "default_pg", "ranks": list(range(RANKS))}],
            "layout": None, "versions": {"rankscope": "0", "torch": "2.13.0"},
            "clock": {"anchors": [{"when": "start", "wall_ns": 1_700_000_000_000_000_000, "mono_ns": 5}],
                      "offset_to_rank0_ns": 0, "offset_error_ns": 1000},
            "windows": [{"index": 0, "steps": list(range(1, STEPS + 1)), "file": trace_path(Path("."), r).name,
                         "start_wall_ns": 1_700_000_000_000_000_000, "end_wall_ns": 1_700_000_000_100_000_000}],
            "metadata": {}}


def healthy_run(root: Path) -> Path:
    """RUN/run.json + ranks/<r>/{rank<r>.pt.trace.json.gz, meta.json, MANIFEST.json}; rank 2 is slow."""
    for r in range(RANKS):
        d = root / "ranks" / str(r)
        d.mkdir(parents=True)
        trace_path(root, r).write_bytes(gzip.compress(json.dumps(rank_doc(r, slow=1.6 if r == 2 else 1.0)).encode()))
        (d / "meta.json").write_text(json.dumps(meta_doc(r)))
        write_manifest(d, r)
    (root / "run.json").write_text(json.dumps({"format": "rankscope.run/1", "run_id": "R", "world_size": RANKS,
                                               "ranks_expected": list(range(RANKS))}))
    return root


@dataclass(frozen=True)
class Rec:
    """One expected problem record: its kind, file (relative to the run), rank and count."""

    kind: Kind
    file: str
    rank: int | None = 1
    count: int = 1


T, TX = "ranks/1/rank1.pt.trace.json.gz", "ranks/1/rank1.pt.trace.json"  # rank 1's trace, gzipped or plain
META, MAN, RUN = "ranks/1/meta.json", "ranks/1/MANIFEST.json", "run.json"


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], None]
    expect: tuple[Rec, ...]
    rank1: str  # dropped | damaged | kept | any
    remanifest: bool = True  # rewrite rank 1's MANIFEST after the damage (else the sha check fires too)
    non_root: bool = False  # a permission: root would read it anyway


def _put(root: Path, data: bytes, name: str = "rank1.pt.trace.json.gz") -> None:
    """Replace rank 1's trace with ``data`` (under ``name``)."""
    trace_path(root, 1).unlink()
    (root / "ranks" / "1" / name).write_bytes(data)


def _doc(root: Path, edit: Callable[[dict[str, Any]], Any], gz: bool = True) -> None:
    doc = rank_doc(1)
    edit(doc)
    data = json.dumps(doc).encode()
    _put(root, gzip.compress(data) if gz else data, "rank1.pt.trace.json.gz" if gz else "rank1.pt.trace.json")


def _text(root: Path, fix: Callable[[str], str]) -> None:
    _put(root, fix(json.dumps(rank_doc(1))).encode(), "rank1.pt.trace.json")


def _ev(field: str, value: Any, *events: int) -> Callable[[dict[str, Any]], None]:
    """Set ``field`` of the given events (default: step 1's aten::mm)."""
    def edit(doc: dict[str, Any]) -> None:
        for i in events or (1,):
            doc["traceEvents"][i][field] = value
    return edit


def _args(field: str, value: Any, event: int = 3) -> Callable[[dict[str, Any]], None]:
    """Set an arg of step 1's gloo:all_reduce (3) or record_param_comms (4)."""
    def edit(doc: dict[str, Any]) -> None:
        doc["traceEvents"][event]["args"][field] = value
    return edit


def _comms_args(**fields: Any) -> Callable[[dict[str, Any]], None]:
    """Set args of every step's record_param_comms (the fields by their torch names, "_" for " ")."""
    def edit(doc: dict[str, Any]) -> None:
        for s in range(STEPS):
            doc["traceEvents"][s * PER_STEP + 4]["args"].update({k.replace("_", " "): v for k, v in fields.items()})
    return edit


def _top(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc[field] = value
    return edit


def _dist(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["distributedInfo"][field] = value
    return edit


def _gz_raw(root: Path) -> bytes:
    return gzip.compress(json.dumps(rank_doc(1)).encode())


def _crc(root: Path) -> None:
    g = bytearray(_gz_raw(root))
    g[-8:-4] = struct.pack("<I", (struct.unpack("<I", g[-8:-4])[0] ^ 0xFFFF))
    _put(root, bytes(g))


def _isize(root: Path) -> None:
    g = bytearray(_gz_raw(root))
    g[-4:] = struct.pack("<I", 7)
    _put(root, bytes(g))


def _truncate_gz(root: Path) -> None:
    g = _gz_raw(root)
    _put(root, g[: len(g) * 2 // 3])


def _truncate_json(root: Path) -> None:
    t = json.dumps(rank_doc(1), indent=1).encode()
    _put(root, t[: len(t) * 2 // 3], "rank1.pt.trace.json")


def _json_file(rel: str, edit: Callable[[Any], Any] | bytes) -> Callable[[Path], None]:
    """Rewrite the JSON file ``rel`` with ``edit(doc)`` (or its return value), or with raw bytes."""
    def make(root: Path) -> None:
        p = root / rel
        if isinstance(edit, bytes):
            p.write_bytes(edit)
            return
        m = json.loads(p.read_text())
        got = edit(m)
        p.write_text(json.dumps(m if got is None else got))
    return make


def _meta(edit: Callable[[Any], Any] | bytes) -> Callable[[Path], None]:
    return _json_file(META, edit)


def _runjson(edit: Callable[[Any], Any] | bytes) -> Callable[[Path], None]:
    return _json_file(RUN, edit)


def _manifest(edit: Callable[[Any], Any] | bytes) -> Callable[[Path], None]:
    return _json_file(MAN, edit)


def _set(d: dict[str, Any], k: str, v: Any, drop: str = "") -> None:
    d[k] = v
    d.pop(drop, None)


def _window(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: m["windows"][0].update(fields)


def _flip_byte(root: Path) -> None:
    """Same size, one byte changed after MANIFEST was written (in the gzip MTIME field: the gzip
    stream stays valid, only the sha256 can tell)."""
    p = trace_path(root, 1)
    b = bytearray(p.read_bytes())
    b[4] ^= 0xFF
    p.write_bytes(bytes(b))


def _deep(n: int) -> bytes:
    return b'{"traceEvents": [' + b"[" * n + b"]" * n + b"]}"


def _named(name: str, data: bytes = b"") -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / "ranks" / "1" / name).write_bytes(data)
    return make


def _unpublished(root: Path) -> None:
    for p in (root / "ranks" / "1").iterdir():
        if ".trace." in p.name:
            p.unlink()
    (root / "ranks" / "1" / "MANIFEST.json").unlink()


def _chmod(mode: int, rel: str) -> Callable[[Path], None]:
    return lambda root: os.chmod(root / rel, mode)


def _symlink(rel: str, target: Callable[[Path], Path]) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        p = root / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()
        p.symlink_to(target(root))
    return make


def _listed_absent(*names: str) -> Callable[[Path], None]:
    """MANIFEST.json lists files that are not there (written after the damage: remanifest=False)."""
    def make(root: Path) -> None:
        write_manifest(root / "ranks" / "1", 1)
        _manifest(lambda m: m["files"].extend({"path": n, "size": 10, "sha256": "0" * 64} for n in names))(root)
    return make


def _bomb(root: Path) -> None:
    # 80 MiB of zeros in ~80 KB: past the 64 MiB floor, ~1000:1, stopped before it is in memory.
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    data = b"".join(co.compress(chunk) for _ in range(80)) + co.flush()
    _put(root, data)


def _one(kind: Kind, file: str = T, rank: int | None = 1, count: int = 1) -> tuple[Rec, ...]:
    return (Rec(kind, file, rank, count),)


K = Kind
_EVIL, _NL, _MARKUP = "evil\x1b[2J\x1b[31m.json", "a\nFAKE LINE.json", "[bold red]x[-].json"
GARBAGE_WINDOWS = [1, "x", None, {"index": 0, "steps": "1-4", "file": 7}, {"index": 1, "steps": [1, 2, "3", -4]}]

CASES: list[Case] = [
    # --- whole files that cannot be read: rank 1 dropped, the reason said ---
    Case("empty", lambda r: _put(r, b"", "rank1.pt.trace.json"), _one(K.EMPTY, TX), "dropped"),
    Case("blank", lambda r: _put(r, b"  \n\t ", "rank1.pt.trace.json"), _one(K.EMPTY, TX), "dropped"),
    Case("not_json", lambda r: _put(r, b"hello world\n", "rank1.pt.trace.json"), _one(K.NOT_JSON, TX), "dropped"),
    Case("binary", lambda r: _put(r, b"\x89PNG\r\n\x1a\n\0\0junk", "rank1.pt.trace.json"), _one(K.NOT_JSON, TX),
         "dropped"),
    Case("events_not_list", lambda r: _put(r, b'{"traceEvents": 3}', "rank1.pt.trace.json"), _one(K.NOT_A_TRACE, TX),
         "dropped"),
    Case("top_is_string", lambda r: _put(r, b'"a trace"', "rank1.pt.trace.json"), _one(K.NOT_A_TRACE, TX), "dropped"),
    Case("top_is_number", lambda r: _put(r, b"42", "rank1.pt.trace.json"), _one(K.NOT_A_TRACE, TX), "dropped"),
    Case("gzip_empty", lambda r: _put(r, gzip.compress(b"")), _one(K.EMPTY), "dropped"),
    Case("gzip_header_only", lambda r: _put(r, b"\x1f\x8b\x08\x00"), _one(K.GZIP_DAMAGED), "dropped"),
    Case("gzip_garbage", lambda r: _put(r, b"\x1f\x8b\x08\x00\0\0\0\0\0\xff" + b"garbage" * 10), _one(K.GZIP_DAMAGED),
         "dropped"),
    Case("deep_nesting", lambda r: _put(r, _deep(100_000), "rank1.pt.trace.json"), _one(K.TOO_DEEP, TX), "dropped"),
    Case("gzip_bomb", _bomb, _one(K.GZIP_BOMB), "dropped"),
    Case("metadata_only", lambda r: _doc(r, _top("traceEvents", [])), _one(K.NO_EVENTS), "dropped"),
    Case("events_not_objects", lambda r: _doc(r, _top("traceEvents", [1, "x", None, []])), _one(K.NO_USABLE_EVENTS),
         "dropped"),
    Case("only_begin_end", lambda r: _doc(r, _top("traceEvents", [
        {"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 1}, {"ph": "E", "name": "a", "pid": 1, "tid": 1, "ts": 2}])),
        _one(K.NO_USABLE_EVENTS), "dropped"),
    # --- damaged: read, named damaged, never in a verdict ---
    Case("truncated_gzip", _truncate_gz, (Rec(K.GZIP_DAMAGED, T), Rec(K.TRUNCATED, T)), "damaged"),
    Case("truncated_json", _truncate_json, _one(K.TRUNCATED, TX), "damaged"),
    Case("gzip_crc_wrong", _crc, _one(K.GZIP_CHECK), "damaged"),
    Case("gzip_isize_wrong", _isize, _one(K.GZIP_CHECK), "damaged"),
    Case("manifest_sha_mismatch", _flip_byte, _one(K.MANIFEST_MISMATCH), "damaged", remanifest=False),
    Case("manifest_size_mismatch", _manifest(lambda m: m["files"][1].update(size=5)), _one(K.MANIFEST_MISMATCH),
         "damaged", remanifest=False),
    Case("manifest_lists_absent_trace", _listed_absent("window-0001.pt.trace.json.gz"), _one(K.MANIFEST_ABSENT, MAN),
         "damaged", remanifest=False),
    Case("manifest_lists_two_absent", _listed_absent("window-0001.pt.trace.json.gz", "comms.rank1.json.gz"),
         _one(K.MANIFEST_ABSENT, MAN, count=2), "damaged", remanifest=False),
    Case("appended_garbage", lambda r: _put(r, json.dumps(rank_doc(1)).encode() + b"\n}}garbage",
                                             "rank1.pt.trace.json"), _one(K.TRUNCATED, TX), "damaged"),
    # --- one bad field or event: repaired or dropped, counted, the rank kept ---
    Case("tid_2_70", lambda r: _doc(r, _ev("tid", 2**70)), _one(K.BAD_PID_TID), "kept"),
    Case("tid_float", lambda r: _doc(r, _ev("tid", 1.5)), _one(K.BAD_PID_TID), "kept"),
    Case("pid_list", lambda r: _doc(r, _ev("pid", [1])), _one(K.BAD_PID_TID), "kept"),
    Case("tid_object", lambda r: _doc(r, _ev("tid", {})), _one(K.BAD_PID_TID), "kept"),
    Case("pid_tid_many", lambda r: _doc(r, _ev("tid", 1.5, 1, 2, 7)), _one(K.BAD_PID_TID, count=3), "kept"),
    # true is no thread 1 (numpy folds it into 1); 1.0 is thread 1, said nowhere: only the true is counted
    Case("tid_true", lambda r: _doc(r, _ev("tid", True)), _one(K.BAD_PID_TID), "kept"),
    Case("tid_true_and_float_one", lambda r: _doc(r, lambda d: (_ev("tid", True)(d), _ev("tid", 1.0, 2, 7, 8)(d))),
         _one(K.BAD_PID_TID), "kept"),
    Case("nelems_negative", lambda r: _doc(r, _args("In msg nelems", -1, 4)), _one(K.BAD_COLLECTIVE_ARGS), "kept"),
    Case("nelems_1e300", lambda r: _doc(r, _args("Out msg nelems", 1e300, 4)), _one(K.BAD_COLLECTIVE_ARGS), "kept"),
    Case("group_size_big", lambda r: _doc(r, _args("Group size", "big", 4)), _one(K.BAD_COLLECTIVE_ARGS), "kept"),
    Case("pg_ranks_garbage", lambda r: _doc(r, _args("Process Group Ranks", "[0,x]", 4)), _one(K.BAD_COLLECTIVE_ARGS),
         "kept"),
    Case("dtype_number", lambda r: _doc(r, _args("dtype", 7, 4)), _one(K.BAD_COLLECTIVE_ARGS), "kept"),
    Case("comms_args_all_bad", lambda r: _doc(r, _comms_args(In_msg_nelems=-1, Out_msg_nelems=1e300, Group_size="big",
                                                               Process_Group_Ranks="[0,x]", dtype=7)),
         _one(K.BAD_COLLECTIVE_ARGS, count=5 * STEPS), "kept"),
    Case("input_dims_object", lambda r: _doc(r, _args("Input Dims", {"a": 1})), _one(K.BAD_COLLECTIVE_ARGS), "kept"),
    Case("input_dims_huge", lambda r: _doc(r, _args("Input Dims", [[2**40, 2**40]])), _one(K.BAD_COLLECTIVE_ARGS),
         "kept"),
    Case("seq_string", lambda r: _doc(r, _args("Seq", "x")), _one(K.BAD_COLLECTIVE_ARGS), "kept"),
    Case("device_props_string", lambda r: _doc(r, _top("deviceProperties", "H100")), _one(K.BAD_FIELD), "kept"),
    Case("device_props_junk_list", lambda r: _doc(r, _top("deviceProperties", [1, "a"])), _one(K.BAD_FIELD), "kept"),
    Case("rank_string", lambda r: _doc(r, _dist("rank", "1")), _one(K.BAD_FIELD), "kept"),
    Case("rank_huge", lambda r: _doc(r, _dist("rank", 2**40)), _one(K.BAD_FIELD), "kept"),
    Case("rank_negative", lambda r: _doc(r, _dist("rank", -3)), _one(K.BAD_FIELD), "kept"),
    Case("dist_info_string", lambda r: _doc(r, _top("distributedInfo", "gloo")), _one(K.BAD_FIELD), "kept"),
    Case("world_size_zero", lambda r: _doc(r, _dist("world_size", 0)), _one(K.BAD_FIELD), "kept"),
    Case("world_size_1e9", lambda r: _doc(r, _dist("world_size", 10**9)), _one(K.BAD_FIELD), "kept"),
    Case("pg_config_junk", lambda r: _doc(r, _dist("pg_config", [{"ranks": "x"}, 3])), _one(K.BAD_FIELD, count=2),
         "kept"),
    Case("base_time_2_63", lambda r: _doc(r, _top("baseTimeNanoseconds", 2**63 - 5)), _one(K.BAD_FIELD), "kept"),
    Case("base_time_string", lambda r: _doc(r, _top("baseTimeNanoseconds", "soon")), _one(K.BAD_FIELD), "kept"),
    Case("ts_1e300", lambda r: _doc(r, _ev("ts", 1e300)), _one(K.BAD_TIMESTAMP), "kept"),
    Case("ts_string", lambda r: _doc(r, _ev("ts", "abc")), _one(K.BAD_TIMESTAMP), "kept"),
    Case("ts_nan", lambda r: _text(r, lambda t: t.replace('"ts": 1020.0', '"ts": NaN', 1)),
         (Rec(K.NAN, TX), Rec(K.BAD_TIMESTAMP, TX)), "kept"),
    Case("dur_negative", lambda r: _doc(r, _ev("dur", -5)), _one(K.BAD_DURATION), "kept"),
    Case("dur_1e15", lambda r: _doc(r, _ev("dur", 1e15)), _one(K.BAD_DURATION), "kept"),
    Case("name_lone_surrogate", lambda r: _text(r, lambda t: t.replace("aten::relu", "aten::\\ud800relu")),
         _one(K.INVALID_TEXT, TX, count=STEPS), "kept"),
    Case("name_invalid_utf8", lambda r: _put(r, json.dumps(rank_doc(1)).encode().replace(b"aten::relu", b"aten::\xffrelu"),
                                              "rank1.pt.trace.json"), _one(K.INVALID_TEXT, TX, count=STEPS), "kept"),
    Case("name_number", lambda r: _doc(r, _ev("name", 12)), _one(K.MALFORMED_EVENTS), "kept"),
    Case("utf8_bom", lambda r: _put(r, b"\xef\xbb\xbf" + json.dumps(rank_doc(1)).encode(), "rank1.pt.trace.json"),
         _one(K.BYTE_ORDER_MARK, TX), "kept"),
    Case("utf8_bom_gzip", lambda r: _put(r, gzip.compress(b"\xef\xbb\xbf" + json.dumps(rank_doc(1)).encode())),
         _one(K.BYTE_ORDER_MARK), "kept"),
    Case("step_number_huge", lambda r: _doc(r, _ev("name", "ProfilerStep#99999999999999999999999", 0)),
         _one(K.BAD_STEP), "kept"),
    Case("args_not_object", lambda r: _doc(r, _ev("args", [1, 2])), _one(K.MALFORMED_EVENTS), "kept"),
    Case("user_notes_json", _named("notes.json", b'{"note": "lr 3e-4"}'), _one(K.NO_EVENTS, "ranks/1/notes.json"),
         "kept"),
    Case("empty_extra_json", _named("x.json", b""), _one(K.EMPTY, "ranks/1/x.json"), "damaged"),
    Case("json_output_beside", _named("out.json", b'{"coverage": {}, "run": {}, "analyses": {}}'),
         _one(K.NO_EVENTS, "ranks/1/out.json"), "kept"),
    # --- meta.json / run.json / MANIFEST.json with wrong types: one line, never a traceback ---
    Case("meta_list", _meta(lambda m: [1, 2]), _one(K.NOT_AN_OBJECT, META), "kept"),
    Case("meta_not_json", _meta(b"{nope"), _one(K.NOT_JSON, META), "kept"),
    Case("meta_deep", _meta(b"[" * 100_000 + b"]" * 100_000), _one(K.TOO_DEEP, META), "kept"),
    Case("meta_rank_string", _meta(lambda m: _set(m, "rank", "1")), _one(K.BAD_FIELD, META), "kept"),
    Case("meta_clock_huge", _meta(lambda m: m["clock"].update(offset_to_rank0_ns=-9 * 10**18)),
         _one(K.BAD_FIELD, META), "kept"),
    Case("meta_clock_string", _meta(lambda m: m["clock"].update(offset_to_rank0_ns="5")), _one(K.BAD_FIELD, META),
         "kept"),
    Case("meta_world_string", _meta(lambda m: _set(m, "world_size", "3")), _one(K.BAD_FIELD, META), "kept"),
    Case("meta_bom", _meta(b"\xef\xbb\xbf" + json.dumps(meta_doc(1)).encode()), _one(K.BYTE_ORDER_MARK, META), "kept"),
    # the traceback of issue 23 ('int' object is not iterable): a window list or a field of the wrong type
    Case("meta_windows_int", _meta(lambda m: _set(m, "windows", 5)), _one(K.BAD_FIELD, META), "kept"),
    Case("meta_windows_garbage", _meta(lambda m: _set(m, "windows", GARBAGE_WINDOWS)),
         _one(K.BAD_FIELD, META, count=7), "kept"),  # 1, "x", null, steps "1-4", file 7, steps "3" and -4
    Case("meta_sched_not_lists", _meta(_window(sched={"source": "schedstat", "step": 5, "cpu_ns": 1.5,
                                                       "runq_wait_ns": True})), _one(K.BAD_FIELD, META, count=3), "kept"),
    Case("meta_sched_one_bad_step", _meta(_window(sched={"source": "schedstat", "step": [1, "x", 3, 4],
                                                          "cpu_ns": [1, 2, 3, 4], "runq_wait_ns": [0, 0, 0, 0]})),
         _one(K.BAD_FIELD, META), "kept"),  # the whole 'step' list: its items line up with cpu_ns
    Case("meta_metadata_list", _meta(lambda m: _set(m, "metadata", [1])), _one(K.BAD_FIELD, META), "kept"),
    Case("meta_device_memory_string", _meta(lambda m: _set(m, "metadata", {"device_memory_bytes": "80G"})),
         _one(K.BAD_FIELD, META), "kept"),
    Case("meta_idle_wrong_types", _meta(lambda m: _set(m, "idle", {"since_step": "x", "closed_windows": 3})),
         _one(K.BAD_FIELD, META, count=2), "kept"),
    Case("meta_every_field_wrong", _meta(lambda m: {k: ({} if isinstance(v, (int, str, list)) else 5)
                                                    for k, v in m.items() if k != "rank"} | {"rank": 1}),
         _one(K.BAD_FIELD, META, count=14), "kept"),
    Case("manifest_not_json", _manifest(b"{"), _one(K.NOT_JSON, MAN), "kept", remanifest=False),
    Case("manifest_files_string", _manifest(lambda m: _set(m, "files", "all")), _one(K.BAD_FIELD, MAN), "kept",
         remanifest=False),
    Case("manifest_entry_junk", _manifest(lambda m: _set(m, "files", [1, {"path": 3}])),
         _one(K.MANIFEST_ENTRIES, MAN, count=2), "kept", remanifest=False),
    Case("run_list", _runjson(lambda m: [m]), _one(K.NOT_AN_OBJECT, RUN, None), "any"),
    Case("run_string", _runjson(b'"R"'), _one(K.NOT_AN_OBJECT, RUN, None), "any"),
    Case("run_not_json", _runjson(b"{"), _one(K.NOT_JSON, RUN, None), "any"),
    Case("run_deep", _runjson(b"[" * 100_000 + b"]" * 100_000), _one(K.TOO_DEEP, RUN, None), "any"),
    Case("run_world_string", _runjson(lambda m: _set(m, "world_size", "3")), _one(K.BAD_FIELD, RUN, None), "any"),
    Case("run_world_zero", _runjson(lambda m: _set(m, "world_size", 0, "ranks_expected")),
         _one(K.BAD_FIELD, RUN, None), "any"),
    Case("run_world_1e9", _runjson(lambda m: _set(m, "world_size", 10**9, "ranks_expected")),
         _one(K.BAD_FIELD, RUN, None), "any"),
    Case("run_expected_junk", _runjson(lambda m: _set(m, "ranks_expected", [0, 1, 2, "3", -1, 2**70])),
         _one(K.BAD_FIELD, RUN, None, count=3), "any"),
    Case("run_id_number", _runjson(lambda m: _set(m, "run_id", 7)), _one(K.BAD_FIELD, RUN, None), "any"),
    Case("run_layout_garbage", _runjson(lambda m: _set(m, "layout", {"pp": "two", "tp": [2]})),
         _one(K.BAD_FIELD, RUN, None, count=2), "any"),
    # --- layout: unpublished, unreadable, links ---
    Case("unpublished_rank", _unpublished, _one(K.NOT_PUBLISHED, "ranks/1"), "dropped", remanifest=False),
    Case("manifest_missing", lambda r: (r / MAN).unlink(), _one(K.NOT_PUBLISHED, "ranks/1"), "kept", remanifest=False),
    Case("dangling_symlink", _symlink(T, lambda r: r / "nowhere.json.gz"), _one(K.BROKEN_LINK), "dropped"),
    Case("symlink_loop", _symlink(T, lambda r: trace_path(r, 1)), _one(K.SYMLINK_LOOP), "dropped"),
    Case("rank_dir_symlink_loop", _symlink("ranks/1", lambda r: r / "ranks" / "1"),
         _one(K.SYMLINK_LOOP, "ranks/1"), "dropped", remanifest=False),
    Case("rank_dir_dangling_link", _symlink("ranks/1", lambda r: r / "ranks" / "gone"),
         _one(K.BROKEN_LINK, "ranks/1"), "dropped", remanifest=False),
    Case("stray_dir", lambda r: (r / "ranks" / "junk").mkdir(), _one(K.STRAY, "ranks/junk", None), "kept"),
    Case("escape_in_name", _named(_EVIL, b"{"), _one(K.NOT_JSON, f"ranks/1/{_EVIL}"), "damaged"),
    Case("newline_in_name", _named(_NL, b""), _one(K.EMPTY, f"ranks/1/{_NL}"), "damaged"),
    Case("markup_in_name", _named(_MARKUP, b""), _one(K.EMPTY, f"ranks/1/{_MARKUP}"), "damaged"),
    Case("dir_unreadable", _chmod(0, "ranks/1"), _one(K.DIR_UNREADABLE, "ranks/1"), "dropped", non_root=True),
    Case("dir_listable_not_searchable", _chmod(0o444, "ranks/1"), _one(K.DIR_UNREADABLE, "ranks/1"), "dropped",
         non_root=True),
    Case("file_unreadable", _chmod(0, T), _one(K.FILE_UNREADABLE), "dropped", non_root=True),
    Case("meta_unreadable", _chmod(0, META), _one(K.FILE_UNREADABLE, META), "kept", non_root=True),
]


# --- building the corpus and analyzing every case in one process ---

CONTROL = "control"  # the same run without any damage


def build(base: Path, cases: list[Case]) -> dict[str, Path]:
    """base/<case>/run for every case, and base/control/run: the run directories, by name."""
    out = {CONTROL: healthy_run(base / CONTROL / "run")}
    for case in cases:
        root = healthy_run(base / case.name / "run")
        case.make(root)
        if case.remanifest and not case.non_root:  # the MANIFEST matches the damaged files (a chmod changes none)
            write_manifest(root / "ranks" / "1", 1)
        out[case.name] = root
    return out


def restore_modes(base: Path) -> None:
    """Undo the permission cases' chmods so the corpus can be removed."""
    for case in CASES:
        if case.non_root and (base / case.name / "run").is_dir():
            os.chmod(base / case.name / "run" / "ranks" / "1", 0o755)
            for p in (base / case.name / "run" / "ranks" / "1").iterdir():
                os.chmod(p, 0o644)


def analyze(root: Path, jobs: str) -> dict[str, Any]:
    """``rankscope analyze ROOT -j JOBS --json`` in this process: rc, stdout, stderr (and a traceback
    if anything escaped the CLI, which must never happen)."""
    from rankscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["analyze", str(root), "-j", jobs, "--json"])
        except BaseException:  # noqa: BLE001 - recorded for the test to show, never swallowed
            rc, _ = -1, err.write(traceback.format_exc())
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}


def as_other_user() -> list[str]:
    """The command prefix that runs a process as uid 65534 when this one is root ([] otherwise); fails
    the test, saying why, when it cannot (permission cases would then read their files as root)."""
    import pytest

    if os.geteuid() != 0:
        return []
    cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    try:
        p = subprocess.run(cmd + [sys.executable, "-c", "import os, rankscope; print(os.geteuid())"],
                           capture_output=True, text=True, timeout=120, cwd=_REPO, env={**os.environ, "PYTHONPATH": str(_REPO)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"running as root, and `setpriv` cannot run the analysis as uid {NOBODY} ({exc}); "
                    "the unreadable-file cases need a non-root user (install util-linux)", pytrace=False)
    if p.returncode != 0 or p.stdout.strip() != str(NOBODY):
        pytest.fail(f"running as root, and `{' '.join(cmd)} {sys.executable}` failed (rc {p.returncode}: "
                    f"{p.stderr.strip()[-300:]}); the unreadable-file cases need a non-root user that can read "
                    f"{_REPO} and its virtual environment", pytrace=False)
    return cmd


def chown_tree(base: Path, uid: int) -> None:
    for top, dirs, files in os.walk(base):
        for n in dirs + files:
            os.lchown(os.path.join(top, n), uid, uid)
    os.chown(base, uid, uid)


def run_batch(base: Path, names: list[str], jobs: str, env_extra: dict[str, str]) -> dict[str, Any]:
    """``python -m tests.hostile``: every named run under ``base`` analyzed in one process (as another
    user when root), results by name."""
    user = as_other_user()
    if user:
        chown_tree(base, NOBODY)
    out = base / "results.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSCOPE_")}
    env.update({"PYTHONPATH": str(_REPO), "HOME": str(base), "RANKSCOPE_CACHE": str(base / ".cache"), **env_extra})
    # a generous bound that only a hang breaks (the corpus takes minutes on a loaded 2-core machine)
    p = subprocess.run(user + [sys.executable, "-m", "tests.hostile", str(base), jobs, str(out), *names],
                       cwd=_REPO, env=env, capture_output=True, text=True, timeout=3000)
    assert p.returncode == 0 and out.exists(), f"the batch failed (rc {p.returncode}):\n{p.stderr[-3000:]}"
    return json.loads(out.read_text())


def _main(argv: list[str]) -> int:
    """python -m tests.hostile BASE JOBS OUT NAME...: analyze BASE/NAME/run for each NAME, write OUT (JSON)."""
    base, jobs, out, names = Path(argv[0]), argv[1], Path(argv[2]), argv[3:]
    got = {n: analyze(base / n / "run", jobs) for n in names}
    out.write_text(json.dumps(got))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
