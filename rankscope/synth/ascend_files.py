"""Writes a simulated job (``ascend_sim``) as torch_npu writes its profiler output.

The rules are ported from the writer, torch_npu 2.14.0 (``pip download --no-deps torch-npu``),
``torch_npu/profiler/analysis/prof_view/``:

- ``_trace_step_time_parser.py``: step_trace_time.csv sums the "Overlap Analysis" events
  (Computing, Communication, Communication(Not Overlapped), Free) and ``hcom_receive*`` events
  (Bubble) per step; a step is [first device task, max(last device task end, host step end));
  Overlapped = Communication - Not Overlapped; Stage = (last end - first start of those events) -
  Bubble; Not Overlapped and Exclude Receive = max(Not Overlapped - Bubble, 0); Preparing = first
  Computing/Communication start - host ProfilerStep start. Columns start with Device_id.
- ``_communication_parser.py``: communication.json holds per step "collective" / "p2p" (by name
  prefix hcom_send / hcom_receive / hcom_batchsendrecv) with a "Total Op Info" per kind;
  communication_matrix.json folds each step's ops per (op type, group, link) into ``-top1``,
  ``-middle``, ``-bottom1..3`` (by bandwidth) and ``-total``; the op type is the first match of
  its pattern in the lower-cased name (so hcom_reduceScatter counts as "reduce").
- ``profiler_interface.py``: profiler_info_<rank>.json, and profiler_metadata.json with
  ``parallel_group_info`` keyed by the HCCL comm name (group_name, group_rank, global_ranks);
  ``distributed_args`` is what Megatron / MindSpeed add with ``add_metadata_json``.

The per-operation CANN fields follow the real output in ../shared/data/ascend_msprof/
(Idle = Elapse - Transit - Wait; SDMA = HCCS + PCIE; ratios rounded to 4 digits).
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from rankscope.synth.ascend_sim import CommOp, Sim

OUT = "ASCEND_PROFILER_OUTPUT"
HCCL_PATTERN = re.compile(r"send|reduce|invalid|broadcast|allreduce|receive|allgather|reducescatter|scatter|"
                          r"alltoall|alltoallv|alltoallvc|batchsendrecv")
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA")
OVERLAP = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")


def ratio(a: float, b: float) -> float:
    return 0 if abs(b) < 1e-15 else round(a / b, 4)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def overlap_events(sim: Sim, rank: int) -> dict[str, list[tuple[float, float]]]:
    comp = _union([(k.start, k.end) for k in sim.kernels[rank]])
    comm = _union([(o.start, o.end) for o in sim.ops[rank]])
    busy = _union(comp + comm)
    free = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    return {"Computing": comp, "Communication": comm, "Communication(Not Overlapped)": _minus(comm, comp),
            "Free": free}


def step_ranges(sim: Sim, rank: int) -> list[dict[str, Any]]:
    """torch_npu's step range: first device task of the step to max(device end, host end)."""
    out = []
    for sid, h0, h1 in sim.steps[rank]:
        first = min([k.start for k in sim.kernels[rank] if h0 <= k.start < h1] +
                    [o.start for o in sim.ops[rank] if h0 <= o.start < h1])
        out.append({"step_id": str(sid), "start": first, "end": h1, "fwk_start": h0})
    return out


def step_trace_rows(events: list[tuple[str, float, float]], steps: list[dict[str, Any]],
                    device: int) -> list[list[Any]]:
    """create_step_file of _trace_step_time_parser.py on (name, ts, dur) events of one device."""
    flag = {"Communication": "comun", "Computing": "compute", "Free": "free",
            "Communication(Not Overlapped)": "comunNotOverlp", "hcom_receive": "bubble"}
    e2es: dict[str, list[float]] = {s["step_id"]: [-1.0, -1.0] for s in steps}
    first: dict[str, float] = {s["step_id"]: -1.0 for s in steps}
    acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, ts, dur in events:
        kind = name if name in OVERLAP else "hcom_receive" if name.startswith("hcom_receive") else None
        if kind is None:
            continue
        cur = next((s["step_id"] for s in steps if s["start"] <= ts < s["end"]), None)
        if cur is not None:
            e2e = e2es[cur]
            if ts < e2e[0] or e2e[0] == -1:
                e2e[0] = ts
            if ts + dur > e2e[1] or e2e[1] == -1:
                e2e[1] = ts + dur
            if kind in ("Communication", "Computing") and (ts < first[cur] or first[cur] == -1):
                first[cur] = ts
        acc[cur][flag[kind]] += dur  # type: ignore[index]
    rows = []
    for s in steps:
        t = acc[s["step_id"]]
        e2e = e2es[s["step_id"]]
        rows.append([device, s["step_id"], t["compute"], t["comunNotOverlp"], t["comun"] - t["comunNotOverlp"],
                     t["comun"], t["free"], (e2e[1] - e2e[0]) - t["bubble"], t["bubble"],
                     max(t["comunNotOverlp"] - t["bubble"], 0), first[s["step_id"]] - s["fwk_start"]])
    return rows


