"""Plotly figures of the HTML report. Each takes rows that an analysis already computed.

Figures never compute statistics: they pick columns and draw. ``figure_div`` turns a figure into
an HTML fragment without the plotly library (the page embeds it once).
"""
from __future__ import annotations

from typing import Any

_MARGIN = dict(l=50, r=20, t=30, b=40)
COMPONENTS = (("computing", "compute", "#4c78a8"), ("comm_exposed", "exposed communication", "#e45756"),
              ("data_wait", "data wait", "#f58518"), ("free", "idle", "#bab0ac"))


def figure_div(fig: Any, div_id: str, href: str | None = None) -> str:
    """An HTML fragment for ``fig``: an empty div and the figure's JSON, drawn by the page when its view is
    first shown (so opening a big report draws only the overview). plotly's JSON escapes ``<``, ``>`` and
    ``/``, so trace names cannot close the script element."""
    import html

    h = fig.layout.height or 360
    i = html.escape(div_id, quote=True)
    link = f' data-href="{html.escape(href, quote=True)}"' if href else ""
    return (f'<div id="{i}" class="rs-fig" style="min-height:{int(h)}px"></div>'
            f'<script type="application/json" data-fig="{i}"{link}>{fig.to_json()}</script>')


def rows_of(table: Any) -> list[dict[str, Any]]:
    """Rows of a pyarrow or polars table (or a list of dicts) as a list of dicts."""
    if table is None:
        return []
    if isinstance(table, list):
        return table
    if hasattr(table, "to_dicts"):
        return table.to_dicts()
    return table.to_pylist()


def columns_of(table: Any) -> list[str]:
    """Column names of a pyarrow or polars table (or of the first dict of a list)."""
    if isinstance(table, list):
        return list(table[0]) if table else []
    return list(table.column_names if hasattr(table, "column_names") else table.columns)


def breakdown_figure(per_rank: Any, stragglers: set[int], labels: list[str] | None = None,
                     ytitle: str = "ms per step (median)") -> Any:
    """Stacked bars: per rank (or per ``labels``), step time split into compute / exposed comm / data / idle."""
    import plotly.graph_objects as go

    rows = rows_of(per_rank)
    ranks = labels or [f"rank {r['rank']}" + (" ⚠" if r["rank"] in stragglers else "") for r in rows]
    fig = go.Figure()
    for col, label, color in COMPONENTS:
        fig.add_bar(name=label, x=ranks, y=[r[col] / 1e6 for r in rows], marker_color=color)
    fig.update_layout(barmode="stack", yaxis_title=ytitle, height=380, margin=_MARGIN,
                      legend=dict(orientation="h"))
    return fig


def steps_figure(bd: Any) -> Any:
    """Step time per rank over steps."""
    import plotly.graph_objects as go

    by_rank: dict[int, list[dict[str, Any]]] = {}
    for x in rows_of(bd):
        by_rank.setdefault(x["rank"], []).append(x)
    fig = go.Figure()
    for r in sorted(by_rank):
        sub = by_rank[r]
        fig.add_scatter(name=f"rank {r}", x=[x["step"] for x in sub], y=[x["wall"] / 1e6 for x in sub],
                        mode="lines+markers")
    fig.update_layout(xaxis_title="step", yaxis_title="step time (ms)", height=320, margin=_MARGIN)
    return fig


def heatmap_figure(matrix: list[list[float]], labels: list[str], title: str, unit: str) -> Any:
    """A rank × rank heatmap (e.g. bytes, time or bandwidth between ranks)."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Heatmap(z=matrix, x=labels, y=labels, colorscale="Viridis",
                               colorbar=dict(title=unit)))
    fig.update_layout(title=title, height=420, margin=dict(l=60, r=20, t=40, b=50),
                      xaxis_title="to rank", yaxis_title="from rank", yaxis_autorange="reversed")
    return fig


def bars_figure(rows: list[dict[str, Any]], x: str, ys: list[str], title: str, unit: str = "",
                labels: dict[str, str] | None = None, xlabel: str = "") -> Any:
    """Grouped bars of numeric columns ``ys`` against ``x``; ``labels`` names the series."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for y in ys:
        fig.add_bar(name=(labels or {}).get(y, y), x=[f"{xlabel} {r.get(x)}".strip() for r in rows],
                    y=[r.get(y) for r in rows])
    fig.update_layout(title=title, height=340, margin=_MARGIN, yaxis_title=unit, legend=dict(orientation="h"))
    return fig


def spread_figure(rows: list[dict[str, Any]], name: str, lo: str, mid: str, hi: str, unit: str) -> Any:
    """Horizontal bars of ``mid`` with error bars from ``lo`` to ``hi`` (cross-rank spread)."""
    import plotly.graph_objects as go

    names = [str(r[name])[:60] for r in rows]
    m = [r[mid] for r in rows]
    fig = go.Figure(go.Bar(y=names, x=m, orientation="h", marker_color="#4c78a8",
                           error_x=dict(type="data", symmetric=False,
                                        array=[r[hi] - r[mid] for r in rows],
                                        arrayminus=[r[mid] - r[lo] for r in rows])))
    fig.update_layout(height=max(260, 22 * len(rows) + 80), margin=dict(l=260, r=20, t=30, b=40),
                      xaxis_title=unit, yaxis_autorange="reversed")
    return fig


