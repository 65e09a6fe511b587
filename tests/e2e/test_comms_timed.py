"""The timed collective recorder (rankscope.collect.comms.timed_pg) in real gloo jobs (torchrun, loopback).

The oracle for what it must see is torch's own Flight Recorder on the same workload (DDP's construction
and gradient all-reduces, issued from C++, then the user's collectives): the same ops in the same
sequence. What Flight Recorder on gloo lacks, the timed backend adds: completion times and states,
sampling, a ring size; torch's analyzer (`torchfrtrace`) reads its dumps.
"""
from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_s3 import free_port
from tests.procs import kill_tree

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "tests/e2e/timed_job.py")
pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def _run(out: Path, mode: str, ranks: int = 2, **env: str) -> dict[int, dict[str, Any]]:
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
                        "--master-addr=127.0.0.1", f"--master-port={free_port()}", JOB, str(out), mode],
                       env=_env(**env), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("timed")
    return {"fr": _run(base / "fr", "fr"), "timed": _run(base / "timed", "timed"), "timed_dir": base / "timed",
            "small": _run(base / "small", "timed", RANKSCOPE_TEST_RING="5", RANKSCOPE_TEST_SAMPLE="3",
                          RANKSCOPE_TEST_STACK="1"),
            "poll": _run(base / "poll", "timed", RANKSCOPE_TEST_POLL="1")}


def _collectives(entries: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["op"], e["seq"]) for e in entries if not e["p2p"] and e["seq"] is not None]


def test_sees_what_flight_recorder_sees_and_times_every_call(jobs: dict[str, Any]) -> None:
    for r in (0, 1):
        fr, timed = jobs["fr"][r], jobs["timed"][r]
        assert timed["backend"] == "RankscopeTimedPG"
        # the same collectives in the same sequence as torch's recorder: DDP's C++ calls, FSDP2's, the tensor,
        # coalesced and functional APIs included. One naming difference: gloo runs reduce_scatter_tensor as an
        # all_reduce (ProcessGroupGloo::reduce_scatter_tensor_coalesced) and its Flight Recorder names it so;
        # the timed engine names what the caller issued.
        ours = _collectives(timed["entries"])
        theirs = _collectives(fr["entries"])
        renamed = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
        assert [(ours[i], theirs[i][0]) for i in renamed] == [(("gloo:reduce_scatter", ours[i][1]), "gloo:all_reduce")
                                                               for i in renamed]
        assert len(ours) == len(theirs) and len(renamed) == 6  # FSDP2: 2 steps x 2 reductions, and 2 by hand
        assert {"gloo:all_to_all", "gloo:barrier", "gloo:broadcast", "gloo:all_gather"} <= {op for op, _ in ours}
        ops = collections.Counter(op for op, _ in _collectives(timed["entries"]))
        assert ops["gloo:all_reduce"] >= 3 + 1 and ops["gloo:broadcast"] >= 1 + 1 and ops["gloo:all_gather"] >= 2
        coll = [e for e in timed["entries"] if not e["p2p"] and e["seq"] is not None]
        assert all(e["state"] == "completed" and e["completed"] >= e["created"] for e in coll)
        # point-to-point, with its peer (a recv from any source gets it when it completes), timed when the
        # caller's wait() or is_completed() sees the end (gloo's send / recv Work has no future)
        p2p = [e for e in timed["entries"] if e["p2p"]]
        assert [(e["op"], e["peer"], e["p2p_seq"], e["sizes"]) for e in p2p] == (
            [("gloo:send 0->1", 1, 1, [[8]]), ("gloo:send 0->1", 1, 2, [[4]]), ("gloo:recv 0<-1", 1, 3, [[2]])]
            if r == 0 else
            [("gloo:recv 1<-0", 0, 1, [[8]]), ("gloo:recv 1<-0", 0, 2, [[4]]), ("gloo:send 1->0", 0, 3, [[2]])])
        assert all(e["timed"] and e["state"] == "completed" and e["completed"] >= e["created"] for e in p2p)
        # a collective the backend refuses: the same error as plain gloo, recorded as failed, no sequence used
        assert timed["error"] == fr["error"] and fr["error"][0] == "RuntimeError"
        assert timed["entries"][-1]["state"] == "failed" and timed["entries"][-1]["seq"] is None
        counts = timed["counts"]
        assert sum(counts.values()) == len(timed["entries"])


