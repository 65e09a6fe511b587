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


def _flight_recorder_default() -> None:
    """Size torch's Flight Recorder ring (``TORCH_FR_BUFFER_SIZE=2000``) where nothing set it and no process
    group exists yet: it is what gives gloo's collectives their group and sequence number, for ~4 µs each
    (torch 2.13 already defaults to it; older torch leaves it off). ``RANKSCOPE_FLIGHT_RECORDER=0`` leaves
    the environment alone. When torch.distributed is already initialized the ring may be fixed:
    ``rankscope.profile`` then says whether it records (meta.json ``collectives_recorder``)."""
    import os
    import sys

    if os.environ.get("RANKSCOPE_FLIGHT_RECORDER", "1").strip().lower() in ("0", "off", "false", "no"):
        return
    if "TORCH_FR_BUFFER_SIZE" in os.environ or "TORCH_NCCL_TRACE_BUFFER_SIZE" in os.environ:
        return
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return
    except Exception:  # noqa: BLE001 - a half-imported torch: leave it alone
        return
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"


_flight_recorder_default()

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
