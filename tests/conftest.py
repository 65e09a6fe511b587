"""Shared fixtures. Every test is checked for leaked global state (signal handlers, atexit-free)."""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

# fsspec reads its FSSPEC_* configuration once, when first imported. Imported here, before any test sets
# FSSPEC_S3_ENDPOINT_URL, it never keeps one test module's moto endpoint for the next module (each module that
# imports the moto_server fixture starts its own server): on a worker whose first fsspec import happened inside
# s3_env, the next module's s3fs got two different endpoint_url values and raised TypeError (#23).
import fsspec  # noqa: F401
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
_SIGNALS = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)]


_OWN_SPOOL: list[str] = []
_SPOOL_MARK = "RANKSCOPE_TESTS_SPOOL"  # the folder this suite chose, so that a worker can tell it from a user's


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest process gets its own default spool folder, so the jobs of two xdist workers never share
    ``/tmp/rankscope-spool/RUN/rank-R`` (two tests' runs are often both named "run"). An xdist worker
    inherits the controller's environment, folder included: the mark tells that apart from a folder the
    user set, and the worker makes its own. Module-scoped fixtures start their jobs under this folder;
    each test gets its own below it (``own_spool_folder``)."""
    inherited = os.environ.get("RANKSCOPE_SPOOL")
    if inherited is None or inherited == os.environ.get(_SPOOL_MARK):
        _OWN_SPOOL.append(tempfile.mkdtemp(prefix="rankscope-spool-"))
        os.environ["RANKSCOPE_SPOOL"] = os.environ[_SPOOL_MARK] = _OWN_SPOOL[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for d in _OWN_SPOOL:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def own_spool_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's jobs (subprocesses inherit the environment) spool under a folder of their own, inside the
    process's folder (or the user's ``RANKSCOPE_SPOOL``)."""
    base = os.environ.get("RANKSCOPE_SPOOL")
    if base and os.path.isdir(base):
        monkeypatch.setenv("RANKSCOPE_SPOOL", tempfile.mkdtemp(prefix="t-", dir=base))


@pytest.fixture(autouse=True)
def no_leaked_signal_handlers():
    """Anything rankscope hooks must be restored when it stops (STYLE.md rule 14)."""
    before = {s: signal.getsignal(s) for s in _SIGNALS}
    yield
    after = {s: signal.getsignal(s) for s in _SIGNALS}
    assert after == before, f"signal handlers leaked: {after} != {before}"


def _rpc_functions() -> dict[str, object]:
    """torch.distributed.rpc's call functions, when this process imported it (never imported here)."""
    import sys

    mods = [sys.modules.get("torch.distributed.rpc"), sys.modules.get("torch.distributed.rpc.api")]
    return {f"{m.__name__}.{n}": getattr(m, n, None) for m in mods if m is not None
            for n in ("rpc_sync", "rpc_async", "remote")}


@pytest.fixture(autouse=True)
def no_leaked_rpc_patches():
    """rankscope's RPC patches are gone when the profile that made them stops (STYLE.md rule 14)."""
    before = _rpc_functions()
    yield
    after = {k: v for k, v in _rpc_functions().items() if k in before}
    assert after == before, f"torch.distributed.rpc functions left patched: {after}"
    wrapped = [k for k, v in _rpc_functions().items() if getattr(v, "__module__", "").startswith("rankscope.")]
    assert not wrapped, f"torch.distributed.rpc functions left patched: {wrapped}"


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A test module that cannot import a dev dependency fails to collect (an error, never a skip); say
    under the error how to install them all."""
    if report.failed and "ModuleNotFoundError" in str(report.longrepr):
        import sys

        report.sections.append(("missing dev dependency", f"install the dev extra: {sys.executable} -m pip install "
                                "-e '.[dev]'  (or `make install`; `make test` does it)"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: the real traces from shared/ are needed by this test")
    return SHARED
