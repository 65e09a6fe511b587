"""Analysis "rpc": what the RPC calls of a run cost, and where (``ranks/<r>/rpc.<n>.json.gz``).

Each call's round trip splits into the callee's own time (``remote_ns``: the request's arrival to the
reply's departure, on the callee's clock) and the rest (``network_ns``: serialization, transport and
queueing on both sides, both ways). Per destination: calls, errors, calls without remote events, remote
vs network + queueing time, and the clock offset estimated for that worker (median over calls, with the
median error bound). Per function: the slowest first (total round trip). Remote operators: self time
per worker and operator.
"""
from __future__ import annotations

from typing import Any
from rankscope.analysis.base import Analysis
from rankscope.analysis.view import NS, Col, TableView, View


def run_rpc(run: Any, results: dict[str, Any]) -> Any:
    """Registered analysis "rpc"."""
    import polars as pl

    from rankscope.analysis.base import Finding, Result, Severity
    from rankscope.model.readers import rpcfiles

    from rankscope.model.info import records

    calls, problems = rpcfiles.load(str(run.path))
    if not calls:
        why = f"; {len(problems)} problems with its RPC files, the first: {problems[0]}" if problems else ""
        return Result("rpc", skipped="no RPC calls in the run (torch.distributed.rpc calls made while "
                                     f"rankscope.profile records are saved as ranks/<r>/rpc.<n>.json.gz){why}",
                      summary={"issues": records(problems)})
    cdf, edf = rpcfiles.tables(calls)
    cdf = cdf.with_columns(round_trip_ns=pl.col("t_done") - pl.col("t_send"))
    dest = cdf.group_by("rank", "src", "dst").agg(
        calls=pl.len(), errors=(pl.col("status") == "error").sum(),
        unprofiled=(pl.col("status") == "unprofiled").sum(), nested=(pl.col("depth") > 0).sum(),
        round_trip_ns=pl.col("round_trip_ns").sum(), remote_ns=pl.col("remote_ns").sum(),
        network_ns=pl.col("network_ns").sum(), offset_ns=pl.col("offset_ns").median(),
        offset_error_ns=pl.col("error_ns").median()).sort("rank", "src", "dst")
    fns = cdf.group_by("dst", "fn").agg(
        calls=pl.len(), round_trip_ns=pl.col("round_trip_ns").sum(), max_round_trip_ns=pl.col("round_trip_ns").max(),
        remote_ns=pl.col("remote_ns").sum(), network_ns=pl.col("network_ns").sum()) \
        .sort("round_trip_ns", "fn", descending=[True, False])
    ops = edf.filter(pl.col("name") != "[memory]").group_by("worker", "name").agg(
        calls=pl.len(), self_ns=pl.col("self").sum(), total_ns=pl.col("dur").sum()) \
        .sort("self_ns", "name", descending=[True, False]).head(50)
    remote, network = int(cdf["remote_ns"].fill_null(0).sum()), int(cdf["network_ns"].fill_null(0).sum())
    summary = {"calls": cdf.height, "destinations": cdf["dst"].n_unique(), "remote_ns": remote,
               "network_ns": network, "remote_events": edf.height, "nested_calls": int((cdf["depth"] > 0).sum()),
               "not_captured": problems, "issues": records(problems)}  # issues: each line's kind, file, rank, count
    findings = [Finding("rpc", f"{cdf.height} RPC calls to {summary['destinations']} workers: "
                               f"{remote / 1e6:,.2f} ms on the callees, {network / 1e6:,.2f} ms network + queueing",
                        Severity.INFO, evidence={"remote_ns": remote, "network_ns": network})]
    if problems:
        findings.append(Finding("rpc_gap", f"remote events not captured for some calls: {problems[0]}",
                                Severity.WARNING, evidence={"gaps": problems[:10]}))
    return Result("rpc", tables={"destinations": dest, "functions": fns, "remote_operators": ops,
                                 "calls": cdf.drop("gap")}, findings=findings, summary=summary)


ANALYSIS = Analysis(
    name="rpc",
    description="RPC calls: per destination, remote time vs network + queueing, slowest functions",
    run=run_rpc,
    view=View("RPC calls across workers", (
        Col("calls", "calls", "count"), Col("destinations", "destinations", "count"),
        Col("remote_ns", "time on the callees", NS), Col("network_ns", "network + queueing", NS),
        Col("nested_calls", "nested calls (a callee calling on)", "count"), Col("not_captured", "not captured")),
        (TableView("destinations", "per destination", (
            Col("rank", "rank", "count"), Col("src", "from"), Col("dst", "to"), Col("calls", "calls", "count"),
            Col("errors", "errors", "count"), Col("unprofiled", "without remote events", "count"),
            Col("round_trip_ns", "round trips", NS), Col("remote_ns", "on the callee", NS),
            Col("network_ns", "network + queueing", NS), Col("offset_ns", "clock offset (median)", NS),
            Col("offset_error_ns", "offset error bound", NS))),
         TableView("functions", "slowest functions", (
             Col("dst", "on"), Col("fn", "function"), Col("calls", "calls", "count"),
             Col("round_trip_ns", "round trips", NS), Col("max_round_trip_ns", "longest", NS),
             Col("remote_ns", "on the callee", NS), Col("network_ns", "network + queueing", NS))),
         TableView("remote_operators", "remote operators (self time)", (
             Col("worker", "worker"), Col("name", "operator"), Col("calls", "calls", "count"),
             Col("self_ns", "self time", NS), Col("total_ns", "total time", NS)))),
        "no torch.distributed.rpc calls were recorded", optional=True, place="rpc"),
)
