"""The HTA side of tests/hta_oracle.py: run holistictraceanalysis 0.5.0 on one trace directory and write
every value of every analysis as JSON ({analysis: {"values": [[key, value], ...], "error": str|null}}).

``python -m tests.hta_oracle_hta DIR OUT.json [--max-queue-length N] [--operators a,b]``. Runs in its own
process (HTA imports pandas and keeps every rank's events in memory). Each analysis is called as a user
would, with HTA's defaults and all ranks; one that raises is reported with its error, not compared.
A key names the value: (rank, stream, ..., column); series rows are keyed by their position.
"""
from __future__ import annotations

import json
import logging
import math
import sys
import tempfile
import traceback
import warnings
from typing import Any, Callable

Values = list[tuple[list[Any], Any]]


def _num(v: Any) -> Any:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v if isinstance(v, (str, type(None))) else str(v)
    return None if math.isnan(f) else f


def _rows(df: Any, key: list[str], cols: list[str], prefix: list[Any] | None = None) -> Values:
    out: Values = []
    if df is None:
        return out
    for r in df.reset_index().to_dict("records"):
        k = (prefix or []) + [_num(r[c]) for c in key]
        out += [(k + [c], _num(r[c])) for c in cols if c in r]
    return out


def _series(df: Any, by: list[str], cols: list[str], rank: int) -> Values:
    """Time series rows keyed by (rank, group, position in HTA's order)."""
    out: Values = []
    d = df.copy()
    d["_i"] = d.groupby(by, sort=False).cumcount()
    for r in d.to_dict("records"):
        k = [rank] + [_num(r[c]) for c in by] + [int(r["_i"])]
        out += [(k + [c], _num(r[c])) for c in cols]
    return out


def _describe(df: Any, prefix_cols: int) -> Values:
    """A groupby().describe() frame: index levels + (column, stat) pairs."""
    out: Values = []
    if df is None:
        return out
    for idx, row in df.iterrows():
        idx = list(idx) if isinstance(idx, tuple) else [idx]
        for col, v in row.items():
            stat = col[-1] if isinstance(col, tuple) else col
            out.append(([_num(i) for i in idx] + [stat], _num(v)))
    return out


