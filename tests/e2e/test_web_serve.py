"""The web UI over real demo runs (torchrun, gloo, 2 ranks), served by a real uvicorn on 127.0.0.1.

``tests.helpers.demo_runs`` makes the runs once per test session (shared with the browser tests) under pytest's
session temp directory: "healthy" and "slow1" (rank 1 slow in compute), plus a directory that is
not a run and a secret file beside the served directory.
"""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.fixtures_s3 import free_port
from tests.helpers import demo_runs, tiny_run

pytestmark = pytest.mark.slow


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
        status, _, body = self.fetch(path, method)
        return status, body.decode(errors="replace")

    def fetch(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and raw body."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request(method, path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


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


def test_timeline_route(served):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    status, headers, body = served.fetch("/runs/slow1/timeline")
    assert status == 200 and 'filename="slow1-timeline.pftrace"' in headers["content-disposition"]
    trace = pb.Trace.FromString(body)
    procs = sorted(p.track_descriptor.process.process_name for p in trace.packet
                   if p.track_descriptor.HasField("process"))
    assert len(procs) == 2 and procs[0].startswith("rank 0 · ") and procs[1].startswith("rank 1 · ")
    assert any(p.track_event.flow_ids for p in trace.packet)  # matched collectives linked across ranks
    status, headers, body = served.fetch("/runs/slow1/timeline?format=json&ranks=1&steps=")
    assert status == 200 and headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"} == {2}
    status, body = served.get("/runs/slow1")
    assert 'id="timeline-form"' in body and 'action="/runs/slow1/timeline"' in body


def test_timeline_cache(tmp_path):
    """Made once per run state and filters; remade when the run changes; old files evicted; removed on close."""
    from rankscope.web.app import Runs, Timelines

    tiny_run(tmp_path / "tiny")
    runs = Runs(tmp_path, cache_dir=tmp_path.parent / f"{tmp_path.name}-cache")
    timelines = Timelines(runs, keep=2)

    class TL:  # get() hands out an open file (the response streams and closes it): its path here
        @staticmethod
        def get(*a: object) -> Path:
            with timelines.get(*a) as fh:
                return Path(fh.name)

        close = timelines.close

    tl = TL()
    a = tl.get("tiny", "perfetto", None, None)
    made = a.stat().st_mtime_ns
    assert tl.get("tiny", "perfetto", None, None) == a and a.stat().st_mtime_ns == made  # cached
    # Our own writes (analysis/ cache, which touches the run directory's mtime) are not a change of the run;
    # CI once saw the mtime tick between two calls and a cache miss (mtime resolution is a clock tick).
    touched = time.time() + 3
    os.utime(tmp_path / "tiny", (touched, touched))
    (tmp_path / "tiny" / "analysis").mkdir(exist_ok=True)  # serve writes none; a user's report may be there
    (tmp_path / "tiny" / "analysis" / "report.html").write_text("x")
    assert tl.get("tiny", "perfetto", None, None) == a and a.stat().st_mtime_ns == made
    b = tl.get("tiny", "json", [2], [1])
    assert b != a and b.suffix == ".json" and b.exists()
    later = time.time() + 5
    os.utime(tmp_path / "tiny" / "run.json", (later, later))  # the run changed: a new file
    c = tl.get("tiny", "perfetto", None, None)
    assert c != a and not a.exists() and b.exists()  # keep=2: the oldest went
    tl.close()
    assert not c.exists() and not c.parent.exists()


@pytest.mark.parametrize("path,code", [
    ("/runs/../timeline", 400), ("/runs/%2e%2e/timeline", 400), ("/runs/..%2Fsecret.txt/timeline", 404),
    ("/runs/notes/timeline", 404), ("/runs/nosuchrun/timeline", 404), ("/runs/.hidden/timeline", 400),
    ("/runs/slow1/timeline?format=..%2F..%2Fsecret.txt", 400), ("/runs/slow1/timeline?steps=..%2Fsecret", 400),
    ("/runs/slow1/timeline?ranks=7", 400), ("/runs/slow1/timeline?steps=0-99999999999", 400),
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
    assert served.get("/runs/healthy/timeline", "POST")[0] == 405


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


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_concurrent_timelines_while_evicting_and_served_dir_untouched(tmp_path: Path) -> None:
    """50 parallel timeline requests over 5 filter sets with a cache of 1 file: every response is
    whole (the file a response is sending may be evicted meanwhile); nothing under the served
    directory changes; no response shows an absolute path of the server."""
    import concurrent.futures

    import uvicorn

    from rankscope.web.app import Timelines, create_app

    root = tmp_path / "served"
    tiny_run(root / "tiny")
    before = _tree(root)
    orig_init = Timelines.__init__

    def small(self, runs, keep=8):  # type: ignore[no-untyped-def]
        orig_init(self, runs, keep=1)  # evict on every new filter set

    Timelines.__init__ = small  # type: ignore[method-assign]
    try:
        srv = Served.__new__(Served)
        srv.port = free_port()
        srv.server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=srv.port,
                                                   log_level="warning"))
        srv.thread = threading.Thread(target=srv.server.run, daemon=True)
        with srv:
            paths = [f"/runs/tiny/timeline?format=json&steps={s}" for s in ("", "1", "2", "1-2", "1,2")] * 10
            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                got = list(ex.map(srv.fetch, paths))
            assert [g[0] for g in got] == [200] * 50
            bodies: dict[str, set[bytes]] = {}
            for p, (_, headers, body) in zip(paths, got):
                assert int(headers["content-length"]) == len(body)
                json.loads(body)  # whole, parseable
                bodies.setdefault(p, set()).add(body)
            assert all(len(v) == 1 for v in bodies.values())  # same filters, same bytes
            for path in ("/api/runs", "/", "/runs/tiny/timeline?steps=1-999999", "/runs/nope"):
                _, _, body = srv.fetch(path)
                assert str(tmp_path) not in body.decode(errors="replace"), path
    finally:
        Timelines.__init__ = orig_init  # type: ignore[method-assign]
    assert _tree(root) == before  # no cache, no report, nothing written into the served directory


def test_link_out_of_the_served_directory_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "served"
    tiny_run(root / "tiny")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.pt.trace.json").write_text('{"traceEvents": [], "TOP": "SECRET"}')
    os.symlink(tmp_path / "elsewhere", root / "tiny" / "ranks" / "3")
    with Served(root) as srv:
        for path in ("/runs/tiny", "/runs/tiny/timeline", "/compare?run=tiny"):
            status, body = srv.get(path)
            assert status == 403 and "outside the served directory" in body and "SECRET" not in body, path
            assert str(tmp_path) not in body


def test_server_memory_bounded_over_many_timeline_filters(tmp_path: Path) -> None:
    """Each timeline is built in a child process: 12 different filter sets leave the server's RSS
    within 150 MB of where it was after the first (it was ~1.8 GB per long request before)."""
    import psutil

    root = tmp_path / "served"
    tiny_run(root / "tiny")
    with Served(root) as srv:
        assert srv.fetch("/runs/tiny/timeline?steps=1")[0] == 200
        rss0 = psutil.Process().memory_info().rss
        for k in range(12):
            assert srv.fetch(f"/runs/tiny/timeline?format=json&ranks={k % 2}&steps={1 + k % 2}")[0] in (200, 400)
        assert psutil.Process().memory_info().rss - rss0 < 150 * 2**20
