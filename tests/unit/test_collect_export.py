"""Trace export off the training thread: real torch.profiler windows, back to back (no mocks)."""
from __future__ import annotations

import gzip
import json
import threading

import pytest

from rankscope.store.uploader import UploadConfig
from tests.helpers import require

torch = require("torch", "torch==2.13.0")  # missing: this fails with the install command, never skips
FAST = UploadConfig(jitter_s=0.0, backoff_base_s=0.05, exit_timeout_s=20)
N_EVENTS = 3000


def _work(step: int) -> None:
    for _ in range(N_EVENTS):
        with torch.profiler.record_function(f"op{step}"):
            pass


def _events(path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def test_back_to_back_windows_export_in_background(tmp_path):
    """Each window's save overlaps the next profiling session (wait=0, warmup=0); no crash, nothing lost."""
    import rankscope
    from rankscope.collect.export import detach_result

    threads: set[str] = set()
    h = rankscope.trace_handler(str(tmp_path / "run"), spool_dir=str(tmp_path / "sp"), upload=FAST)
    orig = h.__call__

    def spy(prof):
        assert detach_result(prof) is not None  # torch 2.13 CPU: the Kineto result can be detached
        orig(prof)
        threads.update(t.name for t in threading.enumerate())

    sched = torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=6)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=spy) as prof:
        for step in range(7):
            _work(step)
            prof.step()
    assert h.close(30) == 0
    assert "rankscope-export" in threads
    meta = json.loads((tmp_path / "run/ranks/0/meta.json").read_text())
    assert [w["steps"] for w in meta["windows"]] == [[i] for i in range(6)]
    for i in range(6):
        ev = _events(tmp_path / f"run/ranks/0/window-{i:04d}.pt.trace.json.gz")
        names = [e.get("name") for e in ev]
        assert names.count(f"op{i}") == N_EVENTS and f"ProfilerStep#{i}" in names
        assert not any(n and n.startswith("op") and n != f"op{i}" for n in names)  # no mixing between windows


def test_user_handler_and_export_chrome_trace_still_work(tmp_path):
    """A Kineto result saves only once; the user's handler and export_chrome_trace get rankscope's copy."""
    import rankscope

    tb = tmp_path / "tb"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=2)
    with rankscope.profile(run=str(tmp_path / "run"), schedule=sched, spool_dir=str(tmp_path / "sp"), upload=FAST,
                           on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tb), use_gzip=True)) as p:
        for step in range(5):
            _work(step)
            p.step()
    out = tmp_path / "last.json"
    p.export_chrome_trace(str(out))
    last = json.loads(out.read_text())["traceEvents"]
    assert [e["name"] for e in last].count("op3") == N_EVENTS
    tb_files = sorted(tb.glob("*.pt.trace.json.gz"))
    assert len(tb_files) == 2
    counts = sorted(sum(e.get("name") == f"op{s}" for e in _events(f)) for f in tb_files for s in (1, 3))
    assert counts == [0, 0, N_EVENTS, N_EVENTS]


def test_export_stacks_after_background_save(tmp_path):
    """export_stacks parses the same Kineto result the background thread saved: both work."""
    import rankscope

    def f():
        return torch.randn(64, 64) @ torch.randn(64, 64)

    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with rankscope.profile(run=str(tmp_path / "run"), schedule=sched, spool_dir=str(tmp_path / "sp"), upload=FAST,
                           with_stack=True,  # torch 2.x writes no stacks without verbose=True
                           experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True)) as p:
        for _ in range(3):
            f()
            p.step()
    p.export_stacks(str(tmp_path / "stacks.txt"))
    lines = (tmp_path / "stacks.txt").read_text().splitlines()
    assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    assert any("test_collect_export.py" in line for line in lines)
    assert (tmp_path / "run/ranks/0/window-0000.pt.trace.json.gz").exists()


def test_trace_handler_checks_storage_when_built(tmp_path):
    """A bad run URL fails when the handler is built, before any training step."""
    import rankscope
    from rankscope.errors import RankscopeError

    with pytest.raises(RankscopeError, match="nosuch://"):
        rankscope.trace_handler("nosuch://x/y", spool_dir=str(tmp_path / "sp"))
    h = rankscope.trace_handler(str(tmp_path / "run"), spool_dir=str(tmp_path / "sp2"), upload=FAST)
    assert h.close() == 0 and not (tmp_path / "run" / "run.json").exists()  # nothing written without a window
