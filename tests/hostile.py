"""A corpus of broken and hostile inputs, each built in a fresh 3-rank run directory.

The healthy run is built from a tiny real-shaped Kineto trace (the event layout of torch 2.x's
profiler on gloo, as in tests/helpers.py: ProfilerStep spans, nested aten ops, gloo:all_reduce with
Input Dims, [memory] instants, distributedInfo with pg_config, baseTimeNanoseconds) plus run.json,
meta.json and MANIFEST.json as rankscope's collector writes them (store/spool.py). Every case then
damages rank 1 (or a run-level file) in one way. Each case says:

- ``line``: a substring of the one line that must name the problem (in stdout or stderr);
- ``rank1``: what must become of rank 1: "dropped" (not analyzed, named missing with the reason),
  "damaged" (analyzed, named damaged, never in a verdict), "kept" (field repaired or dropped, the
  rank analyzed normally) or "any" (run-level damage; ranks 0 and 2 are what must survive).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tests.helpers import x

RANKS = 3
STEPS = 4


def rank_doc(rank: int, *, world: int = RANKS, slow: float = 1.0) -> dict[str, Any]:
    """One rank's trace document: STEPS steps of forward / mm / all_reduce."""
    evs: list[dict[str, Any]] = []
    for i in range(STEPS):
        t = 1000.0 + i * 2000
        mm = 600 * slow
        evs += [x(f"ProfilerStep#{i + 1}", t, mm + 900, cat="user_annotation"),
                x("aten::mm", t + 20, mm),
                x("aten::relu", t + mm + 40, 50),
                x("gloo:all_reduce", t + mm + 200, 600 + (600 - mm if slow < 1 else 0), cat="user_annotation",
                  **{"Input Dims": [[1000]], "Input type": ["float"]}),
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


def healthy_run(root: Path) -> Path:
    """RUN/run.json + ranks/<r>/{rank<r>.pt.trace.json.gz, meta.json, MANIFEST.json}; rank 2 is slow."""
    for r in range(RANKS):
        d = root / "ranks" / str(r)
        d.mkdir(parents=True)
        trace_path(root, r).write_bytes(gzip.compress(json.dumps(rank_doc(r, slow=1.6 if r == 2 else 1.0)).encode()))
        (d / "meta.json").write_text(json.dumps({"format": "rankscope.meta/1", "run_id": "R", "rank": r,
                                                 "world_size": RANKS, "host": f"node-{r}",
                                                 "clock": {"offset_to_rank0_ns": 0, "offset_error_ns": 1000}}))
        write_manifest(d, r)
    (root / "run.json").write_text(json.dumps({"format": "rankscope.run/1", "run_id": "R", "world_size": RANKS,
                                               "ranks_expected": list(range(RANKS))}))
    return root


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], None]
    line: str
    rank1: str  # dropped | damaged | kept | any
    remanifest: bool = True  # rewrite rank 1's MANIFEST after the damage (else the sha check fires too)


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


def _ev(field: str, value: Any, i: int = 1) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["traceEvents"][i][field] = value
    return edit


