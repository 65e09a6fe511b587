"""RPC profiling across workers: what a remote call did, in the caller's profile.

While ``rankscope.rpc.profile()`` (or ``rankscope.profile(...)``) records, ``torch.distributed.rpc``'s
``rpc_sync``, ``rpc_async`` and ``remote`` are replaced by the wrappers here (same signatures; also
usable directly). Each call runs on the callee under the profiler with the caller's options; its events
come back with the result and are placed on the caller's clock (NTP-style offset per call, with its
error bound). See docs/rpc.md.

Example::

    import torch, rankscope.rpc
    with rankscope.rpc.profile() as prof:
        rankscope.rpc.rpc_sync("worker1", torch.mm, args=(a, b))
    print(prof.table())
"""
from __future__ import annotations

from rankscope.collect.rpc.session import profile
from rankscope.collect.rpc.state import WRAPPERS, patched, remote, rpc_async, rpc_sync

__all__ = ["profile", "rpc_sync", "rpc_async", "remote", "patched", "WRAPPERS"]
