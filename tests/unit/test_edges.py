"""Edges between ranks on hand-made gloo traces shaped like torch 2.13's (checked on real traces of
tests/e2e/*_job.py): which names are communication, send / receive pairs per (sender, receiver),
collectives whose group the trace does not name, all_to_all split sizes in the matrix, ``run_edges``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rankscope.analysis.comm.collectives import match_collectives
from rankscope.analysis.comm.edges import run_edges, summary
from rankscope.analysis.comm.p2p import p2p_pairs, pair_in_order
from rankscope.analysis.registry import run_all
from rankscope.model.comm_issue import is_comm_name
from rankscope.model.run import load_run
from tests.helpers import x

DIMS = {"Input Dims": [[4, 64]], "Input type": ["float"]}  # 4 x 64 floats = 1024 bytes


def _write(path: Path, rank: int, events: list[dict[str, Any]], groups: list[list[int]]) -> None:
    cfg = [{"pg_name": str(i), "pg_desc": "default_pg" if i == 0 else "undefined", "ranks": g}
           for i, g in enumerate(groups) if rank in g]
    doc = {"schemaVersion": 1, "traceEvents": [x("ProfilerStep#1", 0, 100_000, "user_annotation"), *events],
           "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": len(groups[0]), "pg_config": cfg}}
    path.write_text(json.dumps(doc))


def _p2p(op: str, peer: int, t: float, wait: float = 3_000) -> list[dict[str, Any]]:
    """What torch 2.13 writes for one dist.isend / irecv on gloo: the c10d op with the peer (its rank in the
    group) in "Concrete Inputs", and the gloo span created at its end that lasts until wait() returns
    (so it overlaps the calls that follow)."""
    c10d = "c10d::send" if op == "send" else "c10d::recv_"
    return [x(c10d, t, 30, **{"Concrete Inputs": ["", "", str(peer), "0"], "Input Dims": [[[4, 64]], [], [], []],
                              "Input type": ["TensorList", "", "Scalar", "Scalar"]}),
            x(f"gloo:{op}", t + 25, wait, "user_annotation", **DIMS)]


def _pipeline(tmp: Path, stages: int = 4, micro: int = 10) -> Path:
    """A GPipe-like schedule: forward activations 0 -> 1 -> ... and gradients back, ``micro`` each way."""
    for r in range(stages):
        ev: list[dict[str, Any]] = []
        for k in range(micro):
            t = 1_000 + 100 * k + 40 * r
            if r > 0:
                ev += _p2p("recv", r - 1, t)
            if r < stages - 1:
                ev += _p2p("send", r + 1, t + 50)
        for k in range(micro):
            t = 20_000 + 100 * k + 40 * (stages - r)
            if r < stages - 1:
                ev += _p2p("recv", r + 1, t)
            if r > 0:
                ev += _p2p("send", r - 1, t + 50)
        ev += [x("gloo:all_reduce", 40_000, 500, "user_annotation", tid=7, **DIMS)]
        _write(tmp / f"r{r}.json", r, ev, [list(range(stages))])
    return tmp


@pytest.mark.parametrize("name,comm", [
    ("gloo:all_reduce", True), ("c10d::send", True), ("record_param_comms", True), ("nccl:all_reduce", True),
    ("_c10d_functional::wait_tensor", True), ("_c10d_functional::all_reduce", True),
    ("FSDP::all_gather (0)", True), ("FSDP::all_gather_copy_out (3)", True), ("FSDP::post_backward_reduce (1)", True),
    ("FSDP::post_backward_rs_wait (1)", True), ("FSDP::backward_prefetch for 2", True),
    ("fsdp::all_gather_copy_in", False), ("FSDP::pre_forward (0)", False), ("FSDP::post_forward (0)", False),
    ("aten::mm", False), ("fsdp::split_with_sizes_copy", False), ("Forward 0", False)])
def test_which_names_are_communication(name, comm):
    # FSDP2's custom ops (fsdp::, lower case) are copies; its capitalised spans around a collective are waits
    assert is_comm_name(name) is comm


def test_every_send_and_receive_is_counted_and_none_is_a_group_collective(tmp_path):
    run = load_run(_pipeline(tmp_path), jobs=1)
    per_rank = {r: pl.from_arrow(run.table(r, "collectives")).group_by("op").len().sort("op").rows()
                for r in run.rank_ids}
    assert per_rank[0] == [("all_reduce", 1), ("recv", 10), ("send", 10)]
    assert per_rank[1] == per_rank[2] == [("all_reduce", 1), ("recv", 20), ("send", 20)]
    m = match_collectives(run).to_pylist()
    assert {r["op"] for r in m} == {"all_reduce"} and len(m) == 4
    res = run_all(run, names=["collectives"])["collectives"]
    assert res.findings == []  # no "fewer collectives", no "different ops" from pipeline traffic
    pairs = pl.from_arrow(res.tables["p2p"])
    got = pairs.group_by("sender", "receiver").agg(pl.len(), pl.col("paired").all()).sort("sender", "receiver").rows()
    assert got == [(0, 1, 10, True), (1, 0, 10, True), (1, 2, 10, True), (2, 1, 10, True), (2, 3, 10, True),
                   (3, 2, 10, True)]
    # in order: the k-th send from 1 to 2 is the k-th receive on 2 from 1
    p12 = pairs.filter((pl.col("sender") == 1) & (pl.col("receiver") == 2)).sort("k")
    assert (p12["recv_start"].diff().drop_nulls() > 0).all() and (p12["send_start"].diff().drop_nulls() > 0).all()
    assert (p12["bytes"] == 1024).all() and (p12["recv_bytes"] == 1024).all()


def test_unpaired_send_is_kept_and_a_cut_first_message_does_not_shift_the_rest(tmp_path):
    # rank 0's window started late: it holds the sends of messages 1 and 2 only, and a last send (of
    # another size) that nothing received; rank 1 holds the receives of messages 0, 1 and 2. Paired
    # without care, message 0's receive (ended at 1.5 ms) would belong to a send started at 2 ms.
    ev0 = _p2p("send", 1, 2_000, 400) + _p2p("send", 1, 3_000, 400)
    ev0 += [x("c10d::send", 4_000, 30, **{"Concrete Inputs": ["", "", "1", "0"]}),
            x("gloo:send", 4_025, 100, "user_annotation", **{"Input Dims": [[8]], "Input type": ["float"]})]
    ev1 = _p2p("recv", 0, 1_000, 500) + _p2p("recv", 0, 1_990, 500) + _p2p("recv", 0, 2_990, 500)
    _write(tmp_path / "r0.json", 0, ev0, [[0, 1]])
    _write(tmp_path / "r1.json", 1, ev1, [[0, 1]])
    p = p2p_pairs(load_run(tmp_path, jobs=1), offsets={0: 0, 1: 0}).sort("k")
    assert p["paired"].to_list() == [False, True, True, False]
    assert p["recv_start"].to_list()[:3] == [1_000_000, 1_990_000, 2_990_000] and p["recv_start"][3] == -1
    assert p["send_start"].to_list() == [-1, 2_000_000, 3_000_000, 4_000_000]
    assert p["bytes"].to_list() == [1024, 1024, 1024, 32]


def test_pair_in_order_is_the_rule_hang_uses():
    got = list(pair_in_order({(0, 1): ["a", "b"], (2, 1): ["c"]}, {(0, 1): ["A"], (1, 2): ["D"]}))
    assert got == [(0, 1, 0, "a", "A"), (0, 1, 1, "b", None), (1, 2, 0, None, "D"), (2, 1, 0, "c", None)]


def test_peer_of_a_subgroup_without_the_recorder_is_unknown_not_guessed(tmp_path):
    # rank 0 in the world [0..3] and in a pipeline group [0, 2]: "peer 1" is rank 1 or rank 2
    groups = [[0, 1, 2, 3], [0, 2], [1, 3]]
    _write(tmp_path / "r0.json", 0, _p2p("send", 1, 1_000), groups)
    _write(tmp_path / "r1.json", 1, [x("gloo:all_reduce", 5_000, 50, "user_annotation", tid=7, **DIMS)], groups)
    run = load_run(tmp_path, jobs=1)
    assert pl.from_arrow(run.table(0, "collectives"))["peer"].to_list() == [-1]


def test_subgroups_without_group_names_are_not_matched_across_the_world(tmp_path):
    groups = [[0, 1, 2, 3], [0, 1], [2, 3], [0, 2], [1, 3]]  # a 2x2 mesh
    for r in range(4):
        ev = [x("gloo:all_reduce", 1_000 * k + 10 * r, 200, "user_annotation", tid=7, **DIMS) for k in range(6)]
        _write(tmp_path / f"r{r}.json", r, ev, groups)
    run = load_run(tmp_path, jobs=1)
    assert match_collectives(run).num_rows == 0
    res = run_all(run, names=["collectives", "comm_matrix"])
    (f,) = res["collectives"].findings
    assert f.kind == "collectives_unattributed" and f.severity.value == "warning" and f.ranks == (0, 1, 2, 3)
    assert f.evidence["calls_per_rank"] == {0: 6, 1: 6, 2: 6, 3: 6} and "TORCH_FR_BUFFER_SIZE" in f.title
    assert res["comm_matrix"].skipped  # no traffic drawn between ranks that may never talk


def _a2a(t: float, out_split: list[int], in_split: list[int]) -> list[dict[str, Any]]:
    """dist.all_to_all_single on gloo: c10d::alltoall_base_ (output, input, pg, out splits, in splits, ...)
    on the training thread, the transfer as gloo:all_to_all on gloo's thread; rows of 16 floats."""
    return [x("c10d::alltoall_base_", t, 40, **{
        "Concrete Inputs": ["", "", "", str(out_split), str(in_split), "False", "-1"],
        "Input Dims": [[sum(out_split), 16], [sum(in_split), 16], [], [], [], [], []],
        "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"]}),
        x("gloo:all_to_all", t + 100, 300, "user_annotation", tid=9,
          **{"Input Dims": [[sum(in_split), 16]], "Input type": ["float"]})]


