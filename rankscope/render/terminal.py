"""Terminal tables (rich renderables; the CLI prints them)."""
from __future__ import annotations

from typing import Any

from rich.table import Table


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f}"


def rank_table(per_rank: Any, verdict: str, stragglers: set[int]) -> Table:
    """Per rank: mean step time, compute, exposed communication, data wait, idle (ms)."""
    t = Table(title="Per-rank step breakdown (median over steps, ms)", caption=f"verdict: {verdict}")
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
