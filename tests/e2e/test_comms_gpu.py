"""The timed collective recorder on a real GPU with NCCL, against torch's Flight Recorder on the same job.

Needs CUDA and NCCL: skipped on this project's CPU machines (the NCCL path is unit-tested there with
stand-in events, tests/unit/test_timed_pg.py); run it in a session that has a GPU:
``.venv/bin/python -m pytest tests/e2e/test_comms_gpu.py``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "tests/e2e/gpu_comms_job.py")


def _cuda() -> bool:
    try:
        import torch
        import torch.distributed as dist

        return bool(torch.cuda.is_available() and dist.is_nccl_available())
    except Exception:  # noqa: BLE001
        return False


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU with NCCL (none here)")]


def _run(out: Path, mode: str) -> dict:
    p = subprocess.run([sys.executable, JOB, str(out), mode], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return json.loads((out / f"{mode}.json").read_text())


def test_nccl_collectives_timed_by_cuda_events_agree_with_flight_recorder(tmp_path: Path) -> None:
    timed, fr = _run(tmp_path, "timed"), _run(tmp_path, "fr")
    assert timed["value"] == fr["value"] == 1.0
    ours = [(e["op"], e["seq"]) for e in timed["entries"]]
    theirs = [(e["op"], e["seq"]) for e in fr["entries"]]
    assert ours == theirs  # the same collectives (DDP's from C++ included) in the same order
    for e in timed["entries"]:
        assert e["state"] == "completed", e
        assert e["duration_ms"] is not None and e["duration_ms"] >= 0, e
        assert e["created"] <= e["started"] <= e["completed"], e
    # the 64 MiB all_reduce: our GPU duration against Flight Recorder's CUDA-event duration of the same op
    big = [e for e in timed["entries"] if e["op"] == "all_reduce"][-1]
    ref = [e for e in fr["entries"] if e["op"] == "all_reduce"][-1]
    if ref.get("duration_ms"):
        assert 0.2 * ref["duration_ms"] <= big["duration_ms"] <= 5 * ref["duration_ms"] + 1, (big, ref)
