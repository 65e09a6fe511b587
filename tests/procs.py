"""Ending a torchrun job in a test: torchrun starts each worker in a session of its own
(torch.distributed.elastic's subprocess handler, ``start_new_session=True``), so killing torchrun's
process group leaves hung workers running until their own collective timeout, competing for this
machine's two cores with the tests that follow. ``kill_tree`` kills the workers too."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), children before grandchildren."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                # the command may hold spaces and parentheses: the fields after the last ")" are fixed
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def kill_tree(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGKILL ``proc``'s descendants (their sessions included), then its process group; then reap it."""
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout)


WHY = ("terminate called", "what():", "Error", "Exception", "Traceback", "Fatal", "Signal ", "Aborted", "SIGABRT")


def why_failed(stderr: str, tail: int = 1500) -> str:
    """A failed torchrun's story for an assertion message: the ranks' own error lines (printed long before
    torchrun's traceback, which alone fills the usual tail), the Python threads' stacks that faulthandler
    printed on a fatal signal (jobs run with PYTHONFAULTHANDLER=1: which thread was where at an abort),
    then the tail."""
    lines = stderr.splitlines()
    said = [x for x in lines if any(w in x for w in WHY)]
    fatal = next((i for i, x in enumerate(lines) if x.startswith("Fatal Python error")), None)
    stacks = lines[fatal:fatal + 60] if fatal is not None else []
    return "\n".join(said[:40] + stacks) + "\n[...]\n" + stderr[-tail:]
