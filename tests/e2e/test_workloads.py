"""End-to-end diagnosis on realistic workloads (issue 12): real torchrun jobs, gloo, 2 ranks, profiled
with ``rankscope.profile``'s defaults (rankscope.demo.lm).

- a transformer LM whose rank 1 gets sequences 1.6x longer (variable lengths, padded per batch): the
  verdict is input imbalance, with the operator and the two input shapes in the headline;
- a data loader whose rank 1 decodes 2.5x more bytes per sample (zlib + augmentation in the dataset,
  real work inside DataLoader's span): the verdict is data loading, not compute.
Healthy runs of both families are measured in bench/stragglers.py (a timing rule cannot be asserted
on one healthy run of a shared 2-core VM without allowing flakes).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import straggler_note
from tests.procs import why_failed

pytestmark = pytest.mark.slow


def _job(out: Path, family: str, slow_rank: int, factor: float = 1.6, steps: int = 8) -> Path:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--module",
           "rankscope.demo.lm", "--run-dir", str(out), "--family", family, "--slow-rank", str(slow_rank),
           "--imbalance", str(factor), "--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**__import__("os").environ,
                                                                                 "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _truth(out: Path, run) -> dict:
    """The job's RUN/truth.json, after checking that its timer rows are the steps the trace recorded and that their
    wall times are the trace's ProfilerStep spans (two clocks on one interval). ProfilerStep#i opens inside
    prof.step() before the job's timer starts and closes in the next call after it stops: the span holds the timed
    interval and exceeds it by rankscope's own step work (about 0.2 ms here; a preempted step by up to 16 ms, seen
    on a loaded host: so the best step, not each, is compared, against 2 ms or 5 % of the median step)."""
    import polars as pl

    truth = json.loads((out / "truth.json").read_text())
    assert truth["world"] == len(run.rank_ids)
    for rank in run.rank_ids:
        steps = pl.from_arrow(run.table(rank, "steps")).sort("step")
        rows = [x for x in truth["timers"][str(rank)] if x["captured"]]
        assert steps["step"].to_list() == [x["step"] for x in rows] == truth["captured_steps"]
        diffs = [(e - b) / 1e6 - x["step_ms"] for b, e, x in zip(steps["ts"], steps["end"], rows)]
        # the bound scales with the step: a loaded host stretches both (a fresh clone's CI at d0f4a9b, beside a
        # bench re-analysis: 2.04-4.59 ms over a 1F1B job's three steps)
        bound = max(2.0, 0.05 * sorted(x["step_ms"] for x in rows)[len(rows) // 2])
        assert min(diffs) > -0.5 and min(diffs) < bound, (diffs, bound)
    return truth


def test_lm_with_longer_sequences_on_one_rank_is_input_imbalance(tmp_path):
    """Structured fields first (rank, cause, the input work and its example shapes); then the headline, the
    product, against every variant the code prints for it (own time, or own time excluding CPU wait when
    the rank was found with run-queue wait taken out, as on a loaded machine; with or without the cost)."""
    run = load_run(_job(tmp_path / "lm", "lm", 1), jobs=1)
    truth = _truth(tmp_path / "lm", run)
    assert (truth["slow_rank"], truth["cause"], truth["summary"]["extra_from"]) == (1, "imbalance", "work_cpu")
    # the longer sequences' forward + backward + optimizer CPU time (waits for the peer excluded)
    assert truth["summary"]["median_ms"]["work_cpu"]["1"] > truth["summary"]["median_ms"]["work_cpu"]["0"]
    st = run_all(run)["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "imbalance")], st.summary["verdict"]
    f = st.findings[0]
    work = f.evidence["work"]
    assert work["shapes_recorded"]  # rankscope.profile records shapes by default
    assert 1.3 < work["work_ratio"] < 1.9  # lengths 1.6x (padding to the batch's longest blurs it)
    # one operator's input shapes on rank 1 vs the others' (JSON lists)
    here, there = json.loads(work["example"]), json.loads(work["example_others"])
    assert work["example_op"].startswith("aten::")
    assert len(here) == len(there) and sum(a != b for a, b in zip(here, there)) == 1 and here > there
    assert f.evidence["time_lost"]["lost_per_step_ns"] > 0  # the longer sequences cost every step time
    note = straggler_note(f)  # the headline's measure and cost, whichever variant was printed
    assert note == (f", +{work['work_ratio'] - 1:.0%} input work per step ({work['example_op']} inputs "
                    f"{work['example']} vs {work['example_others']})"), f.title


def test_slow_decoding_on_one_rank_is_data_loading(tmp_path):
    """Rank 1 decodes 2.5x the bytes (the top of bench/workloads.py's decode-slow range). At 1.6x, with a 4-rank
    pipeline job of the other pytest worker beside it (6 busy processes on 2 cores), rank 0's own decoding was
    as slow as rank 1's in 4 of 8 steps (run-queue wait) and the critical path saw the two ranks take turns:
    "no straggler" (since then a path bounded by a rank's run-queue wait no longer vetoes the rules: straggler.
    starved). The question here is the cause (data loading, not compute), not the smallest imbalance a loaded
    machine still shows."""
    run = load_run(_job(tmp_path / "dec", "decode", 1, factor=2.5), jobs=1)
    truth = _truth(tmp_path / "dec", run)
    assert (truth["slow_rank"], truth["cause"], truth["summary"]["extra_from"]) == (1, "data", "data_cpu")
    assert truth["summary"]["median_ms"]["data_cpu"]["1"] > truth["summary"]["median_ms"]["data_cpu"]["0"]
    res = run_all(run)
    st = res["straggler"]
    assert [(f.ranks, f.evidence.get("cause")) for f in st.findings] == [((1,), "data")], st.summary["verdict"]
    bd = [r for r in res["breakdown"].tables["breakdown"].to_pylist() if r["rank"] == 1 and r["complete"]]
    # the decode's operators run inside DataLoader's span: data wait, not compute
    assert sum(r["data_wait"] for r in bd) > 2 * sum(r["computing"] for r in bd)


# ---- the benchmark's jobs of other parallelisms (rankscope.demo.workloads, bench/workloads.py) ----

def _workload(out: Path, job: str, kind: str, *extra: str) -> tuple[Path, dict]:
    """One job at 2 ranks, rank 1 slow, with the shortest settings (2 unprofiled steps, 3 recorded)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--module",
           f"rankscope.demo.workloads.{job}", "--run-dir", str(out), "--straggler", kind, "--slow-rank", "1",
           "--steps", "3", "--calib", "2", "--tune", "1", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,  # a hang bound only
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"})
    assert proc.returncode == 0, why_failed(proc.stderr)
    return out, json.loads((out / "truth.json").read_text())


@pytest.mark.parametrize("job,kind,extra", [("fsdp", "data", ()), ("moe", "skew", ()), ("tp_fsdp", "host", ()),
                                            ("pipeline", "stage", ("--schedule", "1f1b"))])
def test_each_workload_job_writes_a_run_and_its_truth(tmp_path, job, kind, extra):
    """Each job of bench/workloads.py's new families starts, writes a rankscope run of both ranks, and its
    truth: the slow rank and cause asked for; per rank, timer rows for the steps the trace recorded, whose
    wall times are the trace's ProfilerStep spans (two clocks on one interval); and the straggler's own
    measure on rank 1 only (its injected work, its experts' tokens, its stage's layers)."""
    from rankscope.demo.workloads.common import CAUSES

    run, truth = _workload(tmp_path / job, job, kind, *extra)
    assert (truth["slow_rank"], truth["cause"], truth["world"]) == (1, CAUSES[kind], 2)
    r = load_run(run, jobs=1)
    assert r.rank_ids == [0, 1]
    assert _truth(run, r)["captured_steps"] == [1, 2, 3]
    med = truth["summary"]["median_ms"]
    if kind in ("data", "host"):
        assert med["extra"]["1"] > 0 and med["extra"]["0"] < 0.1 * med["extra"]["1"]
    elif kind == "skew":
        assert med["expert_tokens"]["1"] > 1.5 * med["expert_tokens"]["0"]  # a 2.5x prior on expert 1
    else:
        assert truth["pipeline"]["layers"] == [4, 8] and truth["pipeline"]["bottleneck_stage"] == 1
        assert med["work_cpu"]["1"] > med["work_cpu"]["0"]  # its layers' CPU time: waits for peers excluded
