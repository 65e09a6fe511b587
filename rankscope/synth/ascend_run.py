"""A realistic multi-rank torch_npu profiler run on disk: one ``*_ascend_pt`` folder per rank.

Example::

    from rankscope.synth.ascend_run import write_run
    dirs = write_run("/tmp/npu_run")          # 4 ranks, TP 2 x PP 2, slow rank 3, slow link 0-1

Each folder holds profiler_info_<rank>.json, profiler_metadata.json (distributed_args with the
Megatron sizes, parallel_group_info, ENV_VARIABLES) and ASCEND_PROFILER_OUTPUT/{trace_view.json,
step_trace_time.csv, communication.json, communication_matrix.json}; file rules in ascend_files.py.
trace_view.json carries Level1 data: Python, CANN, Ascend Hardware, HCCL (one op-level thread
"Group <hash> Communication" per group and task-level "Plane" threads with Notify_Wait, Memcpy,
RDMASend, Notify_Record) and Overlap Analysis. The host issues each task ahead of the device
(``issue_times``), linked to it by a ``torch_to_npu`` flow as torch_npu writes them, and waits for the
step's last task in ``loss.item()`` (``aclrtSynchronizeStream``). With ``AscendJob.task_queue``, each op only
enqueues its work and a second thread dequeues it and makes the CANN call, as torch_npu's task queue does.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rankscope.synth.ascend_files import (OUT, _kind, _total_info, matrix_ops, op_info, op_links, overlap_events,
                                          step_ranges, step_trace_rows)
from rankscope.synth.ascend_sim import AscendJob, CommOp, Sim, dispatch_time, simulate

STEP_TITLE = ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
              "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
PY, CANN, HW, HCCL, OVL = 4100, 4100_02, 800, 4100_05, 4100_11  # pids as torch_npu numbers its layers
QUEUE_TID = 3  # the task queue's thread (``AscendJob.task_queue``)


def _x(name: str, pid: int, tid: int, ts: float, dur: float, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": f"{ts:.3f}", "dur": round(dur, 3), **extra}


def _meta(pid: int, name: str, label: str, index: int) -> list[dict[str, Any]]:
    return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": index}}]


def _tasks(op: CommOp, tid: int, skew: float) -> list[dict[str, Any]]:
    """HCCL task-level events of one op: the notify wait, the transfers, the closing record."""
    out, t = [], op.start + skew
    if op.wait > 0:
        out.append(_x("Notify_Wait", HCCL, tid, t, op.wait, args={"task type": "Notify Wait", "notify id": 7}))
        t += op.wait
    for peer, (tr, mb, ms) in sorted(op.links.items()):
        name = "RDMASend" if tr == "RDMA" else "Memcpy"
        out.append(_x(name, HCCL, tid, t, ms * 1000, args={"transport type": "RDMA" if tr == "RDMA" else "SDMA",
                                                           "link type": tr, "size(Byte)": int(mb * 1e6),
                                                           "dst rank": peer}))
        t += ms * 1000
    if not op.links:
        out.append(_x("Notify_Wait", HCCL, tid, t, max(op.end + skew - t - 2, 0.5), args={"task type": "Notify Wait"}))
    out.append(_x("Notify_Record", HCCL, tid, op.end + skew - 1.0, 0.5, args={"task type": "Notify Record"}))
    return out


def issue_times(sim: Sim, rank: int) -> dict[tuple[Any, ...], Any]:
    """When the host issues each task and communication op (µs, its own clock before skew), and its sync at each
    step's end: the host runs ahead of the device, 60 µs an op (never later than 120 µs before the task starts), then
    waits in ``loss.item()`` until 20 µs after the step's last task ended (torch_npu's eager mode on a busy device)."""
    items = [(k.start, k.end, ("k", i)) for i, k in enumerate(sim.kernels[rank])]
    items += [(op.start, op.end, ("c", j)) for j, op in enumerate(sim.ops[rank])]
    out: dict[tuple[Any, ...], Any] = {}
    for sid, h0, h1 in sim.steps[rank]:
        mine = sorted(x for x in items if h0 <= x[0] <= h1)
        t = h0 + (80.0 if sim.job.task_queue else 40.0)
        for i, (start, _, key) in enumerate(mine):
            enq = sim.kernels[rank][key[1]].enqueue if key[0] == "k" else None
            if sim.job.task_queue:  # the simulated queue's own times: 60 µs apart, each op 4 µs before its Enqueue
                out[key] = enq - 4.0 if enq is not None else t + 20.0
            else:
                out[key] = min(h0 + 100.0 + 60.0 * i, start - 120.0)
            t = out[key] + 40.0
        out[("sync", sid)] = (t, max((end for _, end, _ in mine), default=t) + 20.0)
    return out


def trace_view(sim: Sim, rank: int, skew: float) -> list[dict[str, Any]]:
    dev = rank % sim.job.per_node
    evs = (_meta(PY, "Python", "CPU", 0) + _meta(CANN, "CANN", "CPU", 2) + _meta(HW, "Ascend Hardware", f"NPU {dev}", 8)
           + _meta(HCCL, "HCCL", f"NPU {dev}", 9) + _meta(OVL, "Overlap Analysis", f"NPU {dev}", 11))
    gtid: dict[str, int] = {}
    for g in sim.groups:
        if rank in g.ranks:
            gtid[g.hash] = 1000 + 2 * len(gtid)
            evs += [{"ph": "M", "name": "thread_name", "pid": HCCL, "tid": gtid[g.hash],
                     "args": {"name": f"Group {g.hash} Communication"}},
                    {"ph": "M", "name": "thread_name", "pid": HCCL, "tid": gtid[g.hash] + 1, "args": {"name": "Plane 0"}}]
    evs += [{"ph": "M", "name": "thread_name", "pid": OVL, "tid": i, "args": {"name": n}}
            for i, n in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free"))]
    host = issue_times(sim, rank)
    for sid, h0, h1 in sim.steps[rank]:
        evs.append(_x(f"ProfilerStep#{sid}", PY, 1, h0 + skew, h1 - h0, cat="cpu_op"))
        t0, t1 = host[("sync", sid)]  # loss.item(): the host waits for the device's last task of the step
        evs += [_x("aten::item", PY, 1, t0 + skew, t1 - t0 + 5, cat="cpu_op"),
                _x("AscendCL@aclrtSynchronizeStream", CANN, 1, t0 + 5 + skew, t1 - t0 - 5)]
    for i, k in enumerate(sim.kernels[rank]):
        h = host[("k", i)]
        evs.append(_x(f"aten::{k.name.lower()}", PY, 1, h + skew, 30, cat="cpu_op"))
        if k.enqueue is not None and k.dequeue is not None:
            evs += _queued(i, f"aclnn{k.name}", k.enqueue + skew, k.dequeue + skew, dispatch_time(sim.job, rank))
        else:
            evs.append(_x(f"AscendCL@aclnn{k.name}", CANN, 1, h + 20 + skew, 12))
        evs += [_x(k.name, HW, 2, k.start + skew, k.end - k.start,
                   args={"Task Type": "AI_CORE", "Stream Id": 2, "Task Id": i, "connection_id": i}),
                {"ph": "s", "name": "torch_to_npu", "id": i, "pid": PY, "tid": 1, "ts": f"{h + skew:.3f}",
                 "cat": "async_npu", "bp": "e"},
                {"ph": "f", "name": "torch_to_npu", "id": i, "pid": HW, "tid": 2, "ts": f"{k.start + skew:.3f}",
                 "cat": "async_npu", "bp": "e"}]
    for j, op in enumerate(sim.ops[rank]):
        c10d = {"send": "c10d::send", "receive": "c10d::recv_"}.get(op.name.split("__")[0][5:], "c10d::allreduce_")
        evs += [_x(c10d, PY, 1, host[("c", j)] + skew, 25, cat="cpu_op"),
                _x(op.name, HCCL, gtid[op.group.hash], op.start + skew, op.end - op.start,
                   args={"connection_id": 0, "model id": 4294967295, "data_type": "FP16", "alg_type": "RING"})]
        evs += _tasks(op, gtid[op.group.hash] + 1, skew)
    for i, (name, spans) in enumerate(overlap_events(sim, rank).items()):
        evs += [_x(name, OVL, i, s + skew, e - s) for s, e in spans]
    return evs


def _queued(i: int, api: str, enqueue: float, dequeue: float, dur: float) -> list[dict[str, Any]]:
    """torch_npu's task queue for one op (``_fwk_file_parser.get_fwk_trace_data``): its Enqueue inside the op on the
    training thread, its Dequeue on the queue thread (tid 3) with the CANN call inside it, and their flow."""
    return [_x("Enqueue", PY, 1, enqueue, 3, cat="enqueue", args={"correlation_id": i}),
            _x(f"Dequeue@{api}", PY, QUEUE_TID, dequeue, dur - 1.0, cat="dequeue", args={"correlation_id": i}),
            _x(f"AscendCL@{api}", CANN, QUEUE_TID, dequeue + 3, dur - 7.0),
            {"ph": "s", "bp": "e", "name": "enqueue_to_dequeue", "id": i, "pid": PY, "tid": 1, "ts": f"{enqueue:.3f}",
             "cat": "async_task_queue"},
            {"ph": "f", "bp": "e", "name": "enqueue_to_dequeue", "id": i, "pid": PY, "tid": QUEUE_TID,
             "ts": f"{dequeue:.3f}", "cat": "async_task_queue"}]


def communication(sim: Sim, rank: int, skew: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(communication.json, communication_matrix.json) of one rank."""
    comm: dict[str, Any] = {}
    matrix: dict[str, Any] = {}
    for s in step_ranges(sim, rank):
        ops: dict[str, dict[str, Any]] = {"p2p": {}, "collective": {}}
        raw: dict[str, dict[str, Any]] = {"p2p": {}, "collective": {}}
        for op in sim.ops[rank]:
            if s["start"] <= op.start <= s["end"]:
                ops[_kind(op.name)][op.name] = op_info(op, skew)
                links = op_links(op, rank)
                if links:
                    raw[_kind(op.name)][op.name] = links
        _total_info(ops["p2p"])
        _total_info(ops["collective"])
        comm[f"step{s['step_id']}"] = ops
        if raw["p2p"] or raw["collective"]:
            matrix[f"step{s['step_id']}"] = {k: matrix_ops(raw[k]) for k in ("p2p", "collective")}
    return comm, matrix


