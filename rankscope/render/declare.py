"""How each analysis is shown: its title, the summary facts and table columns a person reads (with
units), and what to say when it has no data and how to get it. The report and the web UI draw these
declarations; nothing renders an analysis's raw summary dict or a table's internal column names (the
full results stay in ``rankscope analyze --json``).

One vocabulary everywhere: compute, exposed communication, data wait, idle. Times in ms (µs below
0.1 ms), bytes and bandwidth in human units.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Col:
    """A column or a summary fact: ``key`` in the data, ``label`` shown, ``unit`` of the stored value
    ("ns", "us", "bytes", "gbps", "share", "count", "float", "text", "ranks", "group": a process group's
    ranks, short; "device": -1 is the CPU; "words": an identifier-like category said in words; a unit
    ending in "+" is a change, printed with its sign)."""

    key: str
    label: str
    unit: str = "text"


@dataclass(frozen=True)
class TableView:
    table: str
    title: str
    cols: tuple[Col, ...]
    empty: str = "no rows"


@dataclass(frozen=True)
class View:
    title: str
    facts: tuple[Col, ...] = ()
    tables: tuple[TableView, ...] = ()
    empty: str = ""
    optional: bool = False  # not listed among the skipped when it does not apply to the run


NS = "ns"
C = Col
BREAKDOWN_COLS = (C("rank", "rank", "count"), C("step", "step", "count"), C("wall", "step time", NS),
                  C("computing", "compute", NS), C("comm_exposed", "exposed communication", NS),
                  C("overlapped", "overlapped communication", NS), C("data_wait", "data wait", NS),
                  C("free", "idle", NS))

VIEWS: dict[str, View] = {
    "breakdown": View("Step time breakdown (compute, exposed communication, data wait, idle)", (
        C("whole_window_ranks", "ranks without step markers (their whole capture counts as one step)", "ranks"),),
        (TableView("breakdown", "per rank and step (ms)", BREAKDOWN_COLS),),
        "no steps: profile with prof.step() once per training step"),
    "hta_temporal": View("Device time: idle, compute, non-compute (as HTA's temporal breakdown)",
                         empty="needs GPU kernels in the traces (profile a CUDA or NPU job with device activities)"),
    "clock": View("Clock alignment", (C("max_abs_offset_ns", "largest clock offset to the reference rank", NS),
                                      C("max_residual_ns", "largest residual after alignment", NS)),
                  (TableView("offsets", "per rank", (C("rank", "rank", "count"), C("offset_ns", "offset", NS),
                                                     C("residual_ns", "residual", NS),
                                                     C("drift_ppm", "drift (ppm)", "float"),
                                                     C("samples", "matched samples", "count"),
                                                     C("source", "from"))),)),
    "links": View("Slow links and groups", (C("slow_groups", "slow groups", "count"),
                                            C("comm_stragglers", "ranks in every slow group", "ranks")),
                  (TableView("groups", "per process group and operation", (
                      C("pg_ranks", "group (ranks)", "group"), C("op", "operation"), C("bytes", "size", "bytes"),
                      C("count", "calls", "count"), C("transfer_ns", "transfer (median)", NS),
                      C("skew_ns", "arrival skew (median)", NS))),)),
    "straggler": View("Straggler verdict", (C("time_lost_per_step_ns", "time lost per step", NS),),
                      (TableView("per_step", "per step: the rank with the longest own time", (
                          C("step", "step", "count"), C("slowest", "rank", "count"), C("own", "own time", NS),
                          C("others_median", "other ranks' median", NS), C("rel_excess", "excess", "share"))),)),
    "trajectory": View("Iteration trajectory", tables=(
        TableView("per_rank", "per rank, median over steps (ms)", (
            C("rank", "rank", "count"), C("wall", "step time", NS), C("iteration_gap", "gap before compute", NS),
            C("fwd_bwd", "forward + backward", NS), C("iteration_tail", "tail after compute", NS))),)),
    "collectives": View("Collectives matched across ranks", (
        C("instances", "matched collectives", "count"), C("arrival_skew_p50_ns", "median arrival skew", NS)),
        (TableView("arrival_by_rank", "arrival per rank", (
            C("rank", "rank", "count"), C("median_arrival_lag", "median lag behind the first rank", NS),
            C("total_wait", "time others waited for it", NS))),
         TableView("instances", "per collective", (
             C("op", "operation"), C("pg_ranks", "group (ranks)", "group"), C("instance", "call", "count"),
             C("bytes", "size", "bytes"), C("arrival_skew", "arrival skew", NS), C("last_rank", "last rank", "count"),
             C("max_wait", "longest wait", NS), C("transfer", "transfer", NS), C("busbw_gbps", "bus bandwidth", "gbps"))
         )), "no collectives in the traces"),
    "comm_matrix": View("Communication matrix", (C("pairs", "rank pairs", "count"),
                                                 C("process_groups", "process groups", "count"),
                                                 C("note", "note")),
                        (TableView("process_groups", "process groups", (
                            C("pg_name", "group"), C("pg_ranks", "ranks", "group"), C("type", "type"), C("size", "size", "count"),
                            C("calls", "calls", "count"), C("desc", "description"))),),
                        "needs collective sizes: profile with record_shapes=True"),
    "opstats": View("Operators across ranks", (C("ranks", "ranks", "count"),), (
        TableView("operators", "top operators: total time per rank over the capture", (
            C("name", "operator"), C("calls", "calls", "count"), C("median", "median rank", NS),
            C("min", "least", NS), C("max", "most", NS), C("max_rank", "rank with most", "count"),
            C("sum", "all ranks", NS))),
        TableView("operators_by_shape", "by input shape", (
            C("name", "operator"), C("input_dims", "input shapes"), C("calls", "calls", "count"),
            C("median", "median rank", NS), C("max", "most", NS), C("max_rank", "rank with most", "count"))))),
    "kernels": View("Kernels", empty="needs GPU kernels in the traces (profile a CUDA or NPU job with device activities)"),
    "memory": View("Memory", (C("max_peak_allocated", "largest peak allocated", "bytes"),
                              C("max_peak_rank", "on rank", "count")),
                   (TableView("peaks", "per rank and device: the peak and the operator running at it", (
                       C("rank", "rank", "count"), C("device", "device", "device"),
                       C("peak_allocated", "peak allocated", "bytes"), C("peak_reserved", "peak reserved", "bytes"),
                       C("operator_at_peak", "operator at the peak"))),),
                   empty="no memory events: profile with profile_memory=True"),
    "advice": View("Advice"),
    "ascend_cluster": View("Ascend cluster summary (msprof-analyze's cluster files)", (
        C("ranks", "ranks", "count"), C("groups", "communication groups", "count"),
        C("step_rows", "step trace rows", "count")),
        empty="Ascend runs only (torch_npu profiler output)", optional=True),
    "hang": View("Collectives / hang (collective recorder dumps)", (
        C("headline", "verdict"), C("also", "other problems"), C("dumps", "ranks with a dump", "count"), C("no_dump", "ranks without a dump", "ranks")),
        (TableView("last_collective", "last collective recorded per rank and process group", (
            C("group", "group"), C("desc", "description"), C("rank", "rank", "count"),
            C("last_seq", "last sequence number", "count"),
            C("last_completed", "last completed (timed recorder)", "count"))),),
        "profile with comms=True or RANKSCOPE_COMMS=1, then `rankscope trigger RUN --dump`"),
    "rpc": View("RPC calls across workers", (
        C("calls", "calls", "count"), C("destinations", "destinations", "count"),
        C("remote_ns", "time on the callees", NS), C("network_ns", "network + queueing", NS),
        C("nested_calls", "nested calls (a callee calling on)", "count"), C("not_captured", "not captured")),
        (TableView("destinations", "per destination", (
            C("rank", "rank", "count"), C("src", "from"), C("dst", "to"), C("calls", "calls", "count"),
            C("errors", "errors", "count"), C("unprofiled", "without remote events", "count"),
            C("round_trip_ns", "round trips", NS), C("remote_ns", "on the callee", NS),
            C("network_ns", "network + queueing", NS), C("offset_ns", "clock offset (median)", NS),
            C("offset_error_ns", "offset error bound", NS))),
         TableView("functions", "slowest functions", (
             C("dst", "on"), C("fn", "function"), C("calls", "calls", "count"),
             C("round_trip_ns", "round trips", NS), C("max_round_trip_ns", "longest", NS),
             C("remote_ns", "on the callee", NS), C("network_ns", "network + queueing", NS))),
         TableView("remote_operators", "remote operators (self time)", (
             C("worker", "worker"), C("name", "operator"), C("calls", "calls", "count"),
             C("self_ns", "self time", NS), C("total_ns", "total time", NS)))),
        "no torch.distributed.rpc calls were recorded", optional=True),
    "capture": View("Captured steps", (C("reference_steps", "steps captured on most ranks"),), (
        TableView("capture", "per rank", (C("rank", "rank", "count"), C("source", "from"),
                                          C("windows", "windows", "count"), C("n_steps", "steps", "count"),
                                          C("missing", "missing steps"), C("extra", "extra steps"),
                                          C("dropped", "dropped windows"))),)),
    # GPU analyses at HTA's depth (analysis/gpu/, issue 26): rankscope's tables first, HTA's (µs) after
    "kernel_breakdown": View("Kernel breakdown (classes, overlap, per kernel)", (
        C("kernels", "kernels", "count"), C("names", "distinct kernels", "count")), (
        TableView("kernel_overlap", "device time per rank by what ran at once", (
            C("rank", "rank", "count"), C("kernels", "running"), C("time", "time", NS), C("pct", "share (%)", "float"))),
        TableView("kernel_stats", "per rank and kernel", (
            C("rank", "rank", "count"), C("class", "class"), C("name", "kernel"), C("count", "calls", "count"),
            C("sum", "total", NS), C("min", "shortest", NS), C("max", "longest", NS), C("mean", "mean", NS),
            C("std", "std", NS))),
        TableView("hta_kernel_type", "as HTA's kernel breakdown (all ranks)", (
            C("kernel_type", "kernel type"), C("sum", "time", "us"), C("percentage", "share (%)", "float"))),
        TableView("hta_kernel_breakdown", "as HTA's kernel breakdown: top kernels per rank", (
            C("rank", "rank", "count"), C("kernel_type", "kernel type"), C("name", "kernel"),
            C("sum (us)", "total", "us"), C("mean (us)", "mean", "us"), C("max (us)", "longest", "us")))),
        "needs GPU kernels in the traces (profile a CUDA or NPU job with device activities)", optional=True),
    "gpu_idle": View("GPU idle time per stream (host wait, kernel wait, other)", (
        C("idle_ns", "idle", NS), C("host_wait_ns", "waiting for the host", NS)), (
        TableView("idle_time", "per rank and stream (gaps after the latest earlier end)", (
            C("rank", "rank", "count"), C("stream", "stream", "count"), C("kernels", "kernels", "count"),
            C("span", "span", NS), C("idle", "idle", NS), C("idle_pct", "idle (%)", "float"),
            C("host_wait", "host wait", NS), C("kernel_wait", "kernel wait", NS), C("other", "other", NS))),
        TableView("hta_idle_time", "as HTA's idle time breakdown", (
            C("rank", "rank", "count"), C("stream", "stream", "count"), C("idle_category", "category", "words"),
            C("idle_time", "idle", "us"), C("idle_time_ratio", "share of the stream's idle", "float")))),
        "needs GPU kernels in the traces", optional=True),
    "launch_delay": View("Kernel launch delay and slow runtime calls", (
        C("long_runtime_calls", "runtime calls over 50 µs", "count"), C("long_delays", "launch delays over 100 µs", "count")), (
        TableView("launch_summary", "per rank (delay = kernel start − end of its launch call, ≥ 0)", (
            C("rank", "rank", "count"), C("launches", "launches", "count"), C("short_kernels", "kernels shorter than their launch", "count"),
            C("long_runtime", "calls over 50 µs", "count"), C("long_delay", "delays over 100 µs", "count"),
            C("delay_p50", "median delay", NS), C("delay_p95", "p95 delay", NS), C("delay_max", "longest delay", NS),
            C("runtime_max", "longest call", NS))),),
        "needs kernel launches with their kernels (CUDA / ROCm traces)", optional=True),
    "queue_length": View("Launch queue length per stream", (
        C("max_queue_length", "longest queue", "count"), C("time_full_ns", "time with a full queue", NS)), (
        TableView("queue_length_summary", "per rank and stream", (
            C("rank", "rank", "count"), C("stream", "stream", "count"), C("max", "longest", "count"),
            C("mean_time_weighted", "mean over time", "float"), C("time_at_max", "time at the longest", NS),
            C("time_full", "time at the limit", NS), C("limit", "limit", "count"))),
        TableView("hta_queue_length_summary", "as HTA's queue length summary (over its points)", (
            C("rank", "rank", "count"), C("stream", "stream", "count"), C("count", "points", "count"),
            C("mean", "mean", "float"), C("50%", "median", "float"), C("max", "max", "float")))),
        "needs kernel launches with their kernels", optional=True),
    "memory_bw": View("Memory copy / set bandwidth", (C("bytes", "bytes moved", "bytes"),), (
        TableView("memory_bw", "per rank and copy kind (bandwidth = bytes / busy time)", (
            C("rank", "rank", "count"), C("name", "kind"), C("ops", "operations", "count"),
            C("bytes", "bytes", "bytes"), C("busy", "busy", NS), C("bandwidth_gbps", "bandwidth", "gbps"),
            C("peak_gbps", "fastest", "gbps"))),
        TableView("hta_memory_bw_summary", "as HTA's memory bandwidth summary", (
            C("rank", "rank", "count"), C("name", "kind"), C("count", "points", "count"),
            C("mean", "mean", "gbps"), C("max", "max", "gbps")))),
        "needs memcpy / memset on the device", optional=True),
    "annotations": View("User annotations (record_function) on GPU and CPU", tables=(
        TableView("annotation_kernels", "per GPU annotation: its kernels", (
            C("rank", "rank", "count"), C("name", "annotation"), C("instances", "instances", "count"),
            C("time", "time", NS), C("kernels", "kernels", "count"), C("kernel_time", "kernel time", NS))),
        TableView("hta_gpu_annotation_breakdown", "GPU annotations (as HTA)", (
            C("rank", "rank", "count"), C("name", "annotation"), C("sum (us)", "total", "us"),
            C("mean (us)", "mean", "us"), C("max (us)", "longest", "us"))),
        TableView("hta_cpu_annotation_breakdown", "CPU annotations (as HTA)", (
            C("rank", "rank", "count"), C("name", "annotation"), C("sum (us)", "total", "us"),
            C("mean (us)", "mean", "us"), C("max (us)", "longest", "us")))),
        empty="no user annotations: wrap code in torch.profiler.record_function", optional=True),
    "aten_kernels": View("ATen operators and the kernels they launch", tables=(
        TableView("aten_op_kernels", "per operator and kernel sequence (operator on the launch's thread)", (
            C("rank", "rank", "count"), C("aten_op_name", "operator"), C("kernel_sequence", "kernels"),
            C("occurrence_count", "calls", "count"), C("avg_aten_op_launch_delay", "operator to first launch", NS),
            C("avg_runtime_delay", "launch to kernel", NS))),),
        empty="needs aten:: operators launching kernels", optional=True),
    "kernel_sequences": View("Frequent kernel sequences per operator", tables=(
        TableView("kernel_sequences", "per operator and kernel sequence", (
            C("rank", "rank", "count"), C("operator", "operator"), C("count", "calls", "count"),
            C("kernel_time", "kernel time", NS), C("operator_time", "operator time", NS), C("pattern", "sequence"))),),
        empty="no operator launched 3 or more kernels", optional=True),
    "cupti_counters": View("CUPTI counters per kernel and operator", tables=(
        TableView("kernel_flops", "per innermost operator (SASS instruction counters; an FMA counts 2)", (
            C("rank", "rank", "count"), C("bottom_level_op", "operator"), C("kernels", "kernels", "count"),
            C("flops", "floating-point operations", "count"))),),
        empty="profile with torch.profiler's experimental_config (profiler_metrics) for CUPTI counters", optional=True),
    "critical_path": View("Critical path across ranks (who waits for whom)", (
        C("description", "the chain that bounds the step"), C("bounding_rank", "bounding rank", "count"),
        C("cost_per_step_ns", "its cost per step", NS), C("bounding_steps", "steps it bounds"),
        C("step_time_ns", "step time", NS), C("step_time_if_median_ns", "step time if it ran at the others' median", NS)), (
        TableView("steps", "per step: the rank whose what-if shortens the path most", (
            C("step", "step", "count"), C("step_ns", "step time", NS), C("path_ns", "critical path", NS),
            C("bounding_rank", "bounding rank", "count"), C("cost_ns", "its cost", NS),
            C("step_if_median_ns", "step at the others' median", NS), C("description", "chain"))),
        TableView("what_if", "per rank and step: the step if the rank ran at the other ranks' median", (
            C("step", "step", "count"), C("rank", "rank", "count"), C("step_ns", "step time", NS),
            C("step_if_median_ns", "at the others' median", NS), C("saving_ns", "saving", NS))),
        TableView("segments", "the path of each step", (
            C("step", "step", "count"), C("rank", "rank", "count"), C("kind", "kind"), C("name", "what"),
            C("context", "inside"), C("dur", "time", NS), C("group", "group"), C("seq", "call", "count")))),
        "needs steps with events on at least one rank", optional=True),
}


D = "Δ "  # a change against the baseline; signed units ("ns+", ...) print their sign
_STEP_DIFF = (C("wall", "step time", NS), C("wallBase", "baseline", NS), C("wallDiff", D + "step time", "ns+"),
              C("computingDiff", D + "compute", "ns+"), C("comm_exposedDiff", D + "exposed communication", "ns+"),
              C("data_waitDiff", D + "data wait", "ns+"), C("freeDiff", D + "idle", "ns+"))
_NAME_DIFF = (C("mean", "time per step", "us"), C("meanBase", "baseline", "us"), C("meanDiff", D + "time", "us+"),
              C("min", "least rank", "us"), C("max", "most rank", "us"), C("calls", "calls per step", "count"),
              C("callsDiff", D + "calls", "count+"))
# The diff view (``render.diff``): its tables in the order shown, a readable subset of each one's columns
# (the rest stays in ``rankscope diff --json``).
DIFF_TABLES: tuple[TableView, ...] = (
    TableView("ranks", "per rank (medians over steps)", (C("rank", "rank", "count"),) + _STEP_DIFF),
    TableView("own", "per rank, host speed taken out (this run − speed factor × baseline)", (
        C("rank", "rank", "count"), C("own", "own time", NS), C("ownBase", "baseline", NS),
        C("ownDiffNorm", D + "own time", "ns+"), C("computingDiffNorm", D + "compute", "ns+"),
        C("data_waitDiffNorm", D + "data wait", "ns+"), C("freeDiffNorm", D + "idle", "ns+"))),
    TableView("steps", "per rank and step (steps paired in order)", (
        C("rank", "rank", "count"), C("step", "step", "count"), C("stepBase", "baseline step", "count"))
        + _STEP_DIFF),
    TableView("rank_operator_totals", "per rank and operator (per step; Δ with host speed taken out)", (
        C("rank", "rank", "count"), C("name", "operator"), C("inputs", "usual inputs"),
        C("inputsBase", "baseline inputs"), C("us", "time per step", "us"), C("usBase", "baseline", "us"),
        C("usDiffNorm", D + "time", "us+"), C("calls", "calls per step", "count"),
        C("callsBase", "baseline calls", "count"))),
    TableView("rank_operators", "per rank, operator and input shapes (per step)", (
        C("rank", "rank", "count"), C("name", "operator"), C("input_dims", "input shapes"),
        C("us", "time per step", "us"), C("usBase", "baseline", "us"), C("usDiff", D + "time", "us+"),
        C("usDiffNorm", D + "time, host speed taken out", "us+"), C("calls", "calls per step", "count"),
        C("callsDiff", D + "calls", "count+"))),
    TableView("operators", "operators (per step, mean over ranks)", (C("name", "operator"),) + _NAME_DIFF),
    TableView("kernels", "kernels (per step, mean over ranks)", (C("name", "kernel"),) + _NAME_DIFF,
              "no device kernels in either run (CPU-only traces)"),
    TableView("collectives", "collectives (per rank over the capture)", (
        C("op", "operation"), C("pg_ranks", "group (ranks)", "group"), C("calls", "calls", "count"),
        C("callsDiff", D + "calls", "count+"), C("bytes", "size", "bytes"), C("bytesDiff", D + "size", "bytes+"),
        C("time_us", "time", "us"), C("time_usBase", "baseline", "us"), C("time_usDiff", D + "time", "us+"))),
)


def _plain(key: str) -> str:
    return key.replace("_ns", "").replace("_", " ")


def view_of(name: str, summary: dict[str, Any] | None = None, tables: dict[str, Any] | None = None) -> View:
    """The declaration of an analysis. One that declares nothing (a plugin's) is shown plainly: its scalar
    summary facts and its tables, with names made readable (durations ending in _ns shown in ms)."""
    if name in VIEWS:
        return VIEWS[name]
    from rankscope.render.charts import columns_of

    facts = tuple(Col(k, _plain(k), NS if k.endswith("_ns") else "text") for k, v in (summary or {}).items()
                  if isinstance(v, (int, float, str)) and not isinstance(v, bool))
    tvs = tuple(TableView(t, _plain(t), tuple(Col(c, _plain(c), NS if c.endswith("_ns") else "text")
                                               for c in columns_of(tab)))
                for t, tab in (tables or {}).items() if tab is not None)
    return View(_plain(name).capitalize(), facts, tvs)


def ms(ns: float) -> str:
    """A duration given in ns: "12.3 ms", "0.84 ms", "35 µs"."""
    v = ns / 1e6
    if abs(v) >= 100:
        return f"{v:,.0f} ms"
    if abs(v) >= 0.1:
        return f"{v:,.1f} ms" if abs(v) >= 10 else f"{v:,.2f} ms"
    return f"{ns / 1e3:,.0f} µs" if abs(ns) >= 1e3 or ns == 0 else f"{ns:,.0f} ns"


def group_label(ranks: Any, width: int = 24) -> str:
    """The ranks of a process group, short: "0-7", "0,2,4,6", "1,3,…,63 (32 ranks)"."""
    from rankscope.intlist import format_int_list

    items = sorted({int(r) for r in ranks})
    text = format_int_list(items) if items else "none"
    return text if len(text) <= width else f"{items[0]},{items[1]},…,{items[-1]} ({len(items)} ranks)"


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def cell(value: Any, unit: str) -> str:
    """One value in its unit's human form ('' for missing); a unit ending in "+" is a change and prints
    its sign ("+2.50 ms", "-1.2 MB")."""
    if value is None or value == "":
        return ""
    if unit.endswith("+"):
        try:
            v = float(value)
        except (TypeError, ValueError):
            return str(value)
        text = cell(abs(v), unit[:-1])
        return text if v == 0 or text.lstrip("0.,") in ("", " ms", " µs", " ns", " B") else \
            ("+" if v > 0 else "-") + text
    try:
        if unit == NS:
            return ms(float(value))
        if unit == "us":
            return ms(float(value) * 1e3)
        if unit == "bytes":
            return human_bytes(float(value))
        if unit == "gbps":
            return f"{float(value):,.2f} GB/s"
        if unit == "share":
            return f"{float(value):+.0%}" if float(value) < 0 else f"{float(value):.0%}"
        if unit == "count":
            return f"{int(value):,}" if float(value) == int(value) else f"{float(value):,.2f}"
        if unit == "float":
            return f"{float(value):,.2f}"
        if unit == "device":
            return "CPU" if int(value) < 0 else f"device {int(value)}"
        if unit == "words":  # a category named like an identifier (HTA's "host_wait"): said in words
            return str(value).replace("_", " ")
    except (TypeError, ValueError):
        pass
    if unit in ("ranks", "group") and isinstance(value, str) and value.replace(",", "").replace(" ", "").isdigit():
        value = [int(x) for x in value.split(",") if x.strip()]  # "0,1,2,3" as written by the analyses
    if unit == "group" and isinstance(value, (list, tuple)):
        return group_label(value)
    if unit == "ranks" or isinstance(value, (list, tuple)):
        from rankscope.intlist import format_int_list

        items = list(value) if isinstance(value, (list, tuple)) else [value]
        try:
            return format_int_list(sorted(int(v) for v in items)) if items else "none"
        except (TypeError, ValueError):
            return ", ".join(map(str, items))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in list(value.items())[:8])
    return str(value)


LABELS = {"own_time_ns": ("own time", NS), "others_median_ns": ("other ranks' median own time", NS),
          "relative_excess": ("excess", "share"), "consistency": ("slower in this share of steps", "share"),
          "test": ("test", "text"), "lost_per_step_ns": ("time lost per step", NS),
          "lost_share_of_step": ("share of the step", "share"), "lost_total_ns": ("time lost in all", NS),
          "last_arrival_share": ("arrived last at this share of collectives", "share"),
          "others_wait_at_collectives_per_step_ns": ("others waited for it per step", NS),
          "work_ratio": ("input work vs the other ranks", "float"), "example_op": ("operator", "text"),
          "example": ("its inputs", "text"), "example_others": ("the others' inputs", "text"),
          "last_arrivals": ("last arrivals", "count"), "instances": ("matched collectives", "count"),
          "longest_own_time_steps": ("steps with the longest own time", "count"), "steps": ("steps", "count"),
          "share": ("share", "share"), "ratio": ("ratio", "float"), "median_ns": ("median", NS),
          "threshold": ("threshold", "text"), "transfer_ns": ("transfer", NS), "peers_median_ns": ("peers' median", NS),
          "bytes": ("size", "bytes"), "arrival_skew_ns": ("arrival skew", NS), "wall_diff_ns": ("step time change", NS),
          "own_diff_norm_ns": ("own time change (normalized)", NS), "speed_factor": ("host speed factor", "float"),
          "operator": ("operator", "text"), "input_dims": ("inputs", "text"), "input_dims_base": ("baseline inputs", "text"),
          "cause": ("cause", "text"), "component": ("component", "text")}


def evidence_facts(ev: dict[str, Any], limit: int = 16) -> list[tuple[str, str]]:
    """Known evidence keys as (label, value) in human units; nested dicts are walked one level down;
    unknown keys are left to the JSON output."""
    out: list[tuple[str, str]] = []
    for k, v in ev.items():
        if isinstance(v, dict):
            out += [(LABELS[k2][0], cell(v2, LABELS[k2][1])) for k2, v2 in v.items()
                    if k2 in LABELS and not isinstance(v2, (dict, list))]
        elif k in LABELS and not isinstance(v, list):
            out.append((LABELS[k][0], cell(v, LABELS[k][1])))
    seen, uniq = set(), []
    for lab, val in out:
        if lab not in seen and val:
            seen.add(lab)
            uniq.append((lab, val))
    return uniq[:limit]