def analyses(ta: Any, opts: dict[str, Any]) -> dict[str, Callable[[], Values]]:
    ranks = ta.t.get_ranks()
    tmp = tempfile.mkdtemp()

    memo: dict[str, Any] = {}

    def idle(part: int) -> Values:
        if "idle" not in memo:
            memo["idle"] = ta.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True)
        a, b = memo["idle"]
        if part == 0:
            return _rows(a, ["rank", "stream", "idle_category"], ["idle_time", "idle_time_ratio"], ["time"])
        return _rows(b.reset_index() if b is not None else None, ["rank", "stream", "idle_category"],
                     ["count", "mean", "std", "min", "25%", "50%", "75%", "max"], ["intervals"])

    def kernels_anno() -> Values:
        out: Values = []
        for r in ranks:
            df = ta.get_gpu_kernels_with_user_annotations(rank=r)
            if df is not None:
                d = df.copy()
                d["_i"] = d.groupby("correlation").cumcount()
                out += [([r, int(x["correlation"]), int(x["_i"]), "user_annotation"], x["s_user_annotation"])
                        for x in d.to_dict("records")]
        return out

    def launch() -> Values:
        out: Values = []
        for r, df in ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False).items():
            d = df.copy()
            d["_i"] = d.groupby("correlation").cumcount()
            out += _rows(d, ["correlation", "_i"], ["cpu_duration", "gpu_duration", "launch_delay"], [r])
        return out

    def aten() -> Values:
        out: Values = []
        for r, df in ta.get_aten_op_kernels_and_delay(ranks=ranks).items():
            out += _rows(df, ["aten_op_name", "kernel_sequence"],
                         ["occurrence_count", "avg_aten_op_launch_delay", "avg_runtime_delay"], [r])
        return out

    def queue_series() -> Values:
        out: Values = []
        for r, df in ta.get_queue_length_time_series(ranks=ranks).items():
            out += _series(df, ["stream"], ["ts", "queue_length"], r)
        return out

    def bw_series() -> Values:
        out: Values = []
        for r, df in ta.get_memory_bw_time_series(ranks=ranks).items():
            out += _series(df, ["name"], ["ts", "memory_bw_gbps"], r)
        return out

    def queue_full() -> Values:
        df = ta.get_time_spent_blocked_on_full_queue(ta.get_queue_length_time_series(ranks=ranks),
                                                     max_queue_length=opts["max_queue_length"])
        return _rows(df, ["rank"], ["stream", "duration_at_max_queue_length", "relative_duration_at_max_queue_length"])

    def sequences() -> Values:
        # HTA matches every symbol containing the name asked for: ask only for names no other symbol
        # contains (the first three of the candidates), and say which (opts["asked"])
        syms = ta.t.symbol_table.get_sym_table()
        opts["asked"] = [o for o in opts["operators"] if not any(o != s and o in s for s in syms)][:3]
        out: Values = []
        for r in ranks:
            for op in opts["asked"]:
                df = ta.get_frequent_cuda_kernel_sequences(operator_name=op, output_dir=tmp, rank=r,
                                                           visualize=False)
                out += _rows(df, ["pattern"], ["count", "GPU kernel duration (us)", "CPU op duration (us)"], [r, op])
        return out

    def cupti() -> Values:
        out: Values = []
        for r, df in zip(ranks, ta.get_cupti_counter_data_with_operators(ranks=ranks)):
            cols = [c for c in df.columns if c in ("name", "top_level_op", "bottom_level_op") or "__" in c or "." in c]
            for i, x in enumerate(df.to_dict("records")):
                out += [([r, i, c], _num(x[c])) for c in cols]
                out.append(([r, i, "op_stack"], " | ".join(x["op_stack"])))
        return out

    return {
        "temporal_breakdown": lambda: _rows(ta.get_temporal_breakdown(visualize=False), ["rank"], [
            "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)", "idle_time_pctg",
            "compute_time_pctg", "non_compute_time_pctg"]),
        "comm_comp_overlap": lambda: _rows(ta.get_comm_comp_overlap(visualize=False), ["rank"],
                                           ["comp_comm_overlap_pctg"]),
        "kernel_type_breakdown": lambda: _rows(ta.get_gpu_kernel_breakdown(visualize=False)[0], ["kernel_type"],
                                               ["sum", "percentage"]),
        "kernel_breakdown": lambda: _rows(ta.get_gpu_kernel_breakdown(visualize=False)[1],
                                          ["kernel_type", "name", "rank"],
                                          ["sum (us)", "max (us)", "min (us)", "stddev", "mean (us)"]),
        "idle_time_breakdown": lambda: idle(0),
        "idle_time_intervals": lambda: idle(1),
        "cuda_kernel_launch_stats": launch,
        "queue_length_summary": lambda: _describe(ta.get_queue_length_summary(ranks=ranks), 2),
        "queue_length_time_series": queue_series,
        "time_blocked_on_full_queue": queue_full,
        "memory_bw_summary": lambda: _describe(ta.get_memory_bw_summary(ranks=ranks), 2),
        "memory_bw_time_series": bw_series,
        "gpu_user_annotation_breakdown": lambda: _rows(ta.get_gpu_user_annotation_breakdown(visualize=False),
                                                       ["rank", "name"],
                                                       ["sum (us)", "max (us)", "min (us)", "stddev", "mean (us)"]),
        "cpu_user_annotation_breakdown": lambda: _rows(ta.get_gpu_user_annotation_breakdown(
            use_gpu_annotation=False, visualize=False), ["rank", "name"],
            ["sum (us)", "max (us)", "min (us)", "stddev", "mean (us)"]),
        "gpu_kernels_with_user_annotations": kernels_anno,
        "aten_op_kernels_and_delay": aten,
        "frequent_cuda_kernel_sequences": sequences,
        "cupti_counters_with_operators": cupti,
        "profiler_steps": lambda: [(["steps"], [int(s) for s in ta.get_profiler_steps()])],
    }


def _no_overlay() -> None:
    """HTA's frequent-sequence search ends by writing a copy of the whole rank's trace with the patterns
    overlaid, for Chrome tracing (cuda_kernel_analysis.py:_overlay_frequent_patterns_with_trace, a pandas
    apply per event, then a JSON dump): about 90% of the oracle's time on df_index_resolver, once per rank
    and operator. The table it returns is built before that file and does not depend on it, and no value
    compared here is read from it: the overlay is replaced by an empty trace (the file is still written)."""
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis

    CudaKernelAnalysis._overlay_frequent_patterns_with_trace = classmethod(  # type: ignore[method-assign]
        lambda cls, t, patterns_df, rank=0, compress_other_kernels=True: {"traceEvents": []})


def run(trace_dir: str, opts: dict[str, Any]) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    from hta.configs.config import logger
    from hta.trace_analysis import TraceAnalysis

    logger.setLevel(logging.CRITICAL)
    _no_overlay()
    ta = TraceAnalysis(trace_dir=trace_dir)
    out: dict[str, Any] = {"ranks": ta.t.get_ranks()}
    for name, fn in analyses(ta, opts).items():
        try:
            out[name] = {"values": fn(), "error": None}
        except Exception as exc:  # HTA raising is a result too: reported, not compared
            tb = traceback.format_exc().strip().splitlines()[-1]
            out[name] = {"values": [], "error": f"{type(exc).__name__}: {exc}"[:300] or tb}
    out["operators_asked"] = opts.get("asked", [])
    return out


def main(argv: list[str]) -> int:
    trace_dir, out_path = argv[0], argv[1]
    opts: dict[str, Any] = {"max_queue_length": 1024, "operators": []}
    for a in argv[2:]:
        k, _, v = a.lstrip("-").partition("=")
        if k == "max-queue-length":
            opts["max_queue_length"] = int(v)
        elif k == "operators":
            opts["operators"] = [x for x in v.split("|") if x]
    with open(out_path, "w") as f:
        json.dump(run(trace_dir, opts), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
