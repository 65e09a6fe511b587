"""Terminal tables (rich renderables; the CLI prints them)."""
from __future__ import annotations

from typing import Any

from rich.table import Table


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f}"


def rank_table(per_rank: Any, stragglers: set[int]) -> Table:
    """Per rank: mean step time, compute, exposed communication, data wait, idle (ms); the straggler rows
    in red. The verdict is not in it: the CLI prints it once, under the table."""
    t = Table(title="Per-rank step breakdown (median over steps, ms)")
    for col in ("rank", "step time", "compute", "exposed comm.", "data wait", "idle"):
        t.add_column(col, justify="right")
    for row in per_rank.to_pylist():
        style = "bold red" if row["rank"] in stragglers else None
        t.add_row(str(row["rank"]), _ms(row["wall"]), _ms(row["computing"]), _ms(row["comm_exposed"]),
                  _ms(row["data_wait"]), _ms(row["free"]), style=style)
    return t


def findings_lines(results: dict[str, Any], limit: int = 8) -> list[str]:
    """Warnings and critical findings of every analysis except the straggler verdict, worst first."""
    order = {"critical": 0, "warning": 1}
    found = [(order[f.severity.value], name, f.title) for name, r in results.items() if name != "straggler"
             for f in r.findings if f.severity.value in order]
    found.sort(key=lambda t: t[0])
    lines = [f"{'✖' if sev == 0 else '!'} [{name}] {title}" for sev, name, title in found[:limit]]
    if len(found) > limit:
        lines.append(f"… and {len(found) - limit} more (see the report or --json)")
    return lines


def rpc_lines(results: dict[str, Any], limit: int = 8) -> list[str]:
    """The RPC view in a few lines: the headline, then per destination calls, callee time and
    network + queueing time, the clock offset used; nothing when the run made no RPC calls."""
    r = results.get("rpc")
    if r is None or r.skipped:
        return []
    lines = [f"RPC: {r.findings[0].title}" if r.findings else "RPC:"]
    for row in r.tables["destinations"].head(limit).iter_rows(named=True):
        lines.append(f"  rank {row['rank']} {row['src']} -> {row['dst']}: {row['calls']} calls, "
                     f"{_ms(row['remote_ns'] or 0)} ms on the callee, {_ms(row['network_ns'] or 0)} ms network + "
                     f"queueing, clock offset {_ms(row['offset_ns'] or 0)} ± {_ms(row['offset_error_ns'] or 0)} ms")
    fns = r.tables["functions"]
    if fns.height:
        top = fns.row(0, named=True)
        lines.append(f"  slowest function: {top['fn']} on {top['dst']} ({top['calls']} calls, "
                     f"{_ms(top['round_trip_ns'])} ms in all)")
    return lines
