"""A gloo send waits for its receiver, and the critical path says so (issue 25), on a real 2-rank job
(tests/e2e/p2p_wait_job.py): rank 0 sends and waits, rank 1 works 60 ms before it receives.

The oracle is the job's own perf_counter timers: gloo completes a send only once the receiver posted its receive
(measured here, not assumed: the first test fails if a gloo build ever returns from the wait at once). The critical
path must then hold rank 1's late work, not rank 0's wait: until 2026-12-05 a host send was joined as eager (its end
waiting for nothing of its receiver's), and a stage that waited in its send looked busy (bench/RESULTS.md, "gloo
sends wait for their receiver").
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.e2e.test_edges_jobs import _torchrun

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    return _torchrun("p2p_wait_job.py", 2, tmp_path_factory.mktemp("p2p") / "run")


def _own(run: Path, rank: int, what: str = "captured_ms") -> list:
    return json.loads((run / f"job-{rank}.json").read_text())[what]


def test_gloo_send_waits_until_its_receiver_posts(job):
    """Causality on one clock: each send's wait returned after the receiver was about to post its receive."""
    returned, posting = _own(job, 0, "monotonic_ns"), _own(job, 1, "monotonic_ns")
    assert len(returned) == len(posting) == 3
    for done, post in zip(returned, posting):
        assert done >= post, (done, post)


def test_the_critical_path_holds_the_late_receiver_not_the_waiting_sender(job):
    run = load_run(job, jobs=1, cache_dir=job.parent / "cache")
    cp = run_all(run, names=["critical_path"])["critical_path"]
    assert not cp.skipped, cp.summary
    seg = pl.from_arrow(cp.tables["segments"]).filter(~pl.col("kind").is_in(["p2p", "collective"]))
    late = min(_own(job, 1))
    steps = sorted(set(seg["step"].to_list()))
    assert len(steps) >= 2, steps
    for step in steps:
        mine = seg.filter(pl.col("step") == step).group_by("rank").agg(pl.col("dur").sum())
        own = {int(r): d / 1e6 for r, d in mine.iter_rows()}
        assert own.get(1, 0.0) >= 0.7 * late, (step, own, late)  # rank 1's late work is on the path
        assert own.get(0, 0.0) <= 0.25 * late, (step, own, late)  # rank 0's wait in its send is not its own time