def test_uneven_all_to_all_is_drawn_as_it_happened(tmp_path):
    # every rank sends 2.5x the rows to rank 1 (its experts get 2.5x the tokens); split sizes as the trace has them
    send = {0: [10, 25, 10], 1: [10, 25, 10], 2: [10, 25, 10]}
    for r in range(3):
        recv = [send[s][r] for s in range(3)]
        _write(tmp_path / f"r{r}.json", r, _a2a(1_000 + 5 * r, recv, send[r]), [[0, 1, 2]])
    res = run_all(load_run(tmp_path, jobs=1), names=["collectives", "comm_matrix"])["comm_matrix"]
    m = pl.from_arrow(res.tables["matrix"]).filter(pl.col("op") == "all_to_all")
    into = {(s, d): b for s, d, b in m.select("src", "dst", "bytes").iter_rows()}
    assert into == {(0, 1): 25 * 64, (2, 1): 25 * 64, (0, 2): 10 * 64, (1, 0): 10 * 64, (1, 2): 10 * 64,
                    (2, 0): 10 * 64}
    assert m["exact"].all() and res.summary["exact_bytes_share"] == 1.0
    assert pl.from_arrow(res.tables["by_op"])["op"].to_list() == ["all_to_all"]


def test_run_edges_gives_instances_and_pairs_on_one_clock(tmp_path):
    e = run_edges(load_run(_pipeline(tmp_path), jobs=1))
    assert summary(e) == {"instances": 1, "matched_by": {"order": 1}, "p2p_paired": 60, "p2p_unpaired": 0}
    c = e.collectives
    assert c["rank"].to_list() == [0, 1, 2, 3] and c["complete"].all() and c["op"].unique().to_list() == ["all_reduce"]
    assert (c["end"] - c["start"] == 500_000).all()
    assert set(e.p2p.columns) >= {"sender", "receiver", "k", "send_start", "recv_end"}


