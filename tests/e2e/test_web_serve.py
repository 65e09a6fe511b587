"""The web UI over real demo runs (torchrun, gloo, 2 ranks), served by a real uvicorn on 127.0.0.1.

``demo_runs`` makes the runs once per test session (shared with the browser tests) under pytest's
session temp directory: "healthy" and "slow1" (rank 1 slow in compute), plus a directory that is
not a run and a secret file beside the served directory.
"""
from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.slow


def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The served directory with two demo runs; made once per session."""
    from rankscope.demo.launch import launch

    base = tmp_path_factory.getbasetemp() / "rankscope-web-e2e"
    root = base / "runs"
    if (base / "done").exists():
        return root
    launch(root / "healthy", ranks=2, steps=3, warmup=1, slow_rank=None, slow_kind="compute", slowdown=1.0)
    launch(root / "slow1", ranks=2, steps=3, warmup=1, slow_rank=1, slow_kind="compute", slowdown=1.0)
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("not a run")
    (base / "secret.txt").write_text("TOP SECRET")
    (base / "done").write_text("ok")
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """uvicorn serving ``create_app(root)`` in a thread (no signal handlers outside the main thread)."""

    def __init__(self, root: Path) -> None:
        import uvicorn

        from rankscope.web.app import create_app

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "Served":
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, method: str = "GET") -> tuple[int, str]:
        """A raw request: the path is sent exactly as given (no client-side normalization of ../)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.read().decode(errors="replace")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    with Served(demo_runs(tmp_path_factory)) as s:
        yield s


def test_index_lists_runs_only(served):
    status, body = served.get("/")
    assert status == 200 and "/runs/healthy" in body and "/runs/slow1" in body and "notes" not in body
    status, body = served.get("/api/runs")
    assert status == 200 and '"runs":["healthy","slow1"]' in body.replace(" ", "")


def test_run_page_and_compare(served):
    status, body = served.get("/runs/slow1")
    assert status == 200 and 'id="view-overview"' in body and 'class="verdict' in body and 'id="switcher"' in body
    status, body = served.get("/compare?run=slow1&baseline=healthy")
    assert status == 200 and 'id="view-diff"' in body and "compared with healthy" in body


@pytest.mark.parametrize("path,code", [
    ("/runs/..", 400), ("/runs/%2e%2e", 400), ("/runs/..%2Fsecret.txt", 404), ("/runs/../secret.txt", 404),
    ("/compare?run=..%2Fsecret.txt", 400), ("/compare?run=healthy&baseline=..", 400),
    ("/runs/notes", 404), ("/runs/nosuchrun", 404), ("/compare?run=slow1&baseline=notes", 404),
    ("/runs/.hidden", 400),
])
def test_refuses_traversal_and_non_runs(served, path, code):
    status, body = served.get(path)
    assert status == code, (path, status, body[:200])
    assert "TOP SECRET" not in body


def test_read_only(served):
    assert served.get("/", "POST")[0] == 405
    assert served.get("/runs/healthy", "DELETE")[0] == 405


def test_cli_serve_warns_on_public_host(tmp_path_factory):
    root = demo_runs(tmp_path_factory)
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "rankscope.cli", "serve", str(root), "--host", "0.0.0.0",
                          "--port", str(port)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        first = p.stderr.readline()  # the warning comes before the server starts
        assert "warning" in first and "0.0.0.0" in first and "no authentication" in first
    finally:
        p.terminate()
        p.wait(10)
