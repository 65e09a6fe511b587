"""Collectives matched across ranks, on tiny hand-made gloo traces with hand-computed answers."""
import pytest

from rankscope.analysis.comm.collectives import MATCH_COLUMNS, match_collectives
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x

AR = {"Input Dims": [[1000]], "Input type": ["float"]}  # 1000 floats = 4000 bytes


def _rank(starts_durs, world=2, rank=0):
    ev = [x("ProfilerStep#1", 0, 300, "user_annotation")]
    ev += [x("gloo:all_reduce", s, d, "user_annotation", tid=2, **AR) for s, d in starts_durs]
    return ev


def _run(tmp_path, per_rank, world=None):
    world = world or len(per_rank)
    for r, sd in per_rank.items():
        write_trace(tmp_path / f"r{r}.json", _rank(sd), rank=r, world=world)
    return load_run(tmp_path, jobs=1, allow_missing_ranks=True)


def test_match_rows_and_contract_columns(tmp_path):
    run = _run(tmp_path, {0: [(40, 40), (200, 20)], 1: [(50, 30), (205, 10)]})
    t = match_collectives(run)
    assert t.column_names == MATCH_COLUMNS
    rows = t.to_pylist()
    assert [(r["instance"], r["rank"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert rows[1]["ts"] == 50_000 and rows[1]["end"] == 80_000 and rows[1]["dur"] == 30_000
    assert rows[0]["dev_ts"] == -1 and rows[0]["dev_end"] == -1 and rows[0]["bytes"] == 4000
    assert rows[0]["pg_ranks"] == "0,1" and rows[0]["op"] == "all_reduce"


def test_offsets_are_subtracted(tmp_path):
    run = _run(tmp_path, {0: [(40, 40)], 1: [(50, 30)]})
    rows = match_collectives(run, offsets={1: 10_000}).to_pylist()
    assert rows[1]["ts"] == 40_000 and rows[1]["end"] == 70_000 and rows[0]["ts"] == 40_000


def test_instances_skew_wait_transfer_bandwidth(tmp_path):
    run = _run(tmp_path, {0: [(40, 40)], 1: [(50, 30)]})
    res = run_all(run, names=["collectives"])["collectives"]
    inst = res.tables["instances"].to_pylist()
    assert len(inst) == 1
    i = inst[0]
    # rank 1 arrives 10 µs after rank 0; rank 0 waits 40 - 30 = 10 µs; transfer = 30 µs
    assert (i["arrival_skew"], i["max_wait"], i["transfer"], i["last_rank"]) == (10_000, 10_000, 30_000, 1)
    assert i["algbw_gbps"] == pytest.approx(4000 / 30_000)
    assert i["busbw_gbps"] == pytest.approx(4000 / 30_000 * 2 * (2 - 1) / 2)
    per = {r["rank"]: r["wait"] for r in res.tables["per_rank"].to_pylist()}
    assert per == {0: 10_000, 1: 0}
    assert res.findings == []


def test_missing_call_on_one_rank_is_a_finding_not_an_error(tmp_path):
    run = _run(tmp_path, {0: [(40, 40), (200, 20), (250, 10)], 1: [(50, 30), (205, 10)], 2: [(45, 35)]})
    res = run_all(run, names=["collectives"])["collectives"]
    assert res.skipped is None
    (f,) = [f for f in res.findings if f.kind == "collective_count_mismatch"]
    assert f.ranks == (1, 2) and f.evidence["counts"] == {0: 3, 1: 2, 2: 1}
    n = {r["instance"]: r["n_ranks"] for r in res.tables["instances"].to_pylist()}
    assert n == {0: 3, 1: 2, 2: 1}


def test_busbw_factors_per_op():
    import polars as pl

    from rankscope.analysis.comm.collectives import bus_factor

    df = pl.DataFrame({"op": ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send"],
                       "n": [8] * 6})
    got = df.select(bus_factor(pl.col("op"), pl.col("n"))).to_series().to_list()
    assert got == pytest.approx([1.75, 0.875, 0.875, 0.875, 1.0, 1.0])


def test_comm_matrix_splits_bus_bytes_over_peers(tmp_path):
    run = _run(tmp_path, {0: [(40, 40)], 1: [(50, 30)]})
    res = run_all(run, names=["collectives", "comm_matrix"])["comm_matrix"]
    m = {(r["src"], r["dst"]): r for r in res.tables["matrix"].to_pylist()}
    assert set(m) == {(0, 1), (1, 0)}
    # all_reduce over 2 ranks: bus bytes = 4000 × 2(n-1)/n = 4000, one peer; transfer 30 µs on both ranks
    assert m[(0, 1)]["bytes"] == 4000 and m[(0, 1)]["time_ns"] == 30_000
    pg = res.tables["process_groups"].to_pylist()
    assert pg[0]["type"] == "collective" and pg[0]["size"] == 2 and pg[0]["desc"] in ("default_pg", "")


def _recorded(tmp_path, per_rank):
    """gloo traces with the recorder's window file beside each (what rankscope.profile keeps): ``per_rank``
    maps a rank to the sequence numbers of the all_reduces in its window, one every 100 µs by number."""
    import gzip
    import json

    for r, seqs in per_rank.items():
        d = tmp_path / "ranks" / str(r)
        write_trace(d / "window-0001.pt.trace.json", [x("gloo:all_reduce", 100 * s, 50, "user_annotation", tid=2, **AR)
                                                      for s in seqs], rank=r, world=len(per_rank))
        doc = {"groups": {"0": {"ranks": str(list(per_rank))}},
               "entries": [["0", s, 0, "gloo:all_reduce", 100_000 * s - 20_000, "[[1000]]"] for s in seqs]}
        (d / "window-0001.collectives.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return load_run(tmp_path, jobs=1)


def test_a_collective_cut_by_the_window_edge_is_no_count_mismatch(tmp_path):
    run = _recorded(tmp_path / "edge", {0: [1, 2, 3, 4, 5], 1: [2, 3, 4, 5, 6]})
    res = run_all(run, names=["collectives"])["collectives"]
    assert res.findings == [] and res.summary["matched_by"] == {"seq": 6}
    n = {r["instance"]: r["n_ranks"] for r in res.tables["instances"].to_pylist()}
    assert n == {1: 1, 2: 2, 3: 2, 4: 2, 5: 2, 6: 1}
    gap = run_all(_recorded(tmp_path / "gap", {0: [1, 2, 3, 4, 5], 1: [1, 2, 4, 5]}), names=["collectives"])
    (f,) = gap["collectives"].findings
    assert f.kind == "collective_count_mismatch" and f.ranks == (1,) and f.evidence["counts"] == {0: 5, 1: 4}