def test_run_json_keeps_every_ranks_groups(tmp_path):
    """A rank knows only the groups it is in (pg_config); rank 0 writes run.json. The run read back lists
    the groups of every rank."""
    mesh = [[0, 1, 2, 3], [0, 2], [1, 3], [0, 1], [2, 3]]
    for r in range(4):
        (tmp_path / "ranks" / str(r)).mkdir(parents=True)
        _write(tmp_path / "ranks" / str(r) / "rank.pt.trace.json", r, [], mesh)
    (tmp_path / "run.json").write_text(json.dumps({"run_id": tmp_path.name, "world_size": 4, "process_groups": [
        {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3]}, {"name": "1", "ranks": [0, 2]},
        {"name": "3", "ranks": [0, 1]}]}))
    run = load_run(tmp_path, jobs=1)
    assert [(g["name"], g["ranks"]) for g in run.manifest["process_groups"]] == [
        ("0", "0-3"), ("1", "0,2"), ("2", "1,3"), ("3", "0-1"), ("4", "2-3")]


def test_import_rankscope_sizes_the_flight_recorder_ring_unless_told_not_to():
    import os
    import subprocess
    import sys

    probe = "import rankscope, os; print(os.environ.get('TORCH_FR_BUFFER_SIZE'))"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")}

    def out(**extra: str) -> str:
        return subprocess.run([sys.executable, "-c", probe], env={**env, **extra}, capture_output=True, text=True,
                              check=True).stdout.strip()
    assert out() == "2000"
    assert out(RANKSCOPE_FLIGHT_RECORDER="0") == "None"
    assert out(TORCH_FR_BUFFER_SIZE="0") == "0"  # the job's own setting wins


