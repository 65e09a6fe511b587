"""Real S3 for tests: moto's standalone server on 127.0.0.1, plus a TCP proxy that can cut links.

Import the fixtures into a test module::

    from tests.fixtures_s3 import moto_server, s3_env  # noqa: F401
"""
from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range, never the same twice in this process.

    A port the kernel handed out for ``bind(0)`` goes back to the ephemeral pool once released: between this
    call and the job's own bind, another job's listener (TensorPipe's, gloo's) or outgoing connection could
    take it. Seen in CI (#23 test): an RPC run's TCPStore met EADDRINUSE, its peers' store handshake reached
    the other run's TensorPipe listener, and that worker died of ``std::bad_alloc``. The kernel never hands
    out a port below ``ip_local_port_range`` on its own, so only another caller of this function could take
    one, and it picks at random from some 12,000.
    """
    low = _ephemeral_low()
    if low > 3072:
        pick = random.SystemRandom()
        for _ in range(500):
            port = pick.randrange(max(1024, low - 12000), low)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket() as s:  # no room below the ephemeral range: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MotoServer:
    """A running moto server and the environment that points s3fs at it."""

    endpoint: str
    env: dict[str, str]

    def bucket(self) -> str:
        """Create a fresh bucket and return its name."""
        import s3fs

        name = f"rs-{uuid.uuid4().hex[:10]}"
        s3fs.S3FileSystem(endpoint_url=self.endpoint, key="test", secret="test").mkdir(name)
        return name


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto server did not listen on {port}")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """Start ``python -m moto.server`` on a free loopback port for the session."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port)
        endpoint = f"http://127.0.0.1:{port}"
        env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": endpoint, "FSSPEC_S3_ENDPOINT_URL": endpoint,
               "AWS_EC2_METADATA_DISABLED": "true"}
        yield MotoServer(endpoint, env)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture()
def s3_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """moto server with its credentials/endpoint set in os.environ for this test only."""
    for k, v in moto_server.env.items():
        monkeypatch.setenv(k, v)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return moto_server


class FaultProxy:
    """TCP proxy on 127.0.0.1 in front of a server; ``cut_after`` bytes kills each connection.

    Used to make a real S3 upload fail in the middle of its body (the server never receives
    a complete request), then heal (``cut_after = None``).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.cut_after: int | None = None
        self.cuts = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, request: bool) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                limit = self.cut_after if request else None
                if limit is not None and sent + len(data) > limit:
                    self.cuts += 1
                    raise OSError("cut")
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._stop = True
        self._sock.close()


def free_env_without_aws() -> dict[str, str]:
    """os.environ without any AWS credential variables (for the missing-credentials test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent/rankscope-test"
    env["AWS_CONFIG_FILE"] = "/nonexistent/rankscope-test"
    return env
