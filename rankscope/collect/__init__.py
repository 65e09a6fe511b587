"""Collection inside training processes: the only package that imports torch (lazily).

``profile`` and ``trace_handler`` are loaded on first use so ``import rankscope.collect``
stays light.
"""
from __future__ import annotations

from typing import Any

__all__ = ["profile", "trace_handler"]


def __getattr__(name: str) -> Any:
    if name == "profile":
        from rankscope.collect.profiler import profile

        return profile
    if name == "trace_handler":
        from rankscope.collect.handler import trace_handler

        return trace_handler
    raise AttributeError(f"module 'rankscope.collect' has no attribute {name!r}")
