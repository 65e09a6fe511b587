"""`rankscope hang` on Flight Recorder dumps of real 3-rank gloo jobs, against torch's own analyzer.

torch's analyzer (`torchfrtrace`, torch.distributed.flight_recorder) does not run on gloo dumps as
written: gloo's recorder leaves ``pg_config`` empty and the analyzer fails with a KeyError. The
comparison therefore gives it copies of the dumps with the group membership the job really had
(default group [0, 1, 2], sub-group [0, 1]) filled in; rankscope reads the dumps as written.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_s3 import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _job(tmp: Path, mode: str) -> Path:
    out = tmp / mode
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=3", "--master-addr=127.0.0.1",
                    f"--master-port={free_port()}", str(ROOT / "tests/e2e/fr_job.py"), str(out), mode],
                   env=env, capture_output=True, text=True, timeout=120)
    assert sorted(p.name for p in out.iterdir()) == ["rank_0", "rank_1", "rank_2"]
    return out


def _rankscope(d: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(d), "--json", "--world-size", "3"],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _torch_analyzer(d: Path, tmp: Path) -> str:
    patched = tmp / (d.name + "-with-groups")
    patched.mkdir()
    for f in d.iterdir():
        doc = pickle.loads(f.read_bytes())
        doc["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
                            "1": {"name": "1", "desc": "undefined", "ranks": "[0, 1]"}}
        (patched / f.name).write_bytes(pickle.dumps(doc))
    exe = shutil.which("torchfrtrace", path=os.path.dirname(sys.executable)) or "torchfrtrace"
    p = subprocess.run([exe, str(patched), "--prefix", "rank_"], capture_output=True, text=True, timeout=120)
    return p.stdout + p.stderr


def test_skipped_collective_is_a_desync_named_like_torchs_analyzer(tmp_path: Path) -> None:
    d = _job(tmp_path, "skip")
    v = _rankscope(d)
    (p,) = v["problems"]
    assert p["kind"] == "mismatch" and p["group"] == "0" and p["seq"] == 4
    assert p["expected"].startswith("all_reduce") and p["expected_ranks"] == [0, 2]
    assert [(k.split()[0], rs) for k, rs in p["odd"].items()] == [("all_gather", [1])]
    assert "rank 1 issued all_gather" in v["headline"]
    ref = _torch_analyzer(d, tmp_path)
    assert re.search(r"Collective sequence number: 4 has errors", ref), ref[-2000:]
    assert "Culprit rank 1" in ref and "'all_reduce' does not match found collective type: 'all_gather'" in ref
    # the JSON form of the same recorder (_dump_fr_trace_json): the same verdict
    js = _rankscope(d.parent / (d.name + "-json"))
    assert js["problems"] == v["problems"] and js["headline"] == v["headline"]


def test_rank_that_left_is_named_in_the_subgroup_it_never_joined(tmp_path: Path) -> None:
    d = _job(tmp_path, "stop")
    v = _rankscope(d)
    (p,) = v["problems"]
    assert p["kind"] == "not_joined" and p["group"] == "1" and p["seq"] == 2
    assert p["joined"] == [0] and p["missing"] == [1] and p["op"].startswith("broadcast")
    assert v["no_dump"] == []
    assert "never joined" in v["headline"] and "rank 1 #1" in v["headline"]


def test_dump_that_is_not_plain_data_is_refused_not_run(tmp_path: Path) -> None:
    """A pickle that would call os.system is refused with one line; nothing runs."""
    d = tmp_path / "dumps"
    d.mkdir()

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    (d / "rank_0").write_bytes(pickle.dumps({"entries": [], "x": Evil()}))
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(d)],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and not (tmp_path / "pwned").exists()
    assert "refused to load posix.system" in p.stderr and "Traceback" not in p.stderr


def _with_states(src: Path, dst: Path, state_of: Any) -> Path:
    """Copies of real dumps with each entry's state (and timed flag) set by ``state_of(rank, group, seq)``, as
    Flight Recorder on NCCL with TORCH_NCCL_ENABLE_TIMING writes them (scheduled / started / completed; no GPU
    here: gloo's recorder leaves every entry "scheduled"); the default group cut after collective #3."""
    dst.mkdir()
    for f in src.iterdir():
        r = int(f.name.rsplit("_", 1)[1])
        doc = pickle.loads(f.read_bytes())
        kept = []
        for e in doc["entries"]:
            pg, s = e["process_group"][0], e["collective_seq_id"]
            if pg == "0" and s >= 4:
                continue
            e["state"], timed = state_of(r, pg, s)
            if timed is not None:
                e["timed"] = timed
            kept.append(e)
        doc["entries"] = kept
        (dst / f.name).write_bytes(pickle.dumps(doc))
    return dst


def test_rank_behind_in_a_collective_all_joined_is_named_like_torchs_analyzer(tmp_path: Path) -> None:
    """Every rank joined all_reduce #3, but rank 1's never started (ranks 0, 2: started). torch's analyzer
    calls it a state mismatch with rank 1 the culprit; rankscope said "no hang" before, now names rank 1
    (a warning: a dump taken while the job ran can catch a collective in flight)."""
    real = _job(tmp_path, "skip")
    lag = _with_states(real, tmp_path / "lag", lambda r, pg, s: (
        ("scheduled" if r == 1 else "started") if (pg, s) == ("0", 3) else "completed", None))
    v = _rankscope(lag)
    (p,) = v["problems"]
    assert p["kind"] == "behind" and p["group"] == "0" and p["seq"] == 3 and p["behind"] == [1]
    assert p["ahead"] == [0, 2] and p["states"] == {"0": "started", "1": "scheduled", "2": "started"}
    assert "rank 1 never started collective #3" in v["headline"]
    ref = _torch_analyzer(lag, tmp_path)
    assert re.search(r"Collective sequence number: 3 has errors", ref), ref[-2000:]
    assert "Culprit rank 1" in ref and "COLLECTIVE_STATE_MISMATCH" in ref, ref[-2000:]
    # the same dumps with every state agreeing: nothing to say, and torch's analyzer agrees
    ok = _with_states(real, tmp_path / "ok", lambda r, pg, s: ("completed", None))
    assert _rankscope(ok)["problems"] == []
    ref = _torch_analyzer(ok, tmp_path)
    assert "has errors" not in ref, ref[-2000:]
    # rank 1's #3 counted but not timed (the timed engine's sampling): its state says nothing, no verdict
    sampled = _with_states(real, tmp_path / "sampled", lambda r, pg, s: (
        ("scheduled", False) if (r, pg, s) == (1, "0", 3) else ("completed", True)))
    assert _rankscope(sampled)["problems"] == []