def test_hang_and_torchfrtrace_read_the_timed_dumps(jobs: dict[str, Any]) -> None:
    out = jobs["timed_dir"]
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(out), "--json", "--world-size", "2"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    v = json.loads(p.stdout)
    assert v["problems"] == []  # each send and its recv (p2p #1-#3, one from any source) pair up, no desync
    g0 = next(g for g in v["groups"] if g["group"] == "0")
    n = max(s for _, s in _collectives(jobs["timed"][0]["entries"]))
    assert g0["last_seq"] == {"0": n, "1": n} and g0["last_completed"] == {"0": n, "1": n}
    exe = shutil.which("torchfrtrace", path=os.path.dirname(sys.executable)) or "torchfrtrace"
    ref = subprocess.run([exe, str(out), "--prefix", "fr_rank_"], capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0 and "has errors" not in ref.stdout + ref.stderr, (ref.stdout + ref.stderr)[-2000:]


def test_sampling_times_one_in_n_and_the_ring_stays_bounded(jobs: dict[str, Any]) -> None:
    """ring=5, sample_every=3, stack=True: every call counted, the ring holds the last 5, one call in 3 is
    timed, each entry carries the Python stack that issued it (none without stack=True)."""
    for r in (0, 1):
        full, small = jobs["timed"][r], jobs["small"][r]
        assert small["counts"] == full["counts"]
        assert len(small["entries"]) == 5
        assert [e["record_id"] for e in small["entries"]] == [e["record_id"] for e in full["entries"][-5:]]
        # timed: record ids divisible by 3 (point-to-point included), except what was refused
        timeable = [e["record_id"] for e in full["entries"] if e["state"] != "failed"]
        assert small["timed_n"] == sum(1 for i in timeable if i % 3 == 0)
        for e in small["entries"]:
            assert e["timed"] == (e["record_id"] % 3 == 0 and e["state"] != "failed")
            assert (e["completed"] is not None) == bool(e["timed"])
            assert "timed_job.py" in e["frame_files"]
        assert all(e["frame_files"] == [] for e in full["entries"])


def test_no_code_change_hang_with_last_completed(tmp_path: Path) -> None:
    """A plain init_process_group("gloo") script under `-m rankscope.collect.comms.run --timed`; rank 1
    skips an all_reduce; the watchdog dumps on every rank; `rankscope hang` names the rank and gives each
    rank's last completed collective (known from real completion), and torch's analyzer agrees."""
    out = tmp_path / "hang"
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=3",
                             "--master-addr=127.0.0.1", f"--master-port={free_port()}", "-m",
                             "rankscope.collect.comms.run", "--timed", "--out", str(out), "--watchdog", "1.5",
                             "--no-exit-dump", JOB, str(out), "hang"],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not all((out / f"fr_rank_{r}").exists() for r in range(3)):
            assert time.monotonic() < deadline and proc.poll() is None, "no watchdog dumps"
            time.sleep(0.2)
    finally:
        kill_tree(proc)
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(out), "--json", "--world-size", "3"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    v = json.loads(p.stdout)
    first = v["problems"][0]
    assert first["kind"] == "mismatch" and list(first["odd"].values()) == [[1]] and first["seq"] == 2
    assert first["expected"].startswith("all_reduce") and "all_gather" in next(iter(first["odd"]))
    g0 = next(g for g in v["groups"] if g["group"] == "0")
    assert g0["last_completed"] == {"0": 1, "1": 1, "2": 1} and g0["last_seq"] == {"0": 2, "1": 2, "2": 2}
    exe = shutil.which("torchfrtrace", path=os.path.dirname(sys.executable)) or "torchfrtrace"
    ref = subprocess.run([exe, str(out), "--prefix", "fr_rank_"], capture_output=True, text=True, timeout=120)
    text = ref.stdout + ref.stderr
    assert re.search(r"Collective sequence number: 2 has errors", text) and "Culprit rank 1" in text, text[-2000:]


def test_size_dtype_and_point_to_point_mismatches_are_named_as_such(tmp_path: Path) -> None:
    """A size mismatch, a dtype mismatch (in a sub-group) and a send that rank 1 never receives, in a real job."""
    out = tmp_path / "mm"
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                        f"--master-port={free_port()}", str(ROOT / "tests/e2e/mismatch_job.py"), str(out)],
                       env=_env(), capture_output=True, text=True, timeout=180)
    assert p.stdout.count("DUMPED") == 2, (p.stdout + p.stderr)[-3000:]
    h = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(out), "--json", "--world-size", "2"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    v = json.loads(h.stdout)
    by = {(q["kind"], q.get("what")): q for q in v["problems"]}
    size = by[("mismatch", "size")]
    assert size["group"] == "0" and size["seq"] == 2 and "[[10, 10]]" in str(size["expected"]) + str(size["odd"])
    dtype = by[("mismatch", "dtype")]
    assert dtype["group"] == "1" and dtype["seq"] == 1 and "Int" in str(dtype["odd"]) + str(dtype["expected"])
    send = by[("unmatched_send", None)]
    assert (send["src"], send["dst"], send["n"], send["sent"], send["received"]) == (0, 1, 2, 2, 1)
    assert len(v["problems"]) == 3
    text = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(out), "--world-size", "2"],
                          env=_env(), capture_output=True, text=True, timeout=60).stdout
    assert "size mismatch in process group 0" in " ".join(text.split())
    assert "rank 0's send #2 to rank 1" in " ".join(text.split()) and "dtype mismatch" in " ".join(text.split())


def test_poll_mode_completes_every_collective_without_a_callback(jobs: dict[str, Any]) -> None:
    """poll=True: completion is found when the next collective is issued (or the dump looks), not by a callback
    on gloo's thread. The same entries as with callbacks, every one completed by the time of the dump; each
    completion seen no earlier than its creation."""
    for r in (0, 1):
        cb, poll = jobs["timed"][r], jobs["poll"][r]
        assert [(e["op"], e["seq"], e["p2p_seq"]) for e in poll["entries"]] == \
            [(e["op"], e["seq"], e["p2p_seq"]) for e in cb["entries"]]
        assert [e["state"] for e in poll["entries"]] == [e["state"] for e in cb["entries"]]
        done = [e for e in poll["entries"] if e["state"] == "completed"]
        assert done and all(e["completed"] >= e["created"] for e in done)
        # found at the next call: a collective's completion is seen at or before the next entry's creation
        # (the entries of the p2p wrapper, completed in wait(), are not polled)
        coll = [e for e in poll["entries"] if not e["p2p"] and e["seq"] is not None]
        seen_at_next = sum(1 for a, b in zip(coll, coll[1:]) if a["completed"] <= b["created"] + 1_000_000)
        assert seen_at_next >= len(coll) // 2, [(e["op"], e["created"], e["completed"]) for e in coll]