def op_info(op: CommOp, skew: float) -> dict[str, Any]:
    """One operation's CANN entry: Communication Time Info and Bandwidth Info."""
    elapse = (op.end - op.start) / 1000
    wait = op.wait / 1000
    sdma = [op.transports.get(t, (0.0, 0.0)) for t in ("HCCS", "PCIE")]
    transit = max(sdma[0][1] + sdma[1][1], op.transports.get("RDMA", (0.0, 0.0))[1])
    if not op.transports:  # the receive side: the data lands while it waits on the sender's notify
        transit = max(elapse - wait - 0.015, 0.0)
    sync = wait * 0.8
    bw: dict[str, Any] = {}
    for t in TRANSPORTS:
        size, ms = op.transports.get(t, (0.0, 0.0))
        dist: dict[str, list[float]] = {}
        if t == "SDMA":
            size, ms = sdma[0][0] + sdma[1][0], sdma[0][1] + sdma[1][1]
        elif size:
            packet = 8.0 if size >= 8 else size
            dist = {str(packet): [round(size / packet), ms]}
        bw[t] = {"Transit Size(MB)": size, "Transit Time(ms)": ms, "Bandwidth(GB/s)": ratio(size, ms),
                 "Large Packet Ratio": (1.0 if size >= 8 else 0.0) if dist else 0, "Size Distribution": dist}
    return {"Communication Time Info": {
        "Start Timestamp(us)": op.start + skew, "Elapse Time(ms)": elapse, "Transit Time(ms)": transit,
        "Wait Time(ms)": wait, "Synchronization Time(ms)": sync, "Idle Time(ms)": elapse - transit - wait,
        "Wait Time Ratio": ratio(wait, wait + transit), "Synchronization Time Ratio": ratio(sync, sync + transit)},
        "Communication Bandwidth Info": bw}


def op_links(op: CommOp, rank: int) -> dict[str, dict[str, Any]]:
    """The CANN matrix entry of one operation: links in group-local ranks, self-link for collectives."""
    local = {g: i for i, g in enumerate(sorted(op.group.ranks))}
    out = {}
    if op.kind == "collective":
        out[f"{local[rank]}-{local[rank]}"] = {"Transport Type": "LOCAL", "Transit Size(MB)": 0.5,
                                               "Transit Time(ms)": 0.01, "Bandwidth(GB/s)": 50.0}
    for peer, (t, mb, ms) in sorted(op.links.items()):
        out[f"{local[rank]}-{local[peer]}"] = {"Transport Type": t, "Transit Size(MB)": mb, "Transit Time(ms)": ms,
                                               "Bandwidth(GB/s)": ratio(mb, ms)}
    return out


def _total_info(ops: dict[str, Any]) -> None:
    """CommunicationParser.compute_total_info (which computes, but never stores, the bandwidths)."""
    if not ops:
        return
    time: dict[str, float] = defaultdict(float)
    band: dict[str, Any] = {}
    for info in ops.values():
        for k, v in info["Communication Time Info"].items():
            if k not in ("Wait Time Ratio", "Synchronization Time Ratio", "Start Timestamp(us)"):
                time[k] += v
        for t, d in info["Communication Bandwidth Info"].items():
            tot = band.setdefault(t, {"Transit Time(ms)": 0, "Transit Size(MB)": 0,
                                      "Size Distribution": defaultdict(lambda: [0, 0])})
            tot["Transit Time(ms)"] += d["Transit Time(ms)"]
            tot["Transit Size(MB)"] += d["Transit Size(MB)"]
            for size, (n, ms) in d["Size Distribution"].items():
                tot["Size Distribution"][size][0] += n
                tot["Size Distribution"][size][1] += ms
    time["Wait Time Ratio"] = ratio(time["Wait Time(ms)"], time["Wait Time(ms)"] + time["Transit Time(ms)"])
    time["Synchronization Time Ratio"] = ratio(time["Synchronization Time(ms)"],
                                               time["Transit Time(ms)"] + time["Synchronization Time(ms)"])
    ops["Total Op Info"] = {"Communication Time Info": time, "Communication Bandwidth Info": band}


def _kind(name: str) -> str:
    low = name.lower()
    return "p2p" if low.startswith(("hcom_send", "hcom_receive", "hcom_batchsendrecv")) else "collective"


def matrix_ops(raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """get_comm_type + integrate_matrix_data of one kind's ops of one step."""
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for name, links in raw.items():
        m = HCCL_PATTERN.search(name.lower())
        typ = m.group() if m else name.split("__")[0]
        for link, d in links.items():
            d["Op Name"] = name.split("@")[0]
            by[(typ, name.split("@")[-1], link)].append(d)
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (typ, group, link), data in by.items():
        data.sort(key=lambda x: x["Bandwidth(GB/s)"], reverse=True)
        size = sum(x["Transit Size(MB)"] for x in data)
        ms = sum(x["Transit Time(ms)"] for x in data)
        out[f"{typ}-top1@{group}"][link] = data[0]
        out[f"{typ}-middle@{group}"][link] = data[len(data) // 2]
        out[f"{typ}-bottom1@{group}"][link] = data[-1]
        out[f"{typ}-total@{group}"][link] = {"Transport Type": data[0]["Transport Type"], "Transit Size(MB)": size,
                                              "Transit Time(ms)": ms, "Bandwidth(GB/s)": ratio(size, ms)}
        if len(data) >= 2:
            out[f"{typ}-bottom2@{group}"][link] = data[-2]
        if len(data) >= 3:
            out[f"{typ}-bottom3@{group}"][link] = data[-3]
    return dict(out)
