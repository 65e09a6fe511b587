"""A matrix of real hung gloo jobs (torchrun, 3-4 ranks, ``rankscope.profile`` with the recorder's watchdog at
3 s), each named right by ``rankscope hang RUN --json`` from the dumps the watchdog made every rank write.

The jobs are tests/e2e/hang_matrix_job.py's scenarios; each runs on one engine here (Flight Recorder or the
timed backend), both engines covered, DDP on both (``RANKSCOPE_HANG_MATRIX=all``: every scenario on both). Flight Recorder on gloo records no send / recv (torch
2.13), so the p2p deadlock runs on the timed engine. Two jobs run at a time (they are idle once hung). What
each test asserts comes from the job's own structure: the step that goes wrong (3), the group and its
sequence number there, the rank that goes wrong. The time from the job's "BAD" line to the verdict is
printed (``-s``) and kept in bench/RESULTS.md, not asserted (a loaded machine stretches it); the bounds
below only stop a test that hangs itself.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_s3 import free_port
from tests.procs import kill_tree

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests/e2e/hang_matrix_job.py"
pytestmark = pytest.mark.slow

# scenario-engine -> ranks. RANKSCOPE_HANG_MATRIX=all: every scenario on both engines (13 jobs, ~4 min here;
# not p2p on Flight Recorder, which records no gloo send / recv)
ALL = os.environ.get("RANKSCOPE_HANG_MATRIX", "") == "all"
RANKS = {"skip_sub": 3, "op": 3, "exit": 3, "sleep": 4, "p2p": 3, "ddp": 3, "fsdp": 3}
DEFAULT = ["skip_sub-fr", "op-timed", "exit-fr", "sleep-timed", "p2p-timed", "ddp-fr", "ddp-timed", "fsdp-fr"]
CASES = {c: RANKS[c.split("-")[0]] for c in ([f"{s}-{e}" for s in RANKS for e in ("fr", "timed") if (s, e) != ("p2p", "fr")]
                                             if ALL else DEFAULT)}


def cases(scenario: str) -> list[str]:
    return [c for c in CASES if c.startswith(scenario + "-")]
BAD_STEP = 3
LINE = {name: i for i, text in enumerate(JOB.read_text().splitlines(), 1)
        for name in ("time.sleep(STUCK_S)  # stuck in Python, outside", "# stuck in Python before the forward",
                     "# stuck in Python before backward") if name in text}


def _run_case(case: str, base: Path) -> dict[str, Any]:
    scenario, engine = case.split("-")
    n = CASES[case]
    run = base / case
    log = open(base / f"{case}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
                             "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(JOB), str(run),
                             scenario, engine], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    try:
        bad_ns = _wait_for_dumps(base / f"{case}.log", run, n, proc)
        p = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(run), "--json", "--world-size", str(n)],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
        named_ns = time.time_ns()
    finally:
        kill_tree(proc)
        log.close()
    assert p.returncode == 0, p.stderr[-2000:]
    return {"verdict": json.loads(p.stdout), "after_s": (named_ns - bad_ns) / 1e9,
            "log": (base / f"{case}.log").read_text()}


def _wait_for_dumps(log: Path, run: Path, n: int, proc: subprocess.Popen, limit_s: float = 240) -> int:
    """Until the job went wrong, every rank has a dump in the run, and no new dump came for 2 s."""
    deadline, bad, last, count = time.monotonic() + limit_s, None, time.monotonic(), -1
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        assert proc.poll() is None, text[-3000:]  # a job that ends did not hang
        m = re.search(r"BAD \w+ (\d+)", text)
        bad = int(m.group(1)) if m else None
        files = [f for r in range(n) for f in (run / "ranks" / str(r)).glob("comms.*.json.gz")]
        if len(files) != count:
            count, last = len(files), time.monotonic()
        have = {int(f.parent.name) for f in files}
        if bad is not None and have == set(range(n)) and time.monotonic() - last > 2.0:
            return bad
        time.sleep(0.25)
    raise AssertionError(f"no dumps from every rank in {limit_s:g} s: {sorted(map(str, run.rglob('comms.*')))}\n"
                         f"{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The selected cases' results, two jobs at a time."""
    wanted = [c for c in CASES if any(f"[{c}]" in item.nodeid for item in request.session.items)]
    base = tmp_path_factory.mktemp("hang-matrix")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {c: pool.submit(_run_case, c, base) for c in wanted}
    out = {}
    for c, f in futures.items():
        try:
            out[c] = f.result()
        except BaseException as exc:  # noqa: BLE001 - shown by the case's own test
            out[c] = {"error": exc}
    return out


