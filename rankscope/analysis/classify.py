"""Which events are communication, and which are compute, on one rank (vectorized).

Pattern: a device kernel is communication when its name says so (case-insensitive ``nccl``,
``ncclDev``, ``rccl``, ``hccl``, ``gloo``: the ingest's ``is_comm`` flag) *or* when it was
launched by a communication CPU op (``record_param_comms``, ``nccl:*``, ``gloo:*``, ``hccl*``,
``c10d::*``), linked through the Kineto ``External id`` or through the runtime launch's
``correlation``. Either link alone is enough, so a renamed kernel or a missing CPU op never
turns communication into NaN or into compute.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

HOST_KINDS = ("cpu_op", "user_annotation", "python_function")
DEVICE_KINDS = ("kernel", "memcpy", "memset")
EVENT_COLS = ["name", "kind", "ts", "dur", "tid", "is_comm", "external_id", "correlation"]


def col(ev: pa.Table, name: str) -> np.ndarray:
    """A column as numpy (dictionary columns decoded to str: prefer ``dict_test`` on names)."""
    c = ev.column(name)
    if pa.types.is_dictionary(c.type):
        c = c.combine_chunks()
        dic = np.asarray(c.dictionary.to_pylist(), dtype=object).astype(str)
        idx = c.indices.to_numpy(zero_copy_only=False)
        return dic[idx] if len(dic) else np.asarray([""] * len(idx), dtype=str)
    return np.asarray(c.to_numpy(zero_copy_only=False))


def dict_test(ev: pa.Table, name: str, test: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``test`` (vectorized over strings) evaluated once per distinct value, gathered per row."""
    c = ev.column(name)
    if not pa.types.is_dictionary(c.type):
        return test(col(ev, name).astype(str))
    c = c.combine_chunks()
    dic = np.asarray(c.dictionary.to_pylist(), dtype=object).astype(str)
    hit = np.append(test(dic) if len(dic) else np.zeros(0, bool), False)
    idx = c.indices.fill_null(len(dic)).to_numpy(zero_copy_only=False)
    return hit[idx]


def kind_in(ev: pa.Table, kinds: tuple[str, ...]) -> np.ndarray:
    """Rows whose ``kind`` is one of ``kinds``."""
    return dict_test(ev, "kind", lambda d: np.isin(d, kinds))


def comm_mask(ev: pa.Table) -> np.ndarray:
    """Communication events: name flag, or a kernel linked to a communication CPU op."""
    flag = col(ev, "is_comm").astype(bool)
    host_comm = flag & kind_in(ev, HOST_KINDS)
    kernel = kind_in(ev, ("kernel",))
    out = flag.copy()
    if not kernel.any() or not host_comm.any():
        return out
    names = ev.column_names
    if "external_id" in names:
        ext = col(ev, "external_id")
        ids = np.unique(ext[host_comm & (ext >= 0)])
        out |= kernel & (ext >= 0) & np.isin(ext, ids)
    if "correlation" in names and "external_id" in names:
        # runtime launch (correlation -> external id) for kernels that lack an External id
        corr, ext = col(ev, "correlation"), col(ev, "external_id")
        rt = kind_in(ev, ("runtime",)) & (corr >= 0) & np.isin(ext, np.unique(ext[host_comm & (ext >= 0)]))
        out |= kernel & (corr >= 0) & np.isin(corr, corr[rt])
    return out


def is_recv(names: np.ndarray) -> np.ndarray:
    """Receive-side p2p operations (Ascend's 'Bubble' in pipeline parallelism)."""
    low = np.char.lower(names.astype(str))
    return (np.char.find(low, "recv") >= 0) & (np.char.find(low, "sendrecv") < 0)
