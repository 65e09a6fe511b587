"""End-to-end diagnosis on realistic workloads (issue 12): real torchrun jobs, gloo, 2 ranks, profiled
with ``rankscope.profile``'s defaults (rankscope.demo.lm).

- a transformer LM whose rank 1 gets sequences 1.6x longer (variable lengths, padded per batch): the
  verdict is input imbalance, with the operator and the two input shapes in the headline;
- a data loader whose rank 1 decodes 1.6x more bytes per sample (zlib + augmentation in the dataset,
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

pytestmark = pytest.mark.slow


def _job(out: Path, family: str, slow_rank: int, factor: float = 1.6, steps: int = 8) -> Path:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--module",
           "rankscope.demo.lm", "--run-dir", str(out), "--family", family, "--slow-rank", str(slow_rank),
           "--imbalance", str(factor), "--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**__import__("os").environ,
                                                                                 "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_lm_with_longer_sequences_on_one_rank_is_input_imbalance(tmp_path):
    """Structured fields first (rank, cause, the input work and its example shapes); then the headline, the
    product, against every variant the code prints for it (own time, or own time excluding CPU wait when
    the rank was found with run-queue wait taken out, as on a loaded machine; with or without the cost)."""
    run = load_run(_job(tmp_path / "lm", "lm", 1), jobs=1)
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
    run = load_run(_job(tmp_path / "dec", "decode", 1), jobs=1)
    res = run_all(run)
    st = res["straggler"]
    assert [(f.ranks, f.evidence.get("cause")) for f in st.findings] == [((1,), "data")], st.summary["verdict"]
    bd = [r for r in res["breakdown"].tables["breakdown"].to_pylist() if r["rank"] == 1 and r["complete"]]
    # the decode's operators run inside DataLoader's span: data wait, not compute
    assert sum(r["data_wait"] for r in bd) > 2 * sum(r["computing"] for r in bd)