def _root(matrix: dict[str, Any], case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    got = matrix[case]
    if "error" in got:
        raise got["error"]
    v = got["verdict"]
    print(f"{case}: named {got['after_s']:.1f} s after the job went wrong: {v['headline']}")
    assert v["problems"], v["headline"]
    root = v["problems"][0]
    assert root["root"] and root["consequence_of"] is None
    assert all(p["consequence_of"] == 0 for p in v["problems"][1:] if not p["root"])
    return v, root


def _last_seq(v: dict[str, Any], group: str) -> dict[int, int]:
    g = next(g for g in v["groups"] if g["group"] == group)
    return {int(r): s for r, s in g["last_seq"].items()}


@pytest.mark.parametrize("case", cases("skip_sub"))
def test_rank_skipping_a_subgroup_collective_is_the_root(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    # group [0, 1] ("1") at its 4th all_gather (steps 0-3): rank 1 skipped it and waits in the world all_reduce
    assert (root["kind"], root["group"], root["seq"], root["op"]) == ("not_joined", "1", BAD_STEP + 1, "all_gather")
    assert root["culprits"] == [1] and root["waiting"] == [0] and root["step"] == BAD_STEP
    assert v["where"]["1"]["state"] == "waiting" and v["where"]["1"]["group"] == "0"


@pytest.mark.parametrize("case", cases("op"))
def test_a_different_op_is_a_desync_of_that_rank(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    assert (root["kind"], root["group"], root["seq"]) == ("mismatch", "0", BAD_STEP + 1)
    assert root["culprits"] == [2] and root["step"] == BAD_STEP
    assert root["expected"].startswith("all_reduce") and [k.split()[0] for k in root["odd"]] == ["all_gather"]


@pytest.mark.parametrize("case", cases("exit"))
def test_a_rank_that_left_is_named_exited(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    assert (root["kind"], root["group"], root["seq"], root["op"]) == ("not_joined", "0", BAD_STEP + 1, "all_reduce")
    assert root["culprits"] == [2] and root["waiting"] == [0, 1]
    assert v["where"]["2"]["state"] == "exited"


@pytest.mark.parametrize("case", cases("sleep"))
def test_a_rank_asleep_in_python_is_named_with_its_frame(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    assert (root["kind"], root["group"], root["seq"], root["op"]) == ("not_joined", "1", BAD_STEP + 1, "all_gather")
    assert root["culprits"] == [3] and root["waiting"] == [1] and root["step"] == BAD_STEP
    # rank 3 had nothing pending: its dump came from another rank's request, its stack from the watchdog thread
    w = v["where"]["3"]
    assert w["state"] == "outside" and w["step"] == BAD_STEP
    assert w["frame"] == f"hang_matrix_job.py:{LINE['time.sleep(STUCK_S)  # stuck in Python, outside']} sleep"
    world = [p for p in v["problems"] if p["group"] == "0"]
    assert world and not world[0]["root"] and sorted(world[0]["waiting"]) == [0, 2]


@pytest.mark.parametrize("case", cases("p2p"))
def test_a_p2p_order_deadlock(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    assert root["kind"] == "deadlock" and root["culprits"] == [0, 1]
    assert {(c["kind"], c["op"], tuple(c["waiting"]), tuple(c["culprits"])) for c in root["cycle"]} == {
        ("unmatched_recv", "recv", (0,), (1,)), ("unmatched_recv", "recv", (1,), (0,))}
    world = [p for p in v["problems"] if p["kind"] == "not_joined"]
    assert world and world[0]["waiting"] == [2] and not world[0]["root"]


@pytest.mark.parametrize("case", cases("ddp"))
def test_a_hang_inside_ddps_cpp_all_reduce(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    last = _last_seq(v, "0")
    # ranks 0 and 1 are in DDP's gradient all_reduce (issued from C++), rank 2 asleep before its backward
    assert (root["kind"], root["group"], root["op"]) == ("not_joined", "0", "all_reduce")
    assert root["culprits"] == [2] and root["waiting"] == [0, 1] and root["step"] == BAD_STEP
    assert root["seq"] == last[0] == last[1] == last[2] + 1
    assert v["where"]["2"]["frame"] == f"hang_matrix_job.py:{LINE['# stuck in Python before backward']} model_step"


@pytest.mark.parametrize("case", cases("fsdp"))
def test_a_hang_inside_fsdp2(matrix: dict[str, Any], case: str) -> None:
    v, root = _root(matrix, case)
    last = _last_seq(v, "0")
    assert (root["kind"], root["group"], root["op"]) == ("not_joined", "0", "all_gather")
    assert root["culprits"] == [1] and root["waiting"] == [0, 2] and root["step"] == BAD_STEP
    assert root["seq"] == last[0] == last[2] == last[1] + 1
    assert v["where"]["1"]["frame"] == f"hang_matrix_job.py:{LINE['# stuck in Python before the forward']} model_step"