def lines_figure(series: dict[str, tuple[list[float], list[float]]], xtitle: str, ytitle: str) -> Any:
    """One line per named series of (x, y) points (memory curves, skew over time)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, (xs, ys) in series.items():
        fig.add_scatter(name=name, x=xs, y=ys, mode="lines")
    fig.update_layout(xaxis_title=xtitle, yaxis_title=ytitle, height=340, margin=_MARGIN)
    return fig


def icicle_figure(ids: list[str], labels: list[str], parents: list[str], values: list[float]) -> Any:
    """An icicle (flame graph turned downwards) of folded stacks; values are inclusive µs."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Icicle(ids=ids, labels=labels, parents=parents, values=values, branchvalues="total",
                              tiling=dict(orientation="v"), root_color="#eceef2",
                              hovertemplate="%{label}<br>%{value:,.0f} µs<extra></extra>"))
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def stacked_figure(rows: list[dict[str, Any]], x: str, parts: list[tuple[str, str]], ytitle: str, scale: float,
                   label_prefix: str = "rank ") -> Any:
    """Stacked bars of ``parts`` (column, label) per ``x``, values divided by ``scale``."""
    import plotly.graph_objects as go

    fig = go.Figure()
    xs = [f"{label_prefix}{r[x]}" for r in rows]
    for col, label in parts:
        fig.add_bar(name=label, x=xs, y=[(r.get(col) or 0) / scale for r in rows])
    fig.update_layout(barmode="stack", yaxis_title=ytitle, height=360, margin=_MARGIN, legend=dict(orientation="h"))
    return fig


def points_figure(rows: list[dict[str, Any]], x: str, y: str, ytitle: str) -> Any:
    """One marker per row, grouped on the x axis by ``x`` (e.g. bandwidth of each call by group)."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Box(x=[str(r.get(x)) for r in rows], y=[r.get(y) for r in rows], boxpoints="all"))
    fig.update_layout(yaxis_title=ytitle, xaxis_title=x, height=320, margin=_MARGIN)
    return fig


CLASS_COLORS = ("#4c78a8", "#e45756", "#f58518", "#d9d6d2")


def cluster_figure(tl: dict[str, Any]) -> Any:
    """Who waits for whom: per lane (rank), bars of compute / exposed communication / data wait / idle
    over the chosen steps; a grey line through each collective's arrivals on every rank, the last
    arrival marked red; dotted lines at step starts."""
    import plotly.graph_objects as go

    lanes = tl["lanes"]
    fig = go.Figure()
    for k, (name, color) in enumerate(zip(tl["classes"], CLASS_COLORS)):
        bs = [b for b in tl["blocks"] if b[3] == k]
        fig.add_bar(name=name, orientation="h", y=[lanes[b[0]] for b in bs], x=[b[2] - b[1] for b in bs],
                    base=[b[1] for b in bs], marker_color=color, marker_line_width=0,
                    customdata=[tl["ranks"][b[0]] for b in bs],
                    hovertemplate="%{y}<br>" + name + ": %{x:.2f} ms from %{base:.2f} ms<extra></extra>")
    xs: list[Any] = []
    ys: list[Any] = []
    lx, ly = [], []
    for pts in tl["arrivals"]:
        xs += [p[1] for p in pts] + [None]
        ys += [lanes[p[0]] for p in pts] + [None]
        last = max(pts, key=lambda p: p[1])
        lx.append(last[1])
        ly.append(lanes[last[0]])
    fig.add_scatter(name="collective arrivals", x=xs, y=ys, mode="lines+markers", line=dict(color="#555", width=1),
                    marker=dict(size=4, color="#555"), hoverinfo="skip")
    fig.add_scatter(name="last to arrive", x=lx, y=ly, mode="markers", marker=dict(size=9, color="#b3261e",
                                                                                  symbol="diamond"),
                    hovertemplate="%{y} arrived last at %{x:.2f} ms<extra></extra>")
    for step, x in tl["step_starts"].items():
        fig.add_vline(x=x, line_dash="dot", line_color="#888", annotation_text=f"step {step}",
                      annotation_position="top left")
    fig.update_layout(barmode="overlay", height=max(220, 34 * len(lanes) + 110), margin=dict(l=180, r=20, t=40, b=40),
                      xaxis_title="ms (clocks aligned)" if tl.get("aligned") else "ms (each rank's own clock)",
                      yaxis=dict(autorange="reversed", type="category"), legend=dict(orientation="h", y=-0.25))
    return fig
