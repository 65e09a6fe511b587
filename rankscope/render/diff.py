"""Render a run-vs-run diff (``rankscope.analysis.diff``): terminal tables, JSON, an HTML section.

Columns follow X / XBase / XDiff; times in the step and rank tables are shown in ms.
"""
from __future__ import annotations

from typing import Any

from rankscope.analysis.base import Result
from rankscope.render.charts import columns_of, figure_div, rows_of

_NS_TABLES = ("steps", "ranks")
_NS_COLS = ("wall", "computing", "comm_exposed", "data_wait", "free")


def _ms_rows(name: str, t: Any) -> list[dict[str, Any]]:
    rows = rows_of(t)
    if name not in _NS_TABLES:
        return rows
    return [{k: (v / 1e6 if k.startswith(_NS_COLS) and isinstance(v, (int, float)) else v) for k, v in r.items()}
            for r in rows]


def to_json(diff: Result) -> dict[str, Any]:
    """The diff as plain JSON (times: ns in steps/ranks, µs per step in operators/kernels/collectives)."""
    return {"summary": diff.summary, "findings": [f.to_json() for f in diff.findings],
            "tables": {n: rows_of(t) for n, t in diff.tables.items()}}


def terminal_tables(diff: Result, top: int = 15) -> list[Any]:
    """Rich tables: per-rank medians, then the top operators, kernels and collectives."""
    from rich.table import Table

    out = []
    for name, cols in (("ranks", None), ("operators", ["name", "mean", "meanBase", "meanDiff", "spread"]),
                       ("kernels", ["name", "mean", "meanBase", "meanDiff", "spread"]),
                       ("collectives", ["op", "pg_ranks", "calls", "callsDiff", "bytesDiff", "time_us", "time_usBase",
                                        "time_usDiff"])):
        t = diff.tables.get(name)
        rows = _ms_rows(name, t)[:top] if t is not None else []
        if not rows:
            continue
        cols = cols or columns_of(t)
        unit = {"ranks": "ms per step", "collectives": "per rank over the capture, µs"}.get(name, "µs per step")
        tab = Table(title=f"{name} ({unit})", title_justify="left")
        for c in cols:
            tab.add_column(c, justify="left" if c in ("name", "op", "pg_ranks") else "right",
                           style="bold" if c.endswith("Diff") else None, overflow="fold", max_width=60)
        for r in rows:
            tab.add_row(*[_cell(r.get(c)) for c in cols])
        out.append(tab)
    return out


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    return "" if v is None else str(v)


def html_section(diff: Result) -> str:
    """The report's diff view: findings, a per-rank delta chart, and the delta tables."""
    from rankscope.render.html import esc, findings_html, table_html

    parts = [f"<section><p>this run <b>{esc(diff.summary.get('run', ''))}</b> vs baseline "
             f"<b>{esc(diff.summary.get('baseline', ''))}</b></p>{findings_html(diff)}"]
    ranks = diff.tables.get("ranks")
    if ranks is not None and rows_of(ranks):
        parts.append(figure_div(_rank_delta_figure(_ms_rows("ranks", ranks)), "diff-ranks-chart"))
    parts.append("</section>")
    for name in ("ranks", "steps", "operators", "kernels", "collectives"):
        t = diff.tables.get(name)
        if t is None:
            continue
        unit = "ms" if name in _NS_TABLES else ("per rank over the capture, µs" if name == "collectives"
                                                else "µs per step, mean over ranks")
        parts.append(f"<section><h3>{esc(name)} ({unit})</h3>{table_html(_ms_rows(name, t))}</section>")
    return "".join(parts)


def _rank_delta_figure(rows: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for c, label, color in (("computingDiff", "compute", "#4c78a8"), ("comm_exposedDiff", "exposed comm", "#e45756"),
                            ("data_waitDiff", "data wait", "#f58518"), ("freeDiff", "idle", "#bab0ac")):
        fig.add_bar(name=label, x=[f"rank {r['rank']}" for r in rows], y=[r[c] for r in rows], marker_color=color)
    fig.update_layout(barmode="relative", yaxis_title="Δ ms per step (median) vs baseline", height=360,
                      margin=dict(l=50, r=20, t=30, b=40), legend=dict(orientation="h"))
    return fig