def _args(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["traceEvents"][3]["args"][field] = value
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


def _meta(edit: Callable[[dict[str, Any]], Any] | bytes) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        p = root / "ranks" / "1" / "meta.json"
        if isinstance(edit, bytes):
            p.write_bytes(edit)
            return
        m = json.loads(p.read_text())
        got = edit(m)
        p.write_text(json.dumps(m if got is None else got))
    return make


def _runjson(edit: Callable[[dict[str, Any]], Any] | bytes) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        p = root / "run.json"
        if isinstance(edit, bytes):
            p.write_bytes(edit)
            return
        m = json.loads(p.read_text())
        got = edit(m)
        p.write_text(json.dumps(m if got is None else got))
    return make


def _manifest(edit: Callable[[dict[str, Any]], Any] | bytes) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        p = root / "ranks" / "1" / "MANIFEST.json"
        if isinstance(edit, bytes):
            p.write_bytes(edit)
            return
        m = json.loads(p.read_text())
        got = edit(m)
        p.write_text(json.dumps(m if got is None else got))
    return make


def _set(d: dict[str, Any], k: str, v: Any, drop: str = "") -> None:
    d[k] = v
    d.pop(drop, None)


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


def _strip_traces(root: Path) -> None:
    for p in (root / "ranks" / "1").iterdir():
        if ".trace." in p.name:
            p.unlink()


def _unpublished(root: Path) -> None:
    _strip_traces(root)
    (root / "ranks" / "1" / "MANIFEST.json").unlink()


def _chmod(mode: int, what: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        target = root / "ranks" / "1" if what == "dir" else trace_path(root, 1)
        os.chmod(target, mode)
    return make


def _symlink(target: Callable[[Path], Path]) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        p = trace_path(root, 1)
        p.unlink()
        p.symlink_to(target(root))
    return make


def _bomb(root: Path) -> None:
    # 80 MiB of zeros in ~80 KB: past the 64 MiB floor, ~1000:1, stopped before it is in memory.
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    data = b"".join(co.compress(chunk) for _ in range(80)) + co.flush()
    _put(root, data)


PROOT = "ProfilerStep#1"

CASES: list[Case] = [
    # --- whole files that cannot be read: rank 1 dropped, the reason said ---
    Case("empty", lambda r: _put(r, b"", "rank1.pt.trace.json"), "empty file", "dropped"),
    Case("blank", lambda r: _put(r, b"  \n\t ", "rank1.pt.trace.json"), "empty file", "dropped"),
    Case("not_json", lambda r: _put(r, b"hello world\n", "rank1.pt.trace.json"), "not valid JSON", "dropped"),
    Case("binary", lambda r: _put(r, b"\x89PNG\r\n\x1a\n\0\0junk", "rank1.pt.trace.json"), "not valid JSON", "dropped"),
    Case("events_not_list", lambda r: _put(r, b'{"traceEvents": 3}', "rank1.pt.trace.json"), "not a Kineto trace",
         "dropped"),
    Case("top_is_string", lambda r: _put(r, b'"a trace"', "rank1.pt.trace.json"), "rank1.pt.trace.json", "dropped"),
    Case("top_is_number", lambda r: _put(r, b"42", "rank1.pt.trace.json"), "rank1.pt.trace.json", "dropped"),
    Case("gzip_empty", lambda r: _put(r, gzip.compress(b"")), "empty file", "dropped"),
    Case("gzip_header_only", lambda r: _put(r, b"\x1f\x8b\x08\x00"), "gzip header damaged", "dropped"),
    Case("gzip_garbage", lambda r: _put(r, b"\x1f\x8b\x08\x00\0\0\0\0\0\xff" + b"garbage" * 10), "gzip stream damaged",
         "dropped"),
    Case("deep_nesting", lambda r: _put(r, _deep(100_000), "rank1.pt.trace.json"), "nested too deeply", "dropped"),
    Case("gzip_bomb", _bomb, "gzip inflates more than", "dropped"),
    Case("metadata_only", lambda r: _doc(r, _top("traceEvents", [])), "no trace events", "dropped"),
    Case("events_not_objects", lambda r: _doc(r, _top("traceEvents", [1, "x", None, []])), "malformed events",
         "dropped"),
    Case("only_begin_end", lambda r: _doc(r, _top("traceEvents", [
        {"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 1}, {"ph": "E", "name": "a", "pid": 1, "tid": 1, "ts": 2}])),
        "begin/end ('B'/'E') events are not supported", "dropped"),
    # --- damaged: read, named damaged, never in a verdict ---
    Case("truncated_gzip", _truncate_gz, "gzip stream damaged (ends early)", "damaged"),
    Case("truncated_json", _truncate_json, "truncated JSON", "damaged"),
    Case("gzip_crc_wrong", _crc, "gzip CRC/length check failed", "damaged"),
    Case("gzip_isize_wrong", _isize, "gzip CRC/length check failed", "damaged"),
    Case("manifest_sha_mismatch", _flip_byte, "sha256 differs from MANIFEST.json", "damaged", remanifest=False),
    Case("manifest_size_mismatch", lambda r: _manifest(lambda m: m["files"][1].update(size=5))(r),
         "size 495 differs from MANIFEST.json (5)", "damaged", remanifest=False),
    Case("appended_garbage", lambda r: _put(r, json.dumps(rank_doc(1)).encode() + b"\n}}garbage",
                                             "rank1.pt.trace.json"), "truncated JSON", "damaged"),
    # --- one bad field or event: repaired or dropped, counted, the rank kept ---
    Case("tid_2_70", lambda r: _doc(r, _ev("tid", 2**70)), "", "kept"),
    Case("pid_string", lambda r: _doc(r, _ev("pid", "Spans")), "", "kept"),
    Case("tid_float", lambda r: _doc(r, _ev("tid", 1.5)), "", "kept"),
    Case("group_size_big", lambda r: _doc(r, _args("Group size", "big")), "", "kept"),
    Case("input_dims_object", lambda r: _doc(r, _args("Input Dims", {"a": 1})), "", "kept"),
    Case("input_dims_huge", lambda r: _doc(r, _args("Input Dims", [[2**40, 2**40]])), "", "kept"),
    Case("seq_string", lambda r: _doc(r, _args("Seq", "x")), "", "kept"),
    Case("device_props_string", lambda r: _doc(r, _top("deviceProperties", "H100")),
         "deviceProperties is not a list of objects", "kept"),
    Case("device_props_junk_list", lambda r: _doc(r, _top("deviceProperties", [1, "a"])),
         "deviceProperties is not a list of objects", "kept"),
    Case("rank_string", lambda r: _doc(r, _dist("rank", "1")), "rank '1' ignored", "kept"),
    Case("rank_huge", lambda r: _doc(r, _dist("rank", 2**40)), "ignored (expected an integer", "kept"),
    Case("rank_negative", lambda r: _doc(r, _dist("rank", -3)), "rank -3 ignored", "kept"),
    Case("dist_info_string", lambda r: _doc(r, _top("distributedInfo", "gloo")), "distributedInfo is not an object",
         "kept"),
    Case("world_size_zero", lambda r: _doc(r, _dist("world_size", 0)), "world size 0 ignored", "kept"),
    Case("world_size_1e9", lambda r: _doc(r, _dist("world_size", 10**9)), "world size 1000000000 ignored", "kept"),
    Case("pg_config_junk", lambda r: _doc(r, _dist("pg_config", [{"ranks": "x"}, 3])), "", "kept"),
    Case("base_time_2_63", lambda r: _doc(r, _top("baseTimeNanoseconds", 2**63 - 5)), "baseTimeNanoseconds", "kept"),
    Case("base_time_string", lambda r: _doc(r, _top("baseTimeNanoseconds", "soon")), "baseTimeNanoseconds", "kept"),
    Case("ts_1e300", lambda r: _doc(r, _ev("ts", 1e300)), "absurd 'ts'", "kept"),
    Case("ts_string", lambda r: _doc(r, _ev("ts", "abc")), "without a valid 'ts'", "kept"),
    Case("ts_nan", lambda r: _text(r, lambda t: t.replace('"ts": 1020.0', '"ts": NaN', 1)), "NaN/Infinity", "kept"),
    Case("dur_negative", lambda r: _doc(r, _ev("dur", -5)), "negative or NaN 'dur'", "kept"),
    Case("dur_1e15", lambda r: _doc(r, _ev("dur", 1e15)), "'dur' over a day", "kept"),
    Case("name_lone_surrogate", lambda r: _text(r, lambda t: t.replace("aten::relu", "aten::\\ud800relu")),
         "invalid text", "kept"),
    Case("name_invalid_utf8", lambda r: _put(r, json.dumps(rank_doc(1)).encode().replace(b"aten::relu", b"aten::\xffrelu"),
                                              "rank1.pt.trace.json"), "invalid UTF-8", "kept"),
    Case("name_number", lambda r: _doc(r, _ev("name", 12)), "", "kept"),
    Case("utf8_bom", lambda r: _put(r, b"\xef\xbb\xbf" + json.dumps(rank_doc(1)).encode(), "rank1.pt.trace.json"),
         "", "kept"),
    Case("step_number_huge", lambda r: _doc(r, _ev("name", "ProfilerStep#99999999999999999999999", 0)), "", "kept"),
    Case("args_not_object", lambda r: _doc(r, _ev("args", [1, 2])), "", "kept"),
    Case("user_notes_json", _named("notes.json", b'{"note": "lr 3e-4"}'), "no trace events", "kept"),
    Case("empty_extra_json", _named("x.json", b""), "empty file", "damaged"),
    Case("json_output_beside", _named("out.json", b'{"coverage": {}, "run": {}, "analyses": {}}'), "no trace events",
         "kept"),
    # --- meta.json / run.json / MANIFEST.json with wrong types: one line, never a traceback ---
    Case("meta_list", _meta(lambda m: [1, 2]), "expected a JSON object, found list", "kept"),
    Case("meta_not_json", _meta(b"{nope"), "meta.json: not valid JSON", "kept"),
    Case("meta_deep", _meta(b"[" * 100_000 + b"]" * 100_000), "nested too deeply", "kept"),
    Case("meta_rank_string", _meta(lambda m: _set(m, "rank", "1")), "rank '1' ignored", "kept"),
    Case("meta_clock_huge", _meta(lambda m: _set(m, "clock", {"offset_to_rank0_ns": -9 * 10**18})),
         "clock offset -9000000000000000000 ns ignored", "kept"),
    Case("meta_clock_string", _meta(lambda m: _set(m, "clock", {"offset_to_rank0_ns": "5"})), "clock offset '5'", "kept"),
    Case("meta_world_string", _meta(lambda m: _set(m, "world_size", "3")), "", "kept"),
    Case("meta_bom", _meta(b"\xef\xbb\xbf" + json.dumps({"rank": 1, "run_id": "R"}).encode()), "", "kept"),
    Case("manifest_not_json", _manifest(b"{"), "MANIFEST.json: not valid JSON", "kept", remanifest=False),
    Case("manifest_files_string", _manifest(lambda m: _set(m, "files", "all")), "field 'files' has the wrong type",
         "kept", remanifest=False),
    Case("manifest_entry_junk", _manifest(lambda m: _set(m, "files", [1, {"path": 3}])), "entries without path",
         "kept", remanifest=False),
    Case("run_list", _runjson(lambda m: [m]), "run.json: expected a JSON object", "any"),
    Case("run_string", _runjson(b'"R"'), "run.json: expected a JSON object", "any"),
    Case("run_not_json", _runjson(b"{"), "run.json: not valid JSON", "any"),
    Case("run_deep", _runjson(b"[" * 100_000 + b"]" * 100_000), "nested too deeply", "any"),
    Case("run_world_string", _runjson(lambda m: _set(m, "world_size", "3")), "world size '3' ignored", "any"),
    Case("run_world_zero", _runjson(lambda m: _set(m, "world_size", 0, "ranks_expected")),
         "world size 0 ignored", "any"),
    Case("run_world_1e9", _runjson(lambda m: _set(m, "world_size", 10**9, "ranks_expected")),
         "world size 1000000000 ignored", "any"),
    Case("run_expected_junk", _runjson(lambda m: _set(m, "ranks_expected", [0, 1, 2, "3", -1, 2**70])),
         "entries of 'ranks_expected' are not valid ranks", "any"),
    Case("run_id_number", _runjson(lambda m: _set(m, "run_id", 7)), "field 'run_id' has the wrong type", "any"),
    # --- layout: unpublished, unreadable, links ---
    Case("unpublished_rank", _unpublished, "not published yet", "dropped", remanifest=False),
    Case("manifest_missing", lambda r: (r / "ranks" / "1" / "MANIFEST.json").unlink(), "not published yet", "kept",
         remanifest=False),
    Case("dangling_symlink", _symlink(lambda r: r / "nowhere.json.gz"), "no readable trace file", "dropped"),
    Case("symlink_loop", _symlink(lambda r: trace_path(r, 1)), "no readable trace file", "dropped"),
    Case("stray_dir", lambda r: (r / "ranks" / "junk").mkdir(), "", "kept"),
    Case("escape_in_name", _named("evil\x1b[2J\x1b[31m.json", b"{"), "evil\\x1b[2J\\x1b[31m.json", "damaged"),
    Case("newline_in_name", _named("a\nFAKE LINE.json", b""), "a\\nFAKE LINE.json", "damaged"),
    Case("markup_in_name", _named("[bold red]x[-].json", b""), "[bold red]x[-].json", "damaged"),
    Case("dir_unreadable", _chmod(0, "dir"), "directory unreadable", "dropped"),
    Case("file_unreadable", _chmod(0, "file"), "cannot read", "dropped"),
]
