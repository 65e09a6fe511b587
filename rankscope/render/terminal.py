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


def pipeline_lines(results: dict[str, Any], limit: int = 8) -> list[str]:
    """A pipeline run's stages in two lines (the "pipeline" analysis): the bubble per stage (median per step)
    against the natural one, then the bottleneck stage and what balancing would save; none otherwise."""
    r = results.get("pipeline")
    if r is None or r.skipped:
        return []
    s = r.summary
    per = s.get("per_stage") or []
    waits = ", ".join(f"stage {p['stage']} {_ms(p['bubble_ns'])} ms ({p['bubble_share']:.0%})" for p in per[:limit])
    more = f", … {len(per) - limit} more" if len(per) > limit else ""
    exp = s.get("expected_bubble_share")
    v = int(s.get("stages_per_rank") or 1)
    formula = "(p-1)/(m+p-1)" if v <= 1 else f"(p-1)/({v}m+p-1)"
    natural = f"; natural bubble {formula} = {exp:.0%}" if exp is not None else ""
    held = f" ({v} stages per rank)" if v > 1 else ""
    lines = [f"pipeline: {s['shape']} (ranks {s['stage_order']}), {s['schedule']}{held}, {s['microbatches']} "
             f"microbatches; waiting for neighbours per step: {waits}{more}{natural}"]
    if s.get("bottleneck_stage") is not None and not s.get("balanced", True):
        lines.append(f"  bottleneck: stage {s['bottleneck_stage']} holds {s['bottleneck_work_share']:.0%} of the work; "
                     f"balanced, the step would take {s['step_ms_if_balanced']:,.1f} ms instead of {s['step_ms']:,.1f} ms")
    elif s.get("bottleneck_stage") is not None:
        lines.append(f"  the stages are balanced (the busiest holds {s['imbalance']:.2f}x the mean work)")
    return lines
