"""The recorder's store traffic on a real c10d TCPStore (in this process): the "every rank dumps" request
(rankscope.collect.comms.watch) and the live signal's per-rank reports scored on rank 0
(rankscope.collect.comms.live). The collectives' arrivals are handed to the live worker by a stand-in for
the recorder (the real recorders feed it in tests/e2e/test_live.py)."""
from __future__ import annotations

import datetime
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers import require

torch = require("torch", "torch==2.13.0")  # missing: fails with the install command, never skips
import torch.distributed as dist  # noqa: E402

from rankscope.collect.comms import live as comms_live  # noqa: E402
from rankscope.collect.comms import watch as comms_watch  # noqa: E402
from rankscope.collect.comms.watch import Listener, StoreSignal, thread_stacks  # noqa: E402
from tests.fixtures_s3 import MotoServer, free_port, moto_server, s3_env  # noqa: E402, F401


def _master() -> Any:
    return dist.TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=10))


def test_a_request_reaches_every_other_listener_once() -> None:
    master = _master()
    a, b = StoreSignal(comms_watch._own_client(master)), StoreSignal(comms_watch._own_client(master))
    assert a.poll() is None and b.poll() is None
    a.announce(2, "watchdog")
    got = b.poll()
    assert got is not None and got["rank"] == 2 and got["reason"] == "watchdog"
    assert b.poll() is None and a.poll() is None  # once; the asker does not ask itself
    c = StoreSignal(comms_watch._own_client(master))  # a listener that came later: old requests are not for it
    assert c.poll() is None


def test_own_client_is_a_second_connection_to_the_same_server() -> None:
    master = _master()
    prefixed = dist.PrefixStore("default_pg", master)
    own = comms_watch._own_client(prefixed)
    assert own is not master and isinstance(own, dist.TCPStore) and own.port == master.port
    own.set("k", "v")
    assert master.get("k") == b"v"
    assert comms_watch._own_client(dist.HashStore()) is None  # a local store is used as it is


class _Broken:
    def add(self, key: str, n: int) -> int:
        raise RuntimeError("store gone")

    set = get = add  # type: ignore[assignment]


def test_listener_survives_a_store_that_fails_and_keeps_its_connection() -> None:
    lis = Listener()
    lis.signal, lis.opened = StoreSignal.__new__(StoreSignal), True
    lis.signal.store, lis.signal.key, lis.signal.seen = _Broken(), "k", 0
    assert lis.poll() is None and lis.announce(0, "watchdog") is False
    assert lis.signal is not None  # kept: never reopened (a reused port would reach another job's store)


def test_listener_without_a_process_group_opens_nothing() -> None:
    assert not dist.is_initialized()
    lis = Listener()
    assert lis.poll() is None and lis.announce(0, "x") is False and lis.signal is None


def test_a_dead_server_makes_the_client_fail_not_hang() -> None:
    master = _master()
    sig = StoreSignal(comms_watch._own_client(master))
    del master
    done: list[Any] = []
    th = threading.Thread(target=lambda: done.append(_poll(sig)), daemon=True)
    th.start()
    th.join(60)  # bound only a hang would reach: the client's own timeout is comms_watch.TIMEOUT_S
    assert done and done[0] in ("raised", None)


def _poll(sig: StoreSignal) -> Any:
    try:
        return sig.poll()
    except Exception:  # noqa: BLE001
        return "raised"


def test_thread_stacks_show_where_another_thread_sleeps() -> None:
    ev = threading.Event()

    def parked_here() -> None:
        ev.wait(30)

    th = threading.Thread(target=parked_here, name="parked", daemon=True)
    th.start()
    try:
        time.sleep(0.05)
        got: list[dict[str, list[str]]] = []
        taker = threading.Thread(target=lambda: got.append(thread_stacks()), name="taker")  # as the watchdog
        taker.start()
        taker.join(30)
        st = got[0]
        assert "taker" not in st  # the thread that takes them is left out
        assert any(" test_thread_stacks_show_where_another_thread_sleeps" in f for f in st["MainThread"])
        assert any(" parked_here" in f for f in st["parked"][:3]), st["parked"][:3]
        assert st["parked"][0].split(":")[0].endswith("threading.py")  # innermost first
    finally:
        ev.set()


