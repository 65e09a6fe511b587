"""Shared fixtures. Every test is checked for leaked global state (signal handlers, atexit-free)."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
_SIGNALS = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)]


@pytest.fixture(autouse=True)
def no_leaked_signal_handlers():
    """Anything rankscope hooks must be restored when it stops (STYLE.md rule 14)."""
    before = {s: signal.getsignal(s) for s in _SIGNALS}
    yield
    after = {s: signal.getsignal(s) for s in _SIGNALS}
    assert after == before, f"signal handlers leaked: {after} != {before}"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: the real traces from shared/ are needed by this test")
    return SHARED
