"""rankscope: profile PyTorch distributed training on every rank, get one diagnosis.

Importing this package is cheap: torch, pyarrow, polars and plotly are imported only
where they are used.

Collection (inside a training process)::

    import rankscope
    with rankscope.profile(run="s3://bucket/runs/exp1", schedule=...) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Analysis: ``rankscope analyze RUN``, or in a notebook ``rankscope.analyze(RUN)`` (tables as polars or
pandas DataFrames: see :mod:`rankscope.api` and docs/notebook.ipynb).
"""
from __future__ import annotations

from typing import Any

from rankscope.version import __version__

__all__ = ["__version__", "profile", "trace_handler", "load_run", "analyze", "comms", "rpc"]


def __getattr__(name: str) -> Any:
    # Lazy attributes keep `import rankscope` free of torch and the dataframe libraries.
    if name in ("profile", "trace_handler"):
        from rankscope import collect

        return getattr(collect, name)
    if name == "load_run":
        from rankscope.model.run import load_run

        return load_run
    if name == "comms":
        from rankscope.collect import comms

        return comms
    if name == "rpc":
        import importlib

        return importlib.import_module("rankscope.rpc")
    if name == "analyze":
        from rankscope.api import analyze

        return analyze
    raise AttributeError(f"module 'rankscope' has no attribute {name!r}")
