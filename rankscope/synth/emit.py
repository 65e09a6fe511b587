"""Kineto trace events for one rank, in the schema of real torch.profiler traces.

Times come from :mod:`rankscope.synth.simulate` (true clock) and are converted to the
rank's clock in bulk with numpy; only the final dict assembly walks op by op, since JSON
objects have to be built one at a time (orjson then serializes them in C).
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from rankscope.synth.clock import RankClock
from rankscope.synth.config import SynthConfig
from rankscope.synth.program import COLL, DATA, MEMCPY, MEMSET, SYNC, AUTOGRAD, Coll, Program, Template
from rankscope.synth.simulate import StepTimes, slot
from rankscope.synth.rankinfo import RankIdentity

NCCL_KERNEL = {"allreduce": "ncclDevKernel_AllReduce_Sum_{t}_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               "broadcast": "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"}
NCCL_T = {"Float": "f32", "BFloat16": "bf16", "Long": "i64"}
C10D = {"allreduce": ("c10d::allreduce_", "nccl:all_reduce"), "broadcast": ("c10d::broadcast_", "nccl:broadcast")}
RUNTIME = {MEMCPY: ("cudaMemcpyAsync", 41), MEMSET: ("cudaMemsetAsync", 51), SYNC: ("cudaMemcpyAsync", 41)}


def format_list(values: list[int]) -> str:
    """torch's ``format_list``: ``"[0, 1]"``, truncated after 30 entries like the profiler does."""
    if len(values) > 30:
        return "[" + ", ".join(map(str, values[:30])) + ", ...]"
    return "[" + ", ".join(map(str, values)) + "]"