def metadata(sim: Sim, rank: int) -> dict[str, Any]:
    job = sim.job
    groups = {g.comm_name: {"group_name": g.pg_name, "group_rank": sorted(g.ranks).index(rank),
                            "global_ranks": list(g.ranks)} for g in sim.groups if rank in g.ranks}
    return {"distributed_args": {"tensor_model_parallel_size": job.tp, "pipeline_model_parallel_size":
                                 job.ranks // job.tp, "data_parallel_size": 1, "context_parallel_size": 1,
                                 "expert_model_parallel_size": 1, "sequence_parallel": True, "rank": rank,
                                 "world_size": job.ranks},
            "ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": "3", "HCCL_RDMA_TC": "", "HCCL_RDMA_SL": "",
                              "ACLNN_CACHE_LIMIT": "", "HOST_CACHE_CAPACITY": "", "ASCEND_ENHANCE_ENABLE": "",
                              "PYTORCH_NPU_ALLOC_CONF": "", "ASCEND_LAUNCH_BLOCKING": "", "HCCL_ALGO": ""},
            "parallel_group_info": groups, "trace_id": f"trace-{rank}"}


def write_rank(sim: Sim, rank: int, root: Path, form: str = "text") -> Path:
    """One rank's ``*_ascend_pt`` folder; ``form``: "text" (export_type text) or "db" (export_type db)."""
    skew = (rank // sim.job.per_node) * sim.job.node_skew_us
    d = root / f"node{rank // sim.job.per_node}_{41000 + rank}_20250101000000{rank:03d}_ascend_pt"
    out = d / OUT
    out.mkdir(parents=True, exist_ok=True)
    (d / f"profiler_info_{rank}.json").write_text(json.dumps({
        "config": {"common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                                     "record_shapes": False, "profile_memory": False, "with_stack": False},
                   "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_NONE",
                                           "_export_type": [form]}},
        "start_info": {"syscnt_enable": False, "freq": 100.0, "start_cnt": 0, "start_monotonic": 0},
        "end_info": {"FWK_END_TIME": 0, "FWK_END_MONOTONIC": 0}, "torch_npu_version": "2.14.0",
        "cann_version": "8.2.RC1", "rank_id": rank}, indent=4))
    (d / "profiler_metadata.json").write_text(json.dumps(metadata(sim, rank), indent=4))
    evs = trace_view(sim, rank, skew)
    steps = [{**s, "start": s["start"] + skew, "end": s["end"] + skew, "fwk_start": s["fwk_start"] + skew}
             for s in step_ranges(sim, rank)]
    named = [(e["name"], float(e["ts"]), float(e["dur"])) for e in evs
             if e["ph"] == "X" and e["pid"] in (HW, HCCL, OVL)]
    rows = step_trace_rows(named, steps, rank % sim.job.per_node)
    comm, matrix = communication(sim, rank, skew)
    if form == "db":
        from rankscope.synth import ascend_db

        layers = {"Python": PY, "CANN": CANN, "Ascend Hardware": HW, "HCCL": HCCL}
        ascend_db.write_profiler_db(out / f"ascend_pytorch_profiler_{rank}.db", rank, rank // sim.job.per_node,
                                    rank % sim.job.per_node, evs, layers, metadata(sim, rank))
        ascend_db.write_analysis_db(out / "analysis.db", comm, matrix, rows)
        return d
    (out / "trace_view.json").write_text(json.dumps(evs))
    with open(out / "step_trace_time.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(STEP_TITLE)
        w.writerows(rows)
    (out / "communication.json").write_text(json.dumps(comm))
    (out / "communication_matrix.json").write_text(json.dumps(matrix))
    return d


def write_run(root: str | Path, job: AscendJob = AscendJob(), form: str = "text") -> list[Path]:
    """Simulate ``job`` and write every rank's folder under ``root``; return the folders.

    ``form="db"`` writes the same run as torch_npu's DB export (``ascend_db.py``) instead of text.
    """
    if form not in ("text", "db"):
        raise ValueError(f"form must be 'text' or 'db', not {form!r}")
    sim = simulate(job)
    root = Path(root)
    return [write_rank(sim, r, root, form) for r in range(job.ranks)]