def _collector(rank: int, world: int, run: Path | str) -> Any:
    from rankscope.store.fs import open_target

    return SimpleNamespace(ident=SimpleNamespace(rank=rank, world_size=world, offset_to_rank0_ns=0, offset_error_ns=0),
                           target=open_target(str(run)), run=str(run), extra={})


class _Arrivals:
    """Stand-in for the recorder: the collectives this rank issued, handed out once."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, int]] = []

    def due(self, force: bool = False) -> bool:
        return True

    def read(self) -> list[tuple[str, int, int]]:
        rows, self.rows = self.rows, []
        return rows


def _workers(run: Path | str, master: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Three ranks' live workers on one store, fed 6 steps of 40 ms in which rank 2 reaches each of the 2
    collectives 12 ms after the others and uses 10 ms more CPU."""
    monkeypatch.setattr(comms_watch.StoreSignal, "open", classmethod(lambda cls: cls(comms_watch._own_client(master))))
    opts = {"auto_capture": False, "slow_steps": 3, "capture_steps": 3}
    workers = []
    for r in range(3):
        q: Any = __import__("collections").deque()
        w = comms_live._Worker(_collector(r, 3, run), "rankscope/test/0/live", 0, opts, q)
        w.arrivals = _Arrivals()  # type: ignore[assignment]
        workers.append((w, q))
    t = time.time_ns() - 10_000_000_000
    for w, _ in workers:
        w.prev = (0, t)  # the profile started at step 0, 10 s ago
    for s in range(6):
        t0, t1 = t + s * 40_000_000, t + (s + 1) * 40_000_000
        for r, (w, q) in enumerate(workers):
            for k in range(2):
                w.arrivals.rows.append(("0", 2 * s + k + 1, t0 + (5 + 15 * k + (12 if r == 2 else 0)) * 1_000_000))
            q.append((s, t1, 20_000_000 + (10_000_000 if r == 2 else 0), 0))
    return workers


def test_live_workers_publish_through_the_store_and_rank0_names_the_late_rank(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    workers = _workers(tmp_path, _master(), monkeypatch)
    for w, _ in reversed(workers):  # ranks 2, 1 publish; rank 0 reads them, scores, writes
        w.tick()
    lines = [json.loads(x) for x in (tmp_path / "live.jsonl").read_text().splitlines()]
    assert [d["step"] for d in lines] == list(range(6))
    assert [d["late"] for d in lines] == [2] * 6 and [d["straggler"] for d in lines] == [None, None, 2, 2, 2, 2]
    assert lines[2]["cause_kind"] == "cpu" and lines[2]["scores"]["2"] == pytest.approx(28 / 40, abs=0.01)
    assert capsys.readouterr().err.count("rankscope: rank 2 slow for 3 steps (arrives last at 6/6 collectives") == 1
    workers[0][0].tick()  # nothing new: nothing written again
    assert len((tmp_path / "live.jsonl").read_text().splitlines()) == 6


def test_live_jsonl_on_an_object_store_is_rewritten_whole_and_watch_reads_it(s3_env: MotoServer,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    run = f"s3://{s3_env.bucket()}/job"
    workers = _workers(run, _master(), monkeypatch)
    for w, _ in reversed(workers):
        w.tick(final=True)
    import s3fs

    got = s3fs.S3FileSystem().cat_file(f"{run[5:]}/live.jsonl").decode().splitlines()
    assert [json.loads(x)["straggler"] for x in got] == [None, None, 2, 2, 2, 2]
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "watch", run, "--once", "--alarms"], capture_output=True,
                       text=True, timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert p.returncode == 0, p.stderr
    assert [x.split(":")[0] for x in p.stdout.splitlines()] == ["step 2", "step 3", "step 4", "step 5"]
    assert all("✖ rank 2 slow for" in x for x in p.stdout.splitlines())