class Emitter:
    """Builds one rank's ``traceEvents``; ids are allocated in order, so output is deterministic."""

    def __init__(self, cfg: SynthConfig, prog: Program, ident: RankIdentity, clock: RankClock) -> None:
        self.cfg, self.prog, self.id, self.clock = cfg, prog, ident, clock
        self.cpu: list[dict[str, Any]] = []
        self.gpu: list[dict[str, Any]] = []
        self.ext, self.corr, self.ev_idx = ident.ext_base, ident.corr_base, 0
        self.allocated, self.reserved = ident.mem_base, ident.mem_base + (512 << 20)
        self.addr = 0x7F3A00000000 + (ident.rank << 32)
        self.coll_meta = self._coll_meta()
        self.kinds = [int(x) for x in prog.kind]
        self._shape_cache: dict[int, Any] = {}

    # ---- per-collective static metadata, copied from record_param_comms in real NCCL traces
    def _coll_meta(self) -> list[dict[str, Any]]:
        groups = self.cfg.groups_of(self.id.rank)
        out: list[dict[str, Any]] = []
        per_step: dict[str, int] = {}
        for i in self.prog.coll_index():
            c: Coll = self.prog.ref[i]
            g = groups[slot(self.cfg, c.group)]
            ranks = list(g.ranks)
            stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
            nel_out = c.nelems
            meta = {"Collective name": c.op, "dtype": c.dtype, "In msg nelems": c.nelems,
                    "Out msg nelems": nel_out, "In split size": "[]", "Out split size": "[]",
                    "Global rank start": ranks[0], "Global rank stride": stride, "Group size": len(ranks),
                    "Process Group Name": g.name, "Process Group Description": g.desc,
                    "Process Group Ranks": format_list(ranks), "Rank": ranks.index(self.id.rank)}
            out.append({"meta": meta, "slot_index": per_step.get(g.name, 0), "pg": g.name, "coll": c})
            per_step[g.name] = per_step.get(g.name, 0) + 1
        for m in out:
            m["per_step"] = per_step[m["pg"]]
        return out

    def seq(self, k: int, step: int) -> int:
        """NCCL sequence number of collective ``k`` in profiled ``step`` (same on every member)."""
        m = self.coll_meta[k]
        return (self.cfg.first_step + step) * m["per_step"] + m["slot_index"] + 1

    def _cpu(self, name: str, cat: str, tid: int, ts: float, dur: float, args: dict[str, Any]) -> None:
        args["Ev Idx"] = self.ev_idx
        self.ev_idx += 1
        self.cpu.append({"ph": "X", "cat": cat, "name": name, "pid": self.id.pid, "tid": tid,
                         "ts": ts, "dur": dur, "args": args})

    def _flow(self, tid: int, ts: float, dev_ts: float, stream: int, corr: int) -> None:
        self.cpu.append({"ph": "s", "id": corr, "pid": self.id.pid, "tid": tid, "ts": ts, "cat": "ac2g",
                         "name": "ac2g"})
        self.gpu.append({"ph": "f", "id": corr, "pid": self.id.device, "tid": stream, "ts": dev_ts,
                         "cat": "ac2g", "name": "ac2g", "bp": "e"})

    # ---- one step
    def step(self, s: int, st: StepTimes, step_end_ns: int) -> None:
        """Emit every event of profiled step ``s`` (0-based) from its true times."""
        rows, kinds = self._local(st), self.kinds
        step_no = self.cfg.first_step + s
        start = self.clock.ts_us(np.array([st.t[0, 0], step_end_ns]))
        self._cpu(f"ProfilerStep#{step_no}", "user_annotation", self.id.pid, float(start[0]),
                  round(float(start[1] - start[0]), 3), {"External id": self._next_ext(), "Record function id": 0})
        k = 0
        for i, ref in enumerate(self.prog.ref):
            tid = self.id.autograd_tid if self.prog.thread[i] == AUTOGRAD else self.id.pid
            if self.prog.kind[i] == COLL:
                self._coll(k, s, tid, rows[i])
                k += 1
            else:
                self._op(ref, kinds[i], tid, rows[i])

    def _local(self, st: StepTimes) -> list[list[float]]:
        """Rank-clock times of every op, vectorized; one row per op:
        ``[start0..3, dur0..3, launch ts, launch dur, device ts, device dur]`` (us, depth 0..3).
        """
        t, d = st.t[:, 0], st.cpu[:, 0]
        # ``loss.item()`` blocks the host until its device-to-host copy is done, inside the copy's
        # runtime call as in real CUDA traces: its ops nest 1 us apart, the call is issued at once
        # and returns after the copy ended (the host's time there is the wait for the device).
        sync = self.prog.kind == SYNC
        delta = np.where(sync, 1_000, d // 33)
        starts = [t + j * delta for j in range(4)]
        ends = [t + d - j * delta for j in range(4)]
        ls = np.where(sync, t + 2_000, t + d * 55 // 100)
        le = np.where(sync, t + d - 1_500, ls + d * 30 // 100)
        ts = self.clock.ts_us(np.stack(starts + ends + [ls, le]))
        de = self.clock.ts_us(np.stack([st.ks[:, 0], st.ks[:, 0] + st.kd[:, 0]]))
        durs = np.round(ts[4:8] - ts[:4], 3)
        rows = np.concatenate([ts[:4], durs, ts[8:9], np.round(ts[9:10] - ts[8:9], 3),
                               de[:1], np.round(de[1:] - de[:1], 3)])
        return rows.T.tolist()

    def _next_ext(self, n: int = 1) -> int:
        e = self.ext
        self.ext += n
        return e

    def _op(self, tpl: Template, kind: int, tid: int, row: list[float]) -> None:
        depth = len(tpl.cpu)
        ext = self._next_ext(depth)
        dims, types = self._shapes(tpl)
        for j, name in enumerate(tpl.cpu):
            args: dict[str, Any] = {"External id": ext + j, "Record function id": 0}
            cat = "user_annotation" if tpl.user_annotation and j == 0 else "cpu_op"
            if cat == "cpu_op" and dims:
                args["Input Dims"], args["Input type"] = dims, types
            self._cpu(name, cat, tid, row[j], row[4 + j], args)
        if tpl.mem_bytes:
            self._memory(tid, row[depth - 1] + 0.5, tpl.mem_bytes)
        if kind == DATA:
            return
        corr = self.corr
        self.corr += 1
        rt_name, cbid = RUNTIME.get(kind, ("cudaLaunchKernel", 211))
        self._cpu(rt_name, "cuda_runtime", tid, row[8], row[9],
                  {"External id": ext + depth - 1, "cbid": cbid, "correlation": corr})
        self._device(tpl, kind, ext + depth - 1, corr, row[10], row[11])
        self._flow(tid, row[8], row[10], self.id.compute_stream, corr)

    def _shapes(self, tpl: Template) -> tuple[list, list]:
        # shared (never mutated) lists: orjson serializes them each time, we build them once
        got = self._shape_cache.get(id(tpl))
        if got is None:
            got = self._shape_cache[id(tpl)] = ([list(x) for x in tpl.dims], list(tpl.types))
        return got

    def _device(self, tpl: Template, kind: int, ext: int, corr: int, ts: float, dur: float) -> None:
        dev, stream = self.id.device, self.id.compute_stream
        args: dict[str, Any] = {"External id": ext, "device": dev, "context": 1, "stream": stream, "correlation": corr}
        if kind in (MEMCPY, MEMSET, SYNC):
            nbytes = max(4, tpl.mem_bytes or int(np.prod(tpl.dims[0] or [1])) * 4)
            args["bytes"] = nbytes
            args["memory bandwidth (GB/s)"] = nbytes / max(dur, 1e-3) / 1e3
            cat = "gpu_memset" if kind == MEMSET else "gpu_memcpy"
        else:
            cat = "kernel"
            args.update(self._kernel_static(tpl))
        self.gpu.append({"ph": "X", "cat": cat, "name": tpl.device, "pid": dev, "tid": stream, "ts": ts,
                         "dur": dur, "args": args})

    def _kernel_static(self, tpl: Template) -> dict[str, Any]:
        key = -id(tpl)
        got = self._shape_cache.get(key)
        if got is None:
            blocks = tpl.grid[0] * tpl.grid[1] * tpl.grid[2]
            got = self._shape_cache[key] = {
                "queued": 0, "registers per thread": 128, "shared memory": 0,
                "blocks per SM": round(blocks / 108, 6), "warps per SM": round(blocks * tpl.block[0] / 32 / 108, 6),
                "grid": list(tpl.grid), "block": list(tpl.block), "est. achieved occupancy %": 50}
        return got

    def _memory(self, tid: int, ts: float, nbytes: int) -> None:
        self.allocated += nbytes
        self.reserved = max(self.reserved, -(-self.allocated // (2 << 20)) * (2 << 20))
        self.addr += abs(nbytes) if nbytes > 0 else 0
        self.cpu.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.id.pid,
                         "tid": tid, "ts": ts,
                         "args": {"Total Reserved": self.reserved, "Total Allocated": self.allocated,
                                  "Bytes": nbytes, "Device Id": self.id.device, "Device Type": 1,
                                  "Addr": self.addr, "Ev Idx": self._bump()}})

    def _bump(self) -> int:
        self.ev_idx += 1
        return self.ev_idx - 1

    def _coll(self, k: int, s: int, tid: int, row: list[float]) -> None:
        m = self.coll_meta[k]
        c: Coll = m["coll"]
        outer, ann = C10D[c.op]
        ext = self._next_ext(3)
        seq = self.seq(k, s)
        self._cpu(outer, "cpu_op", tid, row[0], row[4],
                  {"External id": ext, "Record function id": 0, "Input Dims": [[c.nelems], [], [], [], []],
                   "Input type": [c.dtype, "ScriptObject", "ScriptObject", "", "Int"]})
        meta = {**m["meta"], "Seq": seq, "Comms Id": _comms_id(m["pg"], seq), "Is asynchronized op": 1}
        self._cpu("record_param_comms", "cpu_op", tid, row[1], row[5],
                  {"External id": ext + 1, "Record function id": 0, **meta})
        self._cpu(ann, "user_annotation", tid, row[2], row[6],
                  {"External id": ext + 2, "Record function id": 0})
        corr = self.corr
        self.corr += 1
        self._cpu("cudaLaunchKernelExC", "cuda_runtime", tid, row[8], row[9],
                  {"External id": ext + 1, "cbid": 430, "correlation": corr})
        stream = self.id.nccl_streams[m["pg"]]
        ts, dur = row[10], row[11]
        kname = NCCL_KERNEL[c.op].format(t=NCCL_T[c.dtype])
        self.gpu.append({"ph": "X", "cat": "kernel", "name": kname, "pid": self.id.device, "tid": stream,
                         "ts": ts, "dur": dur,
                         "args": {"External id": ext + 1, "queued": 0, "device": self.id.device, "context": 1,
                                  "stream": stream, "correlation": corr, "registers per thread": 96,
                                  "shared memory": 87568, "blocks per SM": 0.074074, "warps per SM": 1.259259,
                                  "grid": [8, 1, 1], "block": [544, 1, 1], "est. achieved occupancy %": 0,
                                  **{key: m["meta"][key] for key in KERNEL_META}}})
        self.gpu.append({"ph": "X", "cat": "gpu_user_annotation", "name": ann, "pid": self.id.device,
                         "tid": stream, "ts": round(ts - 0.001, 3), "dur": round(dur + 0.002, 3),
                         "args": {"External id": ext + 2}})
        self._flow(tid, row[8], ts, stream, corr)


KERNEL_META = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "In split size",
               "Out split size", "Process Group Name", "Process Group Description", "Process Group Ranks")


def _comms_id(pg: str, seq: int) -> int:
    """A stable 63-bit id of (group, seq), standing in for torch's ``c10::get_hash``."""
    return int.from_bytes(hashlib.blake2b(f"{pg}:{seq}".encode(), digest_size=8).digest(), "big") >> 1
