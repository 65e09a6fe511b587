"""One rank's events as numpy columns, with what the dependency graph needs derived once.

Pattern: read the rankscope events table (``model/schema.EVENTS``) of one rank and derive, per
event, its kind (an int code), whether it runs on a device (HTA's rule: a stream), its CUDA sync
kind, and the event on the other side of its correlation id (launch <-> device op), the same join
HTA's ``transform_correlation_to_index`` makes. Names stay dictionary-encoded: string tests run
over the (small) dictionary, then gather.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rankscope.analysis.deps import taskqueue

if TYPE_CHECKING:
    import pyarrow as pa


class K(enum.IntEnum):
    """Event kinds (``model/schema.Kind`` as small ints)."""

    OTHER = 0
    CPU_OP = 1
    RUNTIME = 2
    ANNOTATION = 3
    PYTHON = 4
    KERNEL = 5
    MEMCPY = 6
    MEMSET = 7
    GPU_ANNOTATION = 8


_KIND = {"cpu_op": K.CPU_OP, "runtime": K.RUNTIME, "user_annotation": K.ANNOTATION, "python_function": K.PYTHON,
         "kernel": K.KERNEL, "memcpy": K.MEMCPY, "memset": K.MEMSET, "gpu_user_annotation": K.GPU_ANNOTATION}


class Sync(enum.IntEnum):
    """CUDA synchronization events (Kineto category ``cuda_sync``), by name."""

    NONE = 0
    STREAM = 1  # "Stream Sync": cudaStreamSynchronize
    CONTEXT = 2  # "Context Sync": cudaDeviceSynchronize
    EVENT = 3  # "Event Sync": cudaEventSynchronize
    WAIT_EVENT = 4  # "Stream Wait Event": cudaStreamWaitEvent


SYNC_NAMES = {"Stream Sync": Sync.STREAM, "Context Sync": Sync.CONTEXT, "Event Sync": Sync.EVENT,
              "Stream Wait Event": Sync.WAIT_EVENT}
# Runtime calls that block the host until the device catches up (HTA's CPGraph.BLOCKING_SYNC_CALLS).
BLOCKING = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize",
            "cudaMemcpy", "cudaMemcpyAsync")
# The same on Ascend (CANN's runtime API as torch_npu's trace names it): they wait for every task the host issued
# before them, and no device-side event says which (``timed.blocking_syncs``).
ASCEND_BLOCKING = ("AscendCL@aclrtSynchronizeStream", "AscendCL@aclrtSynchronizeStreamWithTimeout",
                   "AscendCL@aclrtSynchronizeDevice", "AscendCL@aclrtSynchronizeDeviceWithTimeout",
                   "AscendCL@aclrtSynchronizeEvent", "AscendCL@aclrtMemcpy")
# Runtime calls that put work on a stream (HTA's get_runtime_launch_events_query).
LAUNCHES = ("cudaMemsetAsync", "cudaMemcpyAsync", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
            "runFunction - job_prep_and_submit_for_execution", "hipLaunchKernel", "hipExtModuleLaunchKernel",
            "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream")
COLUMNS = ["name", "kind", "ts", "dur", "tid", "stream", "correlation", "is_comm", "input_dims"]


@dataclass
class RankEvents:
    """Numpy columns of one rank's events (row i = event i of the table)."""

    names: np.ndarray  # object array: the name dictionary
    name_idx: np.ndarray  # int32 per event
    kind: np.ndarray  # int8 K codes
    ts: np.ndarray  # int64 ns
    dur: np.ndarray  # int64 ns
    tid: np.ndarray  # int64
    stream: np.ndarray  # int64, -1 on the host
    corr: np.ndarray  # int64 correlation id, -1 when none
    is_comm: np.ndarray  # bool
    dims: np.ndarray  # object array: input shapes dictionary
    dims_idx: np.ndarray  # int32 per event
    wait_on_stream: np.ndarray  # int64: the stream a sync event waits on (-1: unknown)
    wait_on_corr: np.ndarray  # int64: correlation of the cudaEventRecord it waits on (-1: unknown)
    own_corr: np.ndarray | None = None  # device ops given a correlation here: no launch (``_own_correlations``)
    queued_from: np.ndarray | None = None  # per Dequeue of torch_npu's task queue, its Enqueue (``taskqueue``); else -1
    memo: dict[Any, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self._memo("end", lambda: self.ts + np.maximum(self.dur, 0))

    def _memo(self, key: str, make: Any) -> Any:
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def name_in(self, values: tuple[str, ...] | set[str]) -> np.ndarray:
        """Events whose name is one of ``values`` (tested over the dictionary)."""
        hit = np.array([str(s) in values for s in self.names] + [False], dtype=bool)
        return hit[self.name_idx]

    def name_has(self, parts: tuple[str, ...]) -> np.ndarray:
        """Events whose lower-case name contains one of ``parts``."""
        key = ("has",) + parts
        if key not in self.memo:
            hit = np.array([any(p in str(s).lower() for p in parts) for s in self.names] + [False], dtype=bool)
            self.memo[key] = hit[self.name_idx]
        return self.memo[key]

    def name_of(self, i: int) -> str:
        return str(self.names[self.name_idx[i]])

    @property
    def sync(self) -> np.ndarray:
        """Sync kind per event (``Sync`` codes)."""
        def make() -> np.ndarray:
            code = np.array([int(SYNC_NAMES.get(str(s), Sync.NONE)) for s in self.names] + [0], dtype=np.int8)
            return code[self.name_idx]
        return self._memo("sync", make)

    @property
    def device(self) -> np.ndarray:
        """Events on the device side of a correlation: a stream, or an Event / Context Sync (HTA's
        ``_filter_gpu_kernels_with_cuda_sync``: those two sit on stream -1 but run on the GPU)."""
        return self._memo("device", lambda: ((self.stream >= 0) & (self.corr >= 0))
                          | np.isin(self.sync, (Sync.EVENT, Sync.CONTEXT)))

    @property
    def launch(self) -> np.ndarray:
        """Host calls that put work on a stream: HTA's launch calls by name (CUDA, HIP), and on other devices any host
        op the trace links to a device op (torch_npu's flows: ``model/readers/ascend/flows``)."""
        def make() -> np.ndarray:
            vendor = np.array([str(s).startswith(("cu", "hip")) for s in self.names] + [False], bool)[self.name_idx]
            p = self.partner
            linked = (self.stream < 0) & (p >= 0) & ~vendor
            linked[linked] = self.stream[p[linked]] >= 0
            return self.name_in(set(LAUNCHES)) | linked
        return self._memo("launch", make)

    @property
    def partner(self) -> np.ndarray:
        """The event on the other side of the correlation id (launch <-> device op), -1 if none.

        HTA's ``index_correlation``: host-side events with a correlation are matched to device-side
        events with the same correlation (an inner join; a correlation seen twice keeps the last)."""
        return self._memo("partner", self._partner)

    def _partner(self) -> np.ndarray:
        out = np.full(self.n, -1, dtype=np.int64)
        has = self.corr >= 0
        dev = np.flatnonzero(has & self.device)
        host = np.flatnonzero(has & ~self.device)
        if not len(dev) or not len(host):
            return out
        order = host[np.argsort(self.corr[host], kind="stable")]
        keys = self.corr[order]
        pos = np.searchsorted(keys, self.corr[dev], side="right") - 1
        ok = (pos >= 0) & (keys[np.maximum(pos, 0)] == self.corr[dev])
        d, h = dev[ok], order[pos[ok]]
        out[d], out[h] = h, d
        return out


def from_table(t: "pa.Table", syncs: "pa.Table | None" = None) -> RankEvents:
    """``RankEvents`` from a rankscope events table (and optionally the sync waits: a table of
    ``correlation``, ``wait_on_stream``, ``wait_on_corr`` of the ``cuda_sync`` events)."""
    name = t.column("name").combine_chunks()
    kind = t.column("kind").combine_chunks()
    dims = t.column("input_dims").combine_chunks() if "input_dims" in t.column_names else None
    kcode = np.array([int(_KIND.get(str(k), K.OTHER)) for k in kind.dictionary.to_pylist()] + [0], dtype=np.int8)
    n = t.num_rows
    corr = _ints(t, "correlation", n)
    ev = RankEvents(
        names=np.asarray(name.dictionary.to_pylist() + [""], dtype=object),
        name_idx=_indices(name), kind=kcode[_indices(kind)],
        ts=_ints(t, "ts", n), dur=_ints(t, "dur", n), tid=_ints(t, "tid", n), stream=_ints(t, "stream", n),
        corr=corr, is_comm=_ints(t, "is_comm", n) > 0,
        dims=np.asarray((dims.dictionary.to_pylist() if dims is not None else []) + [""], dtype=object),
        dims_idx=_indices(dims) if dims is not None else np.zeros(n, np.int32),
        wait_on_stream=np.full(n, -1, np.int64), wait_on_corr=np.full(n, -1, np.int64))
    if syncs is not None and syncs.num_rows:
        _add_syncs(ev, syncs)
    taskqueue.relaunch(ev)
    _own_correlations(ev)
    return ev


def _own_correlations(ev: RankEvents) -> None:
    """A correlation id of its own for each device op that has none (an Ascend task whose launch the trace does not
    link, an HCCL operation), so that it is a node of the graph; Kineto gives every kernel, copy and set one."""
    lost = np.flatnonzero((ev.corr < 0) & (ev.stream >= 0) & np.isin(ev.kind, (K.KERNEL, K.MEMCPY, K.MEMSET)))
    base = int(ev.corr.max()) + 1 if ev.n else 0
    if len(lost) and base < (1 << 62):
        ev.corr = ev.corr.copy()  # the table's own buffer may be read-only
        ev.corr[lost] = base + np.arange(len(lost), dtype=np.int64)
        ev.own_corr = np.zeros(ev.n, bool)  # ``graph.window`` takes these by their own start: no launch says when
        ev.own_corr[lost] = True  # they were issued


def _indices(arr: Any) -> np.ndarray:
    """Dictionary indices with nulls pointing at the extra "" slot appended to the dictionary."""
    idx = arr.indices.to_numpy(zero_copy_only=False)
    if arr.null_count:
        idx = np.where(np.asarray(arr.is_null()), len(arr.dictionary), idx)
    return np.asarray(idx, dtype=np.int32)


def _ints(t: "pa.Table", col: str, n: int) -> np.ndarray:
    """An integer column as int64 numpy (nulls -> -1) without pyarrow.compute (it imports pandas)."""
    if col not in t.column_names:
        return np.full(n, -1, np.int64)
    c = t.column(col)
    if c.null_count == 0:
        return np.asarray(c.to_numpy(), dtype=np.int64)
    valid = np.concatenate([np.asarray(ch.is_valid()) for ch in c.chunks]) if c.num_chunks else np.zeros(0, bool)
    vals = np.concatenate([np.asarray(ch.to_numpy(zero_copy_only=False)) for ch in c.chunks])
    return np.where(valid, np.nan_to_num(vals.astype(np.float64)), -1).astype(np.int64) if vals.dtype.kind == "f" \
        else np.where(valid, vals, -1).astype(np.int64)


def _add_syncs(ev: RankEvents, syncs: "pa.Table") -> None:
    """Fill ``wait_on_*`` of the sync events from a table keyed by the sync event's correlation."""
    c = np.asarray(syncs.column("correlation").to_numpy(zero_copy_only=False), dtype=np.int64)
    ws = np.asarray(syncs.column("wait_on_stream").to_numpy(zero_copy_only=False), dtype=np.int64)
    wc = np.asarray(syncs.column("wait_on_corr").to_numpy(zero_copy_only=False), dtype=np.int64)
    rows = np.flatnonzero(ev.sync != Sync.NONE)
    order = np.argsort(c, kind="stable")
    pos = np.searchsorted(c[order], ev.corr[rows])
    ok = pos < len(c)
    ok[ok] = c[order][pos[ok]] == ev.corr[rows][ok]
    ev.wait_on_stream[rows[ok]] = ws[order][pos[ok]]
    ev.wait_on_corr[rows[ok]] = wc[order][pos[ok]]
