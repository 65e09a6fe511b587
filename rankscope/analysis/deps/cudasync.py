"""The waits of Kineto's CUDA sync events (``cat: cuda_sync``), which the events table does not keep.

"Event Sync" and "Stream Wait Event" name the CUDA event they wait on only in their args
(``wait_on_stream``, ``wait_on_cuda_event_record_corr_id``); HTA uses them to find the kernel a
``cudaEventSynchronize`` / ``cudaStreamWaitEvent`` waits for. rankscope's reader does not carry
these two args yet, so this reads them from a trace file: one table of (correlation,
wait_on_stream, wait_on_corr) per sync event, for ``events.from_table(..., syncs=)``.
"""
from __future__ import annotations

from typing import Any

import msgspec
import pyarrow as pa


class _Args(msgspec.Struct, rename={"wait_on_corr": "wait_on_cuda_event_record_corr_id"}):
    correlation: Any = None
    wait_on_stream: Any = None
    wait_on_corr: Any = None


class _Ev(msgspec.Struct):
    ph: str = ""
    cat: Any = None
    args: Any = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Ev] = []


def read_syncs(path: str) -> pa.Table:
    """(correlation, wait_on_stream, wait_on_corr) of the ``cuda_sync`` events of a Kineto file."""
    import gzip

    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = msgspec.json.decode(data, type=_Doc)
    rows: list[tuple[int, int, int]] = []
    for e in doc.traceEvents:
        if e.ph == "X" and e.cat == "cuda_sync" and isinstance(e.args, dict):
            a = msgspec.convert(e.args, _Args, strict=False)
            rows.append((_int(a.correlation), _int(a.wait_on_stream), _int(a.wait_on_corr)))
    cols = list(zip(*rows)) if rows else [(), (), ()]
    return pa.table({"correlation": pa.array(cols[0], pa.int64()), "wait_on_stream": pa.array(cols[1], pa.int64()),
                     "wait_on_corr": pa.array(cols[2], pa.int64())})


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
