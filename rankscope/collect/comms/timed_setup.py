"""Choosing the timed recorder with no change to the training script: ``RANKSCOPE_COMMS_TIMED`` and the
wrapping of ``init_process_group`` / ``new_group`` that ``-m rankscope.collect.comms.run --timed`` installs.
Split from :mod:`rankscope.collect.comms.timed_pg`."""
from __future__ import annotations

import logging
from typing import Any, Callable

from rankscope.collect.comms.timed_pg import timed_backend

log = logging.getLogger(__name__)


def mapped(backend: Any, ring: int, sample_every: int, stack: bool, poll: bool = False) -> Any:
    """``backend`` with gloo / nccl (plain or in "cpu:gloo,cuda:nccl" form) replaced by their timed wrappers."""
    import torch.distributed as dist

    if backend is None:
        backend = "nccl" if cuda() else "gloo"
    text = str(backend).lower()
    if not isinstance(backend, (str, dist.Backend)) or text.startswith("rankscope_"):
        return backend

    def one(b: str) -> str:
        return timed_backend(b, ring, sample_every, stack, poll) if b in ("gloo", "nccl") else b

    if ":" in text:
        pairs = [p.split(":", 1) for p in text.split(",")]
        if len({b for _, b in pairs}) > 1:
            # torch takes a backend that is a ProcessGroup as the whole group and stops at the first device
            # (_new_process_group_helper), so "cpu:rankscope_gloo,cuda:rankscope_nccl" would lose NCCL
            log.warning("rankscope: the timed recorder wraps one backend per group; %r is left as it is "
                        "(Flight Recorder still records it)", backend)
            return backend
        return ",".join(f"{dev}:{one(b)}" for dev, b in pairs)
    return one(text)


def cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def install(ring: int = 2000, sample_every: int = 1, stack: bool = False, poll: bool = False) -> Callable[[], None]:
    """Make this process's ``init_process_group`` and ``new_group`` use the timed wrappers of gloo / nccl
    (no change to the training script); returns the function that restores them."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    orig_init, orig_new = c10d.init_process_group, c10d.new_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        return orig_init(mapped(backend, ring, sample_every, stack, poll), *args, **kwargs)

    def new_group(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") is not None:
            kwargs["backend"] = mapped(kwargs["backend"], ring, sample_every, stack, poll)
        return orig_new(*args, **kwargs)

    dist.init_process_group = c10d.init_process_group = init_process_group  # type: ignore[assignment]
    dist.new_group = c10d.new_group = new_group  # type: ignore[assignment]

    def restore() -> None:
        dist.init_process_group = c10d.init_process_group = orig_init  # type: ignore[assignment]
        dist.new_group = c10d.new_group = orig_new  # type: ignore[assignment]

    return restore


def from_env() -> dict[str, Any] | None:
    """``RANKSCOPE_COMMS_TIMED``: "1" or "sample=16,ring=5000,stack=1,poll=1"; unset, "" or "0": None."""
    import os

    raw = os.environ.get("RANKSCOPE_COMMS_TIMED", "").strip()
    if raw in ("", "0", "off", "false"):
        return None
    opts: dict[str, Any] = {"ring": 2000, "sample_every": 1, "stack": False, "poll": False}
    for part in raw.split(","):
        k, _, v = (x.strip() for x in part.partition("="))
        if k == "sample" and v:
            opts["sample_every"] = int(v)
        elif k == "ring" and v:
            opts["ring"] = int(v)
        elif k == "stack":
            opts["stack"] = v not in ("0", "off", "false")
        elif k == "poll":
            opts["poll"] = v not in ("0", "off", "false")
    return opts
