"""Let ``destroy_process_group`` free the world process group of a profiled job.

``torch.distributed.nn.functional`` writes ``group=group.WORLD`` as default arguments (torch 2.13,
``torch/distributed/nn/functional.py``). Imported after ``init_process_group``, its ten functions keep the
world ProcessGroup as a default for the life of the process. torch.profiler imports it on its first start
(``prepare_trace`` touches ``torch._inductor``, which imports ``torch._dynamo``, which imports it), so in any
job that profiles after ``init_process_group`` -- plain torch.profiler as much as rankscope -- the group
outlives ``destroy_process_group``: gloo's worker threads are never joined, and one that drops its last
Work while Python finalizes aborts the process ("terminate called without an active exception", SIGABRT;
6 of 40 two-rank runs of ``rankscope.demo.workloads.moe`` on 2 vCPUs, 0 of 40 with this release).

:func:`release` imports that module before the profiler does and replaces each default that is a live
ProcessGroup with ``None``, which every one of those functions reads as the default group: what they
would hold had they been imported before ``init_process_group``.
"""
from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)
MODULE = "torch.distributed.nn.functional"


def release() -> int:
    """Drop the world-group defaults of ``torch.distributed.nn.functional``; the number replaced. Never raises."""
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return 0
        import importlib

        mod = sys.modules.get(MODULE) or importlib.import_module(MODULE)
        return _replace(vars(mod).values(), dist.ProcessGroup)
    except Exception as exc:  # noqa: BLE001 - only a leak avoided; never the job's failure
        log.debug("rankscope: world-group defaults left as they are: %s", exc)
        return 0


def _replace(objs: Any, group_type: type) -> int:
    n = 0
    for fn in objs:
        if not callable(fn) or not hasattr(fn, "__defaults__"):
            continue
        if fn.__defaults__ and any(isinstance(d, group_type) for d in fn.__defaults__):
            fn.__defaults__ = tuple(None if isinstance(d, group_type) else d for d in fn.__defaults__)
            n += 1
        kw = fn.__kwdefaults__
        if kw and any(isinstance(d, group_type) for d in kw.values()):
            fn.__kwdefaults__ = {k: None if isinstance(d, group_type) else d for k, d in kw.items()}
            n += 1
    return n