def test_nccl_record_param_comms_gives_peer_and_split_sizes(tmp_path):
    """NCCL traces nest c10d::X > record_param_comms > nccl:X on the calling thread; record_param_comms
    carries "Dst Rank" / "Src Rank" for p2p and "In split size" / "Out split size" for all_to_all (key names
    as torch 2.13's libtorch writes them; values as in HTA's nccl_parser_config trace: lists as strings)."""
    def call(op: str, t: float, **meta: Any) -> list[dict[str, Any]]:
        c10d = {"send": "c10d::send", "recv": "c10d::recv_", "all_to_all": "c10d::alltoall_base_"}[op]
        return [x(c10d, t, 50), x("record_param_comms", t + 1, 40, **{"Collective name": op, "dtype": "Float",
                                                                      "Process Group Name": "0",
                                                                      "Process Group Ranks": "[0, 1, 2]", **meta}),
                x(f"nccl:{op}", t + 2, 30, "user_annotation")]
    ev = call("send", 1_000, **{"Dst Rank": 2, "In msg nelems": 256, "Out msg nelems": 256})
    ev += call("recv", 2_000, **{"Src Rank": 1, "In msg nelems": 256, "Out msg nelems": 256})
    ev += call("all_to_all", 3_000, **{"In msg nelems": 48, "Out msg nelems": 64, "In split size": "[1, 3, 2]",
                                        "Out split size": "[2, 4, 2]"})
    doc = {"traceEvents": ev, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 3}}
    (tmp_path / "r0.json").write_text(json.dumps(doc))
    t = pl.from_arrow(load_run(tmp_path, jobs=1).table(0, "collectives")).sort("ts")
    assert t["op"].cast(pl.Utf8).to_list() == ["send", "recv", "all_to_all"]
    assert t["peer"].to_list() == [2, 1, -1]
    # 48 elements in 6 rows: 8 floats (32 bytes) a row sent; 64 in 8 rows received
    assert t["split_out"].cast(pl.Utf8).to_list()[2] == "32,96,64" and t["split_in"].cast(pl.Utf8).to_list()[2] == "64,128,64"
