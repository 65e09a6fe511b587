"""End-to-end: the real demo (torchrun, gloo, 2 ranks) through the CLI, in a temp directory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import one_line, straggler_note

pytestmark = pytest.mark.slow


def _demo(out: Path, *extra: str, steps: int = 6) -> tuple[str, Path]:
    cmd = [sys.executable, "-m", "rankscope.cli", "demo", "--ranks", "2", "--steps", str(steps), "--warmup", "2",
           "--out", str(out), "--run-id", "r", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, out / "r"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    # On this 2-vCPU VM one vCPU is sometimes 15-60 % slower than the other for seconds; a rank that
    # stays on it for the whole run really is slower, and the verdict rightly says so ("same operators
    # and shapes, slower", bench/RESULTS.md, stragglers), which a "healthy" assertion cannot allow.
    # --rotate-cpus gives both ranks the same mix of vCPUs (and runs that path of the demo for real);
    # 8 steps also keep the two-rank step-by-step rule out (a signed-rank p below 1/256 needs more).
    return _demo(tmp_path_factory.mktemp("healthy"), "--rotate-cpus", steps=8)


def test_demo_healthy_run_has_every_rank_and_step(healthy):
    stdout, run_dir = healthy
    run = load_run(run_dir, jobs=1)
    assert run.rank_ids == [0, 1] and run.missing == []
    for r in (0, 1):
        assert [s["step"] for s in run.table(r, "steps").to_pylist()] == list(range(2, 10))
    report = (run_dir / "report.html").read_text()
    assert "rank 0" in report and "rank 1" in report
    meta = json.loads((run_dir / "ranks" / "1" / "meta.json").read_text())
    assert meta["rank"] == 1 and meta["world_size"] == 2
    assert "report:" in stdout and "step time" in stdout


def test_demo_healthy_verdict_is_no_straggler(healthy):
    """No code-level cause is invented on a healthy run. Two ranks share this machine's two cores with
    gloo's threads (and, in CI, whatever else runs): a rank can be slower only because it waited for a
    CPU. Then the verdict must say so ("contention") with the run-queue wait that explains it. Read from
    the findings (structured); the terminal prints the verdict once, as the analysis words it."""
    stdout, run_dir = healthy
    print(stdout)  # shown by pytest on failure: the verdict and the per-rank table
    st = run_all(load_run(run_dir, jobs=1))["straggler"]
    for f in st.findings:
        assert f.kind == "likely_straggler" or f.evidence["cause"] == "contention", f.title
        if f.kind == "straggler":
            assert f.evidence["cpu_wait"]["share_of_excess"] >= 0.5
            straggler_note(f)  # the headline's grammar, whichever measure and cost it printed
    assert one_line(stdout).count(one_line(st.summary["verdict"])) == 1, stdout


def test_demo_records_cpu_time_and_wait_per_captured_step(healthy):
    _, run_dir = healthy
    for r in (0, 1):
        meta = json.loads((run_dir / "ranks" / str(r) / "meta.json").read_text())
        sched = meta["windows"][0]["sched"]
        assert sched["step"] == list(range(2, 10)) == meta["windows"][0]["steps"]
        assert all(c > 0 for c in sched["cpu_ns"])  # each step ran operators on this thread
        if sched["source"] == "schedstat":
            assert all(w >= 0 for w in sched["runq_wait_ns"])
        assert sched["intra_op_threads"] == 1  # the demo sets torch.set_num_threads(1)


def test_demo_breakdown_sums_to_step_time(healthy):
    _, run_dir = healthy
    bd = run_all(load_run(run_dir, jobs=1))["breakdown"].tables["breakdown"].to_pylist()
    assert len(bd) == 16
    for r in bd:
        parts = r["computing"] + r["comm_exposed"] + r["data_wait"] + r["free"]
        assert abs(parts - r["wall"]) <= 0.01 * r["wall"]


# Run-queue wait per step, beyond what the rank's own extra CPU time brings, that dwarfs the demo's injected
# slowdown (about 20 ms per step at --slowdown 1): only a starved host gives it. A fresh `make test` beside a
# second fresh suite and a helper's tests (2 cores, load 10-15) saw the compute straggler's rank 1 wait about
# 400 ms more per step than rank 0 (own time +1116 %), and the verdict said "contention"; two pytest workers
# alone made the other rank wait 15 ms per step over the slow one (the docstring of path_choice.starved).
STARVED_NS = 100_000_000


@pytest.mark.parametrize("kind", ["compute", "data", "comm", "host"])
def test_demo_slow_rank_named_with_cause(tmp_path, kind):
    stdout, run_dir = _demo(tmp_path, "--slow-rank", "1", "--slow-kind", kind)
    st = run_all(load_run(run_dir, jobs=1))["straggler"]
    found = [(f.ranks, f.evidence["cause"]) for f in st.findings]
    assert [r for r, _ in found] == [(1,)], st.summary["verdict"]
    straggler_note(st.findings[0])  # the headline's grammar, whichever measure and cost it printed
    assert one_line(stdout).count(one_line(st.summary["verdict"])) == 1, stdout  # printed once, as analyzed
    if found == [((1,), "contention")]:  # right rank; the host starved it far beyond the injected work
        assert st.findings[0].evidence["cpu_wait"]["unexplained_ns"] >= STARVED_NS, st.summary["verdict"]
        return
    assert found == [((1,), kind)], st.summary["verdict"]
    # the slow rank's breakdown shows where its extra time went
    excess = st.findings[0].evidence["excess_ns"]
    component = {"compute": "compute", "comm": "compute", "data": "data", "host": "host"}[kind]
    assert excess[component] == max(excess.values())
