"""Hostile input for the readers tests/hostile.py does not reach (issue 23): torch_npu's DB export, the
MindInsight cluster layout, rankscope's RPC files and collective recorder (Flight Recorder) dumps; and
Kineto thread ids (true, 1.0) and process groups of more than 30 ranks.

Per case: exactly the expected problem records (model/info.py ``Problem``: kind, file relative to the run,
rank, count), each said on one warning line of its own; what becomes of the damaged rank (kept or
dropped, named missing with the reason); the healthy ranks' verdict against a control run of the same
fixture without the damage; never a traceback. The DB and MindInsight cases run serially and on the pool.

Fixtures: the DB export and its 4-rank run from rankscope/synth/ascend_run.py (torch_npu's tables, see
tests/unit/test_ascend_db.py; rank 3 is slow in compute); the MindInsight cluster of
tests/unit/test_mindinsight.py (rank 2 slow); RPC call records in the shape rankscope.collect.rpc writes
(calls.py's docstring); recorder dumps in torch's Flight Recorder format (tests/unit/test_hang_rules.py).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Callable

import pytest

from rankscope.cli import main
from rankscope.errors import safe
from rankscope.model.info import Kind
from tests.unit.test_hang_rules import Rank
from tests.unit.test_mindinsight import IPS, cluster  # noqa: F401 - cluster: the MindInsight fixture
from tests.unit.test_rpc import _call

OUT = "ASCEND_PROFILER_OUTPUT"
Rec = tuple[str, str, "int | None", int]  # kind, file relative to the run, rank, count


def _analyze(root: Path, capsys: pytest.CaptureFixture[str], jobs: str = "1") -> tuple[dict[str, Any], str]:
    assert main(["analyze", str(root), "-j", jobs, "--json"]) == 0
    got = capsys.readouterr()
    assert "Traceback" not in got.err and "rankscope: error" not in got.err, got.err
    return json.loads(got.out), got.err


def _records(recs: list[dict[str, Any]], root: Path) -> list[Rec]:
    return sorted((r["kind"], os.path.relpath(r["file"], root) if r["file"] else "", r["rank"], r["count"])
                  for r in recs)


def _said_once(recs: list[dict[str, Any]], err: str) -> None:
    for r in recs:  # one line each, said once, escaped
        assert err.splitlines().count(f"warning: {safe(r['line'])}") == 1, (r["line"], err)


def _verdict(doc: dict[str, Any]) -> list[tuple[str, list[int], str | None]]:
    return sorted((f["kind"], f["ranks"], f["evidence"].get("cause")) for f in doc["analyses"]["straggler"]["findings"])


# ---------------------------------------------------------------- torch_npu's DB export

@pytest.fixture(scope="module")
def db_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rankscope.synth.ascend_run import write_run
    from rankscope.synth.ascend_sim import AscendJob

    dirs = write_run(tmp_path_factory.mktemp("ascend-db") / "db", AscendJob(steps=(10, 11)), form="db")
    return dirs[0].parent


def _drop(table: str) -> Callable[[Path], None]:
    def damage(out: Path) -> None:
        for db in out.glob("*.db"):
            con = sqlite3.connect(db)
            with con:
                con.execute(f"DROP TABLE IF EXISTS {table}")
            con.close()
    return damage


R1 = "node0_41001_20250101000000001_ascend_pt"
PDB, ADB = f"{R1}/{OUT}/ascend_pytorch_profiler_1.db", f"{R1}/{OUT}/analysis.db"
# name, damage of rank 1's output folder, its record, rank 1 still read, its timeline still read
DB_CASES: list[tuple[str, Callable[[Path], Any], Rec, bool, bool]] = [
    ("profiler_db_not_sqlite", lambda out: (out / "ascend_pytorch_profiler_1.db").write_bytes(b"<html>" * 100),
     (Kind.NOT_A_DATABASE.value, PDB, 1, 1), False, False),
    ("analysis_db_not_sqlite", lambda out: (out / "analysis.db").write_bytes(b"\x00garbage" * 50),
     (Kind.NOT_A_DATABASE.value, ADB, 1, 1), True, True),
    ("analysis_db_missing", lambda out: (out / "analysis.db").unlink(), (Kind.MISSING_FILE.value, f"{R1}/{OUT}", 1, 1),
     True, True),
    ("no_timeline_tables", _drop("STRING_IDS"), (Kind.NO_EVENTS.value, PDB, 1, 1), True, False),
    ("no_comm_time_table", _drop("CommAnalyzerTime"), (Kind.BAD_TABLE.value, ADB, 1, 1), True, True),
    ("only_analysis_db", lambda out: (out / "ascend_pytorch_profiler_1.db").unlink(),
     (Kind.MISSING_FILE.value, f"{R1}/{OUT}", 1, 1), True, False),
]


@pytest.fixture(scope="module", params=["1", "2"], ids=["serial", "pool"])
def db_control(request: pytest.FixtureRequest, db_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    import contextlib
    import io

    root = tmp_path_factory.mktemp("db-control") / "run"
    shutil.copytree(db_run, root, ignore=shutil.ignore_patterns("analysis"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["analyze", str(root), "-j", request.param, "--json"]) == 0
    doc = json.loads(out.getvalue())
    assert _verdict(doc) == [("straggler", [3], "compute")] and doc["run"]["issues"] == []
    return request.param, _verdict(doc)


@pytest.mark.parametrize("name,damage,rec,kept,timeline", DB_CASES, ids=[c[0] for c in DB_CASES])
def test_hostile_ascend_db(db_run, db_control, tmp_path, capsys, name, damage, rec, kept, timeline):
    jobs, want = db_control
    root = tmp_path / "run"
    shutil.copytree(db_run, root, ignore=shutil.ignore_patterns("analysis"))
    damage(root / R1 / OUT)
    doc, err = _analyze(root, capsys, jobs)
    recs = doc["run"]["issues"]
    assert _records(recs, root) == [rec], err
    _said_once(recs, err)
    ranks = [r["rank"] for r in doc["run"]["ranks"]]
    missing = {m["rank"]: m["why"] for m in doc["coverage"]["missing"]}
    assert ranks == ([0, 1, 2, 3] if kept else [0, 2, 3]) and (missing == {} if kept else list(missing) == [1])
    if not kept:
        assert recs[0]["line"].endswith(missing[1])
    if timeline:  # rank 1 read whole enough: the verdict is the control's
        assert _verdict(doc) == want
    else:  # never a verdict on rank 1, nor a new one (on 3 timelines, rank 3's +33 % is not named: see the note)
        assert not [v for v in _verdict(doc) if 1 in v[1]] and set(map(str, _verdict(doc))) <= set(map(str, want))


# ---------------------------------------------------------------- MindInsight cluster layout

F1 = "cluster_profiler/2/profiler/step_trace_raw_1_detail_time.csv"  # rank 1: host 2, device 1


def _rows(fix: Callable[[list[list[str]]], list[list[str]]]) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        p = root / F1
        rows = [line.split(",") for line in p.read_text().splitlines()]
        p.write_text("\n".join(",".join(r) for r in fix(rows)) + "\n")
    return damage


def _bad_rows(rows: list[list[str]]) -> list[list[str]]:
    rows[1][4] = "soon"  # step 1's fp_point is not a count
    return rows[:3] + [rows[2] + ["7"] * 20] + rows[3:]  # a row with more cells than the header


def _no_rows(rows: list[list[str]]) -> list[list[str]]:
    return [rows[0]] + [["x"] + r[1:] for r in rows[1:-1]]


def _wrong_types(root: Path) -> None:
    (root / "hccl.json").write_text(json.dumps(
        {"server_list": [{"server_id": IPS["host-2"], "device": {"device_id": "0"}}, "x", {"server_id": 7}]}))


MAP = "host_ips_mapping.txt"
# Without a rank table the ranks are numbered from the folders, in order; each file then says so.
BY_ORDER = [(Kind.RANK_UNKNOWN.value, f"cluster_profiler/{h}/profiler/step_trace_raw_{d}_detail_time.csv", r, 1)
            for r, (h, d) in enumerate([(1, 0), (1, 1), (2, 0), (2, 1)])]
# name, damage, records, ranks analyzed, rank numbers kept (the verdict is the control's)
MI_CASES: list[tuple[str, Callable[[Path], Any], list[Rec], list[int], bool]] = [
    ("step_trace_garbage", lambda root: (root / F1).write_bytes(b"\x00\xff garbage\n1,2"),
     [(Kind.BAD_TABLE.value, F1, 1, 1)], [0, 2, 3], True),
    ("step_trace_missing", lambda root: (root / F1).unlink(),
     [(Kind.NO_TRACE.value, "cluster_profiler/2/profiler", 1, 1)], [0, 2, 3], True),
    ("step_rows_bad", _rows(_bad_rows), [(Kind.BAD_ROWS.value, F1, 1, 2)], [0, 1, 2, 3], True),
    ("step_rows_none", _rows(_no_rows), [(Kind.NO_USABLE_EVENTS.value, F1, 1, 1)], [0, 2, 3], True),
    ("rank_table_wrong_types", _wrong_types,  # server {"server_id": 7}: no mapping line (and no device)
     [(Kind.BAD_FIELD.value, ".", None, 1), (Kind.RANK_UNKNOWN.value, MAP, None, 1)] + BY_ORDER, [0, 1, 2, 3], False),
    ("rank_table_not_json", lambda root: (root / "hccl.json").write_text("{"),
     [(Kind.BAD_FIELD.value, "hccl.json", None, 1)] + BY_ORDER, [0, 1, 2, 3], False),
    ("rank_table_missing", lambda root: (root / "hccl.json").unlink(),
     [(Kind.MISSING_FILE.value, ".", None, 1)] + BY_ORDER, [0, 1, 2, 3], False),
    ("server_unmapped", lambda root: (root / MAP).write_text(f"{IPS['host-2']} 2\n"),
     [(Kind.RANK_UNKNOWN.value, MAP, None, 2)], [0, 1], True),
]


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "pool"])
@pytest.mark.parametrize("name,damage,recs,ranks,numbered", MI_CASES, ids=[c[0] for c in MI_CASES])
def test_hostile_mindinsight(cluster, tmp_path, capsys, jobs, name, damage, recs, ranks, numbered):  # noqa: F811
    root, _ = cluster
    control = tmp_path / "control"
    shutil.copytree(root, control)
    want, _ = _analyze(control, capsys, jobs)
    assert _verdict(want) == [("straggler", [2], "compute")] and want["run"]["issues"] == []
    damage(root)
    doc, err = _analyze(root, capsys, jobs)
    got = doc["run"]["issues"]
    assert _records(got, root) == sorted(recs), err
    _said_once(got, err)
    assert sorted(r["rank"] for r in doc["run"]["ranks"]) == ranks
    assert not [ip for ip in list(IPS.values()) if ip in err + json.dumps(doc)]
    if numbered and 2 in ranks:  # the slow rank is still named, with the same cause
        assert _verdict(doc) == _verdict(want)


# ---------------------------------------------------------------- rankscope's RPC files

def _rpc(root: Path, rank: int, doc: Any, raw: bytes | None = None) -> None:
    d = root / "ranks" / str(rank)
    d.mkdir(parents=True, exist_ok=True)
    data = raw if raw is not None else gzip.compress(json.dumps(doc).encode())
    (d / "rpc.0000.json.gz").write_bytes(data)


def _rpc_doc(rank: int, calls: Any = None, gaps: Any = ()) -> dict[str, Any]:
    calls = [_call(off=10), _call(t=2_000_000, off=30)] if calls is None else calls
    return {"format": "rankscope.rpc/1", "rank": rank, "worker": f"worker{rank}", "worker_id": rank, "calls": calls,
            "gaps": gaps if gaps is None or not isinstance(gaps, tuple) else list(gaps)}


RPC1 = "ranks/1/rpc.0000.json.gz"
# name, rank 1's RPC file (a document or raw bytes), records, calls read from it
RPC_CASES: list[tuple[str, Any, list[Rec], int]] = [
    ("not_gzip", b"{not gzip", [(Kind.GZIP_DAMAGED.value, RPC1, 1, 1)], 0),
    ("gzip_cut", gzip.compress(json.dumps(_rpc_doc(1)).encode())[:40], [(Kind.GZIP_DAMAGED.value, RPC1, 1, 1)], 0),
    ("empty", b"", [(Kind.EMPTY.value, RPC1, 1, 1)], 0),
    ("not_json", gzip.compress(b"<html>"), [(Kind.NOT_JSON.value, RPC1, 1, 1)], 0),
    ("not_an_rpc_file", gzip.compress(b'{"format": "rankscope.meta/1"}'), [(Kind.NOT_A_TRACE.value, RPC1, 1, 1)], 0),
    ("calls_not_a_list", _rpc_doc(1, calls=7), [(Kind.MALFORMED_EVENTS.value, RPC1, 1, 1)], 0),
    ("calls_not_objects", _rpc_doc(1, calls=[_call(), 3, "x"]), [(Kind.MALFORMED_EVENTS.value, RPC1, 1, 2)], 1),
    ("fields_wrong_types", _rpc_doc(1, calls=[{**_call(), "t_send": "soon", "remote_ns": True, "dst": 5,
                                               "events": [{"name": "aten::mm", "ts": 1.5, "dur": "x"}, 4]}]),
     [(Kind.BAD_FIELD.value, RPC1, 1, 6)], 1),
    ("gaps_not_a_list", _rpc_doc(1, gaps=3), [(Kind.BAD_FIELD.value, RPC1, 1, 1)], 2),
    ("gaps", _rpc_doc(1, gaps=("worker3: its profiler was busy", "worker4: no rankscope")),
     [(Kind.NOT_CAPTURED.value, RPC1, 1, 1)] * 2, 2),
]


@pytest.mark.parametrize("name,rank1,recs,calls", RPC_CASES, ids=[c[0] for c in RPC_CASES])
def test_hostile_rpc_files(tmp_path, capsys, name, rank1, recs, calls):
    from tests.helpers import tiny_run

    control = tiny_run(tmp_path / "control")
    _rpc(control, 0, _rpc_doc(0))
    _rpc(control, 1, _rpc_doc(1))
    want, _ = _analyze(control, capsys)
    assert want["analyses"]["rpc"]["summary"]["calls"] == 4 and want["analyses"]["rpc"]["summary"]["issues"] == []
    root = tiny_run(tmp_path / "run")
    _rpc(root, 0, _rpc_doc(0))
    _rpc(root, 1, None, rank1) if isinstance(rank1, bytes) else _rpc(root, 1, rank1)
    doc, err = _analyze(root, capsys)
    rpc = doc["analyses"]["rpc"]
    assert rpc["skipped"] is None and rpc["summary"]["calls"] == 2 + calls  # rank 0's calls always read
    assert _records(rpc["summary"]["issues"], root) == sorted(recs)
    assert {r["line"] for r in rpc["summary"]["issues"]} <= set(rpc["summary"]["not_captured"])
    assert _verdict(doc) == _verdict(want) and doc["run"]["issues"] == []  # the traces are not the RPC files'


def test_rpc_files_all_unreadable_say_why_the_analysis_is_skipped(tmp_path, capsys):
    from tests.helpers import tiny_run

    root = tiny_run(tmp_path / "run")
    _rpc(root, 1, None, b"junk")
    doc, _ = _analyze(root, capsys)
    rpc = doc["analyses"]["rpc"]
    assert rpc["skipped"] and "1 problems with its RPC files" in rpc["skipped"]
    assert _records(rpc["summary"]["issues"], root) == [(Kind.GZIP_DAMAGED.value, RPC1, 1, 1)]


# ---------------------------------------------------------------- collective recorder (Flight Recorder) dumps

def _dump_doc(rank: int, steps: int = 3) -> dict[str, Any]:
    r = Rank(rank, {"0": ("default_pg", [0, 1])})
    for s in range(1, steps + 1):
        r.coll("0", s, "all_reduce", [[1000]])
    cfg = {k: {"name": k, "desc": d, "ranks": str(rs)} for k, (d, rs) in r.groups.items()}
    return {"version": "2.10", "entries": r.entries, "pg_config": cfg, "pg_status": {}}


def _dump(root: Path, rank: int, doc: Any = None, raw: bytes | None = None) -> str:
    rel = f"ranks/{rank}/comms.0001-exit.rank{rank}.json.gz"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(raw if raw is not None else gzip.compress(json.dumps(doc).encode()))
    return rel


FR1 = "ranks/1/comms.0001-exit.rank1.json.gz"


def _entries(fix: Callable[[list[dict[str, Any]]], list[Any]]) -> dict[str, Any]:
    doc = _dump_doc(1)
    doc["entries"] = fix(doc["entries"])
    return doc


# name, rank 1's dump (a document or raw bytes), records, rank 1's dump read
FR_CASES: list[tuple[str, Any, list[Rec], bool]] = [
    ("empty", b"", [(Kind.EMPTY.value, FR1, 1, 1)], False),
    ("gzip_cut", gzip.compress(json.dumps(_dump_doc(1)).encode())[:30], [(Kind.GZIP_DAMAGED.value, FR1, 1, 1)],
     False),
    ("not_json", gzip.compress(b"{oops"), [(Kind.NOT_JSON.value, FR1, 1, 1)], False),
    ("no_entries", {"version": "2.10", "entries": 5}, [(Kind.NOT_A_TRACE.value, FR1, 1, 1)], False),
    ("deep", gzip.compress(b"[" * 200_000 + b"]" * 200_000), [(Kind.TOO_DEEP.value, FR1, 1, 1)], False),
    ("entries_malformed", _entries(lambda es: es + [3, {"profiling_name": "gloo:all_reduce"}]),
     [(Kind.MALFORMED_EVENTS.value, FR1, 1, 2)], True),
    ("process_group_number", _entries(lambda es: es + [{**es[-1], "collective_seq_id": 4, "process_group": 7}]),
     [(Kind.MALFORMED_EVENTS.value, FR1, 1, 1)], True),
]


@pytest.mark.parametrize("name,rank1,recs,read", FR_CASES, ids=[c[0] for c in FR_CASES])
def test_hostile_recorder_dumps(tmp_path, capsys, name, rank1, recs, read):
    from tests.helpers import tiny_run

    control = tiny_run(tmp_path / "control")
    for r in (0, 1):
        _dump(control, r, _dump_doc(r))
    want, _ = _analyze(control, capsys)
    hang = want["analyses"]["hang"]
    assert hang["summary"]["dumps"] == 2 and hang["summary"]["issues"] == [] and hang["summary"]["not_read"] == "none"
    root = tiny_run(tmp_path / "run")
    _dump(root, 0, _dump_doc(0))
    _dump(root, 1, None, rank1) if isinstance(rank1, bytes) else _dump(root, 1, rank1)
    doc, err = _analyze(root, capsys)
    got = doc["analyses"]["hang"]
    assert _records(got["summary"]["issues"], root) == sorted(recs)
    assert [r["line"] for r in got["summary"]["issues"]] == got["summary"]["not_read"]  # shown in the hang view
    assert got["summary"]["dumps"] == (2 if read else 1)
    if read:  # the entries that are collectives still match: the control's verdict
        assert [(f["kind"], f["ranks"]) for f in got["findings"]] == [(f["kind"], f["ranks"]) for f in hang["findings"]]
    else:  # rank 1 sent no readable dump: said as such, never a verdict from its broken file
        assert got["summary"]["no_dump"] == [1]
    # rankscope hang: the same records in --json, each line said once on stderr
    main(["hang", str(root / "ranks"), "--json"])
    cli = capsys.readouterr()
    assert "Traceback" not in cli.err
    issues = json.loads(cli.out)["issues"]
    assert _records(issues, root) == sorted(recs)
    _said_once(issues, cli.err)


# ---------------------------------------------------------------- Kineto thread ids, groups over 30 ranks

def _trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **top}))
    return path


def test_tid_true_is_no_thread_and_tid_one_point_zero_is_thread_one(tmp_path):
    """A JSON ``true`` among integer tids is not thread 1 (numpy would fold it into 1), counted; 1.0 is
    thread 1 (an integer written as a float), nothing said."""
    from rankscope.model.run import load_run
    from tests.helpers import x

    evs = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), x("outer", 10, 500), x("inner", 20, 100),
           x("other", 600, 50)]
    evs[2]["tid"] = 1.0  # inside "outer" on thread 1: nested under it
    evs[3]["tid"] = True
    run = load_run(_trace(tmp_path / "rank0.pt.trace.json", evs), jobs=1, cache_dir=tmp_path / "cache")
    ev = {e["name"]: e for e in run.table(0, "events", columns=["name", "tid", "depth"]).to_pylist()}
    assert ev["inner"]["tid"] == ev["outer"]["tid"] == 1 and ev["inner"]["depth"] == ev["outer"]["depth"] + 1
    assert ev["other"]["tid"] < 0 and ev["other"]["tid"] != 1
    recs = [(p.kind, p.n) for p in run.problems]
    assert recs == [(Kind.BAD_PID_TID.value, 1)], run.problems


def _group_trace(rank: int, world: int, pg_config: bool, stride: bool = True) -> dict[str, Any]:
    """One rank's record_param_comms events as torch writes them for NCCL (the fields of
    ../shared/data/hta/nccl_parser_config): "Process Group Ranks" of more than 30 members cut after 30."""
    from rankscope.synth.emit import format_list  # torch's format_list: first 30, then "..."
    from tests.helpers import x

    members = list(range(0, 2 * world, 2))[:world] if stride else list(range(world))
    evs = []
    for i in range(2):
        evs += [x(f"ProfilerStep#{i + 1}", i * 1000.0, 900, cat="user_annotation"),
                x("record_param_comms", i * 1000.0 + 100, 200, **{
                    "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1000, "Out msg nelems": 1000,
                    "Group size": world, "Process Group Name": "7", "Process Group Description": "dp",
                    "Process Group Ranks": format_list(members), "Global rank start": 0 if stride else -1,
                    "Global rank stride": 2 if stride else -1, "Seq": i + 1}),
                x("nccl:all_reduce", i * 1000.0 + 110, 180)]
    dist: dict[str, Any] = {"backend": "nccl", "rank": rank, "world_size": 2 * world}
    if pg_config:
        dist["pg_config"] = [{"pg_name": "7", "pg_desc": "dp", "pg_size": world, "ranks": members}]
    return {"schemaVersion": 1, "distributedInfo": dist, "traceEvents": evs}


@pytest.mark.parametrize("pg_config,stride,whole", [(True, True, True), (True, False, True), (False, True, True),
                                                     (False, False, False)],
                         ids=["pg_config", "pg_config-not-strided", "start-stride", "neither"])
def test_group_of_64_ranks_has_its_64_members(tmp_path, pg_config, stride, whole):
    """Kineto writes "Process Group Ranks" of a 64-rank group as its first 30 and "...": the members come from
    distributedInfo.pg_config by the group's name, else from NCCL's "Global rank start" / "Global rank stride"
    with "Group size"; with neither, the 30 listed are kept and the cut is said, counted."""
    from rankscope.model.run import load_run

    doc = _group_trace(0, 64, pg_config, stride)
    assert doc["traceEvents"][1]["args"]["Process Group Ranks"].endswith(", 58, ...]" if stride else ", 29, ...]")
    run = load_run(_trace(tmp_path / "rank0.pt.trace.json", doc["traceEvents"], distributedInfo=doc["distributedInfo"]),
                   jobs=1, cache_dir=tmp_path / "cache")
    got = run.table(0, "collectives", columns=["pg_name", "pg_ranks", "group_size"]).to_pylist()
    members = [int(r) for r in got[0]["pg_ranks"].split(",")]
    want = list(range(0, 128, 2)) if stride else list(range(64))
    assert len(got) == 2 and members == (want if whole else want[:30]) and got[0]["group_size"] == 64
    assert [(p.kind, p.n) for p in run.problems] == ([] if whole else [(Kind.GROUP_CUT.value, 2)]), run.problems


def test_synthetic_64_rank_run_names_whole_groups(tmp_path):
    """``rankscope synth --ranks 64``: the world group reads as ranks 0-63 (it read "0-29"), the data-parallel
    group of 32 as its 32 members; the communication matrix spreads the world's all-reduce over 63 peers."""
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from rankscope.render.declare import cell
    from rankscope.synth import generate

    root = generate(tmp_path / "s64", ranks=64, steps=2, ops_per_step=10, seed=3)
    run = load_run(root, jobs=2)
    assert not run.problems
    groups = {g["pg_name"]: g["pg_ranks"] for g in
              run.table(5, "collectives", columns=["pg_name", "pg_ranks"]).to_pylist()}
    assert cell(groups["0"], "group") == "0-63"
    assert max(len(v.split(",")) for v in groups.values()) == 64 and sorted(len(v.split(",")) for v in
                                                                         groups.values())[-2] == 32
    pgs = run_all(run, ["collectives", "comm_matrix"])["comm_matrix"].tables["process_groups"].to_pylist()
    assert {p["size"] for p in pgs} >= {64, 32}
    peers = {}
    for r in run_all(run, ["collectives", "comm_matrix"])["comm_matrix"].tables["matrix"].to_pylist():
        if r["pg_name"] == "0":
            peers.setdefault(r["src"], set()).add(r["dst"])
    assert peers and all(len(p) == 63 for p in peers.values())
