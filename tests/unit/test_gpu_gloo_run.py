"""A real 2-rank DDP run on a CUDA GPU (tests/fixtures/runs/gpu_gloo_data, its README says how it was recorded):
Kineto's own CUDA traces, read as they were written. Rank 1's Dataset sleeps 64 ms per batch.

Two things only real CUDA traces showed (the CPU runs and the synthetic NCCL clusters have neither):
- Kineto writes each ``ProfilerStep#N`` twice, the second a ``gpu_user_annotation`` on the GPU's stream: it was
  read as a second step of the same number, and the critical path crashed (IndexError) on every such run;
- the GPU stream idled 65 ms between the last backward kernel and the gradient copies launched after the
  all-reduce; HTA's rules link those two by a kernel-kernel edge, which weighed the idle time as rank 0's own, so
  the what-if gave rank 1 a cost of 5 ms instead of about its 64 ms sleep, and the verdict named nobody."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "gpu_gloo_data"
SLEEP_MS = 64.0  # rankscope/demo/train.py: delay_s = 0.064 * slowdown, once per batch; slowdown 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    src = tmp_path_factory.mktemp("gpu") / "run"  # a copy: the analysis writes its cache beside the run
    shutil.copytree(FIXTURE, src)
    return load_run(src, jobs=1)


def test_each_step_is_read_once_from_its_host_span(run):
    from rankscope.analysis.rankdata import RankData

    for r in run.rank_ids:
        st = RankData(run, r).table("steps")
        assert st.column("step").to_pylist() == [2, 3, 4, 5, 6, 7], r
        ts, end = np.asarray(st.column("ts")), np.asarray(st.column("end"))
        assert (end > ts).all() and (ts[1:] >= end[:-1]).all()
        assert ((end - ts) > 0.8 * SLEEP_MS * 1e6).all()  # every step holds rank 1's sleep (rank 0 waits for it)


def test_the_sleeping_rank_bounds_the_step_by_about_its_sleep(run):
    res = run_all(run)
    b = res["critical_path"].summary["bounding"]
    assert b["rank"] == 1 and b["steps"] == b["of_steps"] == 6
    assert 0.8 * SLEEP_MS <= b["cost_ms"] <= 1.2 * SLEEP_MS, b
    wi = {w["rank"]: w for w in res["critical_path"].summary["what_if"]}
    assert wi[1]["step_ms"] - wi[1]["step_ms_if_median"] >= 0.8 * SLEEP_MS
    assert wi[0]["step_ms"] - wi[0]["step_ms_if_median"] < 0.1 * SLEEP_MS  # the waiting rank costs nothing
    st = res["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "data")], st.summary["verdict"]


def test_a_host_loop_is_named_from_the_path_where_the_categories_cannot_see_it(tmp_path):
    """tests/fixtures/runs/gpu_gloo_host: rank 1 spins 20 ms of Python per step. Its own time components grew by
    at most 2.4 ms over rank 0's (whose wait for the all-reduce is untraced host time), so the components said
    "data" (its data loading is 2.4 ms longer). The path holds 21.6 ms of rank 1's host time between operators
    and costs 20.7 ms: the cause is read off the path."""
    src = tmp_path / "run"
    shutil.copytree(FIXTURE.parent / "gpu_gloo_host", src)
    res = run_all(load_run(src, jobs=1))
    b = res["critical_path"].summary["bounding"]
    assert b["rank"] == 1 and b["steps"] >= 5 and 15.0 <= b["cost_ms"] <= 30.0, b
    st = res["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "host")], st.summary["verdict"]
    ev = st.findings[0].evidence
    assert ev["cause_from"] == "critical path"
    assert max(ev["excess_ns"].values()) < 0.5 * b["cost_ms"] * 1e6  # the components alone cannot hold it


def test_the_path_gives_the_cause_only_where_the_components_cannot():
    from rankscope.analysis.diagnosis.cause import from_path

    path = {"data": 9.2e6, "compute": 0.7e6, "host": 21.6e6}  # gpu_gloo_host, rank 1, per step
    assert from_path(path, 20.7e6, {"compute": 0.0, "data": 2.39e6, "host": -0.38e6}) == "host"
    # a component that grew by half the cost stands (the data sleep of gpu_gloo_data: +64.6 ms, cost 64.4 ms)
    assert from_path({"data": 71.6e6, "compute": 1.8e6, "host": 0.4e6}, 64.4e6,
                     {"compute": 0.0, "data": 64.56e6, "host": -64.48e6}) is None
    assert from_path(path, 50e6, {"data": 1e6}) is None  # no class holds half the cost
    # a class that grew by a quarter of the cost and is held on the path, before the path's largest class
    # (bench/workloads.py seed 3004, ppdp-data at 4 ranks, run 8: rank 3's data loading, per step)
    ppdp = {"data": 14.68e6, "compute": 82.28e6, "host": 0.0}
    assert from_path(ppdp, 22.79e6, {"compute": -5.26e6, "data": 11.17e6, "host": -3.63e6}) == "data"
    assert from_path(ppdp, 22.79e6, {"compute": -5.26e6, "data": 5.0e6, "host": -3.63e6}) == "compute"  # 22 %
    assert from_path({}, 20e6, {"data": 1e6}) is None and from_path(path, 0.0, {"data": 1e6}) is None


@pytest.mark.parametrize("fixture,waiting,cause", [("gpu_gloo_data", 0, "data"), ("gpu_gloo_host", 0, "host")])
def test_gpu_idle_gaps_say_who_waited_for_whom(tmp_path, fixture, waiting, cause):
    """The GPU idle gaps of both runs, cause by cause: the straggler's GPU waits for its own data loading or host
    loop; the other rank's waits for the all-reduce's peer, rank 1 (the stream ran dry while gloo's threads waited
    for it and DDP's gradient copies were launched only after). Before: "waiting for the host to launch" on both
    ranks of the host run and on rank 0 of the data run."""
    import polars as pl

    from rankscope.analysis.base import frame

    src = tmp_path / "run"
    shutil.copytree(FIXTURE.parent / fixture, src)
    res = run_all(load_run(src, jobs=1), ["gpu_gaps"])["gpu_gaps"]
    ps = frame(res.tables["per_step"])
    main = {r: max(("host", "sync", "collective", "data", "other"), key=lambda c: float(ps.filter(pl.col("rank") == r)[c].sum()))
            for r in (0, 1)}
    assert main == {waiting: "collective", 1 - waiting: cause}, main
    gaps = frame(res.tables["gaps"]).filter((pl.col("rank") == waiting) & (pl.col("cause") == "collective"))
    big = gaps.filter(pl.col("dur") > 10e6)
    assert big.height and (big["peer"] == 1).all() and big["collective"].str.starts_with("all_reduce #").all()
