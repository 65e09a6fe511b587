"""Render a run-vs-run diff (``rankscope.analysis.compare.diff``): terminal tables, JSON, an HTML section.

The analysis's columns follow X / XBase / XDiff; the HTML view shows the readable subset declared in
``render.declare.DIFF_TABLES`` (labels, human units, signed changes), the terminal its own 80-column tables.
"""
from __future__ import annotations

from typing import Any

from rankscope.analysis.base import Result
from rankscope.render.charts import figure_div, rows_of

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


def _short(text: Any, width: int) -> str:
    t = "" if text is None else str(text)
    return t if len(t) <= width else t[: width - 1] + "…"


def _ms(v: Any, scale: float = 1e6, signed: bool = False) -> str:
    if not isinstance(v, (int, float)):
        return ""
    return f"{v / scale:+,.1f}" if signed else f"{v / scale:,.1f}"


def terminal_tables(diff: Result, top: int = 15) -> list[Any]:
    """Rich tables that fit 80 columns (also when piped): per rank, per rank and operator (with input
    shape), collectives. Δ columns are normalized by the host speed factor where they say "norm"."""
    from rich.table import Table

    from rankscope.analysis.diagnosis.work import first_dims

    def table(title: str, heads: list[tuple[str, bool]]) -> Any:
        t = Table(title=title, title_justify="left", pad_edge=False, padding=(0, 1))
        for h, left in heads:
            t.add_column(h, justify="left" if left else "right", no_wrap=True)
        return t

    out = []
    ranks, own = diff.tables.get("ranks"), diff.tables.get("own")
    if ranks is not None and rows_of(ranks):
        norm = {r["rank"]: r for r in rows_of(own)} if own is not None else {}
        t = table("per rank (ms per step, medians; * this run − speed factor × baseline)",
                  [("rank", True), ("step", False), ("base", False), ("Δ step", False), ("Δ own*", False),
                   ("Δ compute*", False), ("Δ data*", False), ("Δ wait", False)])
        for r in rows_of(ranks)[:top]:
            n = norm.get(r["rank"], {})
            t.add_row(str(r["rank"]), _ms(r["wall"]), _ms(r["wallBase"]), _ms(r["wallDiff"], signed=True),
                      _ms(n.get("ownDiffNorm"), signed=True), _ms(n.get("computingDiffNorm"), signed=True),
                      _ms(n.get("data_waitDiffNorm"), signed=True), _ms(r["comm_exposedDiff"], signed=True))
        out.append(t)
    ops = diff.tables.get("rank_operator_totals")
    if ops is not None and rows_of(ops):
        t = table("per rank and operator (ms per step; usual inputs here / in the baseline)",
                  [("rank", True), ("operator", True), ("inputs", True), ("this", False), ("base", False),
                   ("Δ*", False)])
        for r in rows_of(ops)[:top]:
            shapes = r["inputs"] if r["inputs"] == r["inputsBase"] else f"{r['inputs'] or '-'} / {r['inputsBase'] or '-'}"
            t.add_row(str(r["rank"]), _short(r["name"], 22), _short(shapes, 18), _ms(r["us"], 1e3),
                      _ms(r["usBase"], 1e3), _ms(r["usDiffNorm"], 1e3, signed=True))
        out.append(t)
    coll = diff.tables.get("collectives")
    if coll is not None and rows_of(coll):
        t = table("collectives (per rank over the capture)", [("op", True), ("group", True), ("calls", False),
                                                              ("Δ calls", False), ("Δ MB", False), ("ms", False),
                                                              ("base ms", False), ("Δ ms", False)])
        for r in rows_of(coll)[:top]:
            t.add_row(_short(r["op"], 16), _short(r["pg_ranks"], 12), f"{r['calls']:g}", f"{r['callsDiff']:+g}",
                      _ms(r["bytesDiff"], 1e6, signed=True), _ms(r["time_us"], 1e3), _ms(r["time_usBase"], 1e3),
                      _ms(r["time_usDiff"], 1e3, signed=True))
        out.append(t)
    return out


def html_section(diff: Result) -> str:
    """The report's diff view: findings, a per-rank delta chart, and the delta tables as declared in
    ``render.declare.DIFF_TABLES`` (labels and human units; every column is in ``rankscope diff --json``)."""
    from rankscope.analysis.compare.diff import VIEW_TABLES as DIFF_TABLES
    from rankscope.render.blocks import declared_table, esc, findings_html

    parts = [f"<section><p>this run <b>{esc(diff.summary.get('run', ''))}</b> vs baseline "
             f"<b>{esc(diff.summary.get('baseline', ''))}</b></p>{findings_html(diff)}"]
    ranks = diff.tables.get("ranks")
    if ranks is not None and rows_of(ranks):
        parts.append("<h3>change per rank against the baseline (ms per step, medians)</h3>"
                     + figure_div(_rank_delta_figure(_ms_rows("ranks", ranks)), "diff-ranks-chart"))
    parts.append("</section>")
    for tv in DIFF_TABLES:
        t = diff.tables.get(tv.table)
        if t is None:
            continue
        rows = rows_of(t)
        body = declared_table(rows, tv.cols) if rows else f'<p class="muted">{esc(tv.empty)}</p>'
        parts.append(f'<section class="diff-table" id="diff-{esc(tv.table)}"><h3>{esc(tv.title)}</h3>{body}</section>')
    return "".join(parts)


def _rank_delta_figure(rows: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    from rankscope.render.charts import COMPONENTS, LEGEND_TOP, NAMED_BARS

    fig = go.Figure()
    many = len(rows) > NAMED_BARS
    for c, label, color in COMPONENTS:
        fig.add_bar(name=label, x=[f"{r['rank']}" if many else f"rank {r['rank']}" for r in rows],
                    y=[r[f"{c}Diff"] for r in rows], marker_color=color)
    fig.update_layout(barmode="relative", yaxis_title="Δ ms per step (median) vs baseline", height=360,
                      margin=dict(l=50, r=20, t=30, b=40), legend=LEGEND_TOP,
                      xaxis=dict(title="rank" if many else "", type="category"))
    return fig
