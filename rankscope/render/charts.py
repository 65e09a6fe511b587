"""Plotly figures of the HTML report. Each takes rows that an analysis already computed.

Figures never compute statistics: they pick columns and draw. ``figure_div`` turns a figure into
an HTML fragment without the plotly library (the page embeds it once).
"""
from __future__ import annotations

from typing import Any

_MARGIN = dict(l=50, r=20, t=30, b=40)
# One colour per category in every view (report, rank page, diff): the only place colours are chosen.
PALETTE: dict[str, str] = {
    "compute": "#4c78a8", "exposed communication": "#e45756", "data wait": "#f58518", "idle": "#bab0ac",
    "gap before compute": "#9d755d", "forward + backward": "#54a24b", "tail after compute": "#6f4e7c",
    "wait for the last rank": "#ff9da6", "transfer": "#72b7b2", "clock offset": "#eeca3b",
    "residual after alignment": "#79706e", "peak allocated": "#8cd17d", "collective arrivals": "#555555",
    "last to arrive": "#b3261e",
}
COMPONENTS = tuple((key, label, PALETTE[label]) for key, label in (
    ("computing", "compute"), ("comm_exposed", "exposed communication"), ("data_wait", "data wait"), ("free", "idle")))
# rank lines (steps, memory): plotly's colours without the reds, oranges and greys of the categories
RANK_COLORS = ("#636efa", "#00cc96", "#ab63fa", "#19d3f3", "#b6e880", "#ff97ff", "#fecb52", "#8c564b", "#17becf",
               "#bcbd22")
NAMED_BARS = 16  # bars named "rank 3" up to this many; beyond, "3" under an axis titled "rank"
LEGEND_TOP = dict(orientation="h", y=1.02, yanchor="bottom", x=0, xanchor="left")


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
    many = len(rows) > NAMED_BARS
    ranks = labels or [("" if many else "rank ") + f"{r['rank']}" + (" ⚠" if r["rank"] in stragglers else "")
                       for r in rows]
    fig = go.Figure()
    for col, label, color in COMPONENTS:
        fig.add_bar(name=label, x=ranks, y=[r[col] / 1e6 for r in rows], marker_color=color)
    fig.update_layout(barmode="stack", yaxis_title=ytitle, height=380, margin=_MARGIN, legend=LEGEND_TOP,
                      xaxis=dict(title="rank" if many and not labels else "", type="category"))
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
                        mode="lines+markers", line=dict(color=rank_color(r)), marker=dict(color=rank_color(r)))
    steps = {x["step"] for sub in by_rank.values() for x in sub}
    fig.update_layout(xaxis=dict(title="step", tickformat="d", dtick=max(1, -(-len(steps) // 15))),
                      yaxis_title="step time (ms)", height=320, margin=_MARGIN)
    return fig


def rank_color(rank: int) -> str:
    """The colour of a rank's line, the same in every chart."""
    return RANK_COLORS[int(rank) % len(RANK_COLORS)]


def heatmap_figure(matrix: list[list[float | None]], starts: list[int], title: str, unit: str,
                   width: int = 1) -> Any:
    """A rank × rank heatmap (bytes, time or bandwidth between ranks). Cells sit at the first rank of their
    block of ``width`` ranks (``starts``) on numeric axes, so ticks thin out by themselves at any number of
    ranks. ``None`` cells (a rank with itself) stay blank, so the colour scale spans the pairs only."""
    import plotly.graph_objects as go

    who = "rank %{y} to rank %{x}" if width == 1 else f"ranks %{{y}}+ to ranks %{{x}}+ (blocks of {width})"
    fig = go.Figure(go.Heatmap(z=matrix, x=starts, y=starts, colorscale="Viridis",
                               colorbar=dict(title=unit, thickness=14), xgap=1 if len(starts) <= 32 else 0,
                               ygap=1 if len(starts) <= 32 else 0,
                               hovertemplate="from " + who + ": %{z:,.4g} " + unit + "<extra></extra>"))
    fig.update_layout(title=dict(text=title, x=0, xanchor="left"), height=420, margin=dict(l=60, r=20, t=40, b=50),
                      xaxis=dict(title="to rank", tickformat="d", zeroline=False, showgrid=False),
                      yaxis=dict(title="from rank", tickformat="d", autorange="reversed", zeroline=False,
                                 showgrid=False), plot_bgcolor="#ffffff")
    return fig


def calls_figure(names: list[str], parts: list[tuple[str, list[float]]], ytitle: str, xtitle: str) -> Any:
    """Stacked bars, one per call in order (numbered on the x axis, named on hover), one series per
    ``(label, values)``: readable at 10 calls or 300, with no rotated labels under the chart."""
    import plotly.graph_objects as go

    fig = go.Figure()
    xs = list(range(1, len(names) + 1))
    for label, ys in parts:
        fig.add_bar(name=label, x=xs, y=ys, customdata=names, marker_color=PALETTE[label],
                    hovertemplate="%{customdata}<br>" + label + ": %{y:,.2f} " + ytitle + "<extra></extra>")
    fig.update_layout(barmode="stack", yaxis_title=ytitle, xaxis_title=xtitle, height=340, margin=_MARGIN,
                      legend=LEGEND_TOP, xaxis=dict(tickformat="d"))
    return fig


def bars_figure(rows: list[dict[str, Any]], x: str, ys: list[str], title: str, unit: str = "",
                labels: dict[str, str] | None = None, xlabel: str = "") -> Any:
    """Grouped bars of numeric columns ``ys`` against ``x``; ``labels`` names the series."""
    import plotly.graph_objects as go

    fig = go.Figure()
    many = len(rows) > NAMED_BARS  # beyond that, bare numbers under the bars and the axis says what they are
    for y in ys:
        name = (labels or {}).get(y, y)
        fig.add_bar(name=name, x=[str(r.get(x)) if many else f"{xlabel} {r.get(x)}".strip() for r in rows],
                    y=[r.get(y) for r in rows], marker_color=PALETTE.get(name))
    fig.update_layout(title=dict(text=title, x=0, xanchor="left"), height=340, margin=dict(l=50, r=20, t=60, b=40),
                      yaxis_title=unit, xaxis=dict(title=xlabel if many else "", type="category"), legend=LEGEND_TOP)
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
        rank = name.split()[1] if name.startswith("rank ") and name.split()[1].isdigit() else None
        fig.add_scatter(name=name, x=xs, y=ys, mode="lines",
                        line=dict(color=rank_color(int(rank))) if rank is not None else None)
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
    many = len(rows) > NAMED_BARS and label_prefix.strip() != ""
    xs = [f"{r[x]}" if many else f"{label_prefix}{r[x]}" for r in rows]
    for col, label in parts:
        fig.add_bar(name=label, x=xs, y=[(r.get(col) or 0) / scale for r in rows], marker_color=PALETTE.get(label))
    fig.update_layout(barmode="stack", yaxis_title=ytitle, height=360, margin=_MARGIN, legend=LEGEND_TOP,
                      xaxis=dict(title=label_prefix.strip() if many else "", type="category"))
    return fig


def points_figure(rows: list[dict[str, Any]], x: str, y: str, ytitle: str, xtitle: str = "") -> Any:
    """One marker per row, one horizontal row of markers per ``x`` value (e.g. bandwidth of each call by
    group): group names read left of their row, unrotated, at any number of groups."""
    import plotly.graph_objects as go

    groups = list(dict.fromkeys(str(r.get(x)) for r in rows))
    fig = go.Figure(go.Box(y=[str(r.get(x)) for r in rows], x=[r.get(y) for r in rows], boxpoints="all",
                           orientation="h", marker_color=PALETTE["transfer"], line_color=PALETTE["transfer"],
                           hovertemplate="%{y}: %{x:,.2f} " + ytitle + "<extra></extra>"))
    fig.update_layout(xaxis_title=ytitle, yaxis=dict(title=xtitle, automargin=True, autorange="reversed"),
                      height=max(220, 26 * len(groups) + 90), margin=_MARGIN, showlegend=False)
    return fig


def cluster_figure(tl: dict[str, Any]) -> Any:
    """Who waits for whom: per lane (rank), bars of compute / exposed communication / data wait / idle
    over the chosen steps; a grey line through each collective's arrivals on every rank, the last
    arrival marked red; dotted lines at step starts."""
    import plotly.graph_objects as go

    lanes = tl["lanes"]
    fig = go.Figure()
    for k, name in enumerate(tl["classes"]):
        bs = [b for b in tl["blocks"] if b[3] == k]
        fig.add_bar(name=name, orientation="h", y=[lanes[b[0]] for b in bs], x=[b[2] - b[1] for b in bs],
                    base=[b[1] for b in bs], marker_color=PALETTE[name], marker_line_width=0,
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
    grey = PALETTE["collective arrivals"]
    fig.add_scatter(name="collective arrivals", x=xs, y=ys, mode="lines+markers", line=dict(color=grey, width=1),
                    marker=dict(size=4, color=grey), hoverinfo="skip")
    fig.add_scatter(name="last to arrive", x=lx, y=ly, mode="markers",
                    marker=dict(size=9, color=PALETTE["last to arrive"], symbol="diamond"),
                    hovertemplate="%{y} arrived last at %{x:.2f} ms<extra></extra>")
    # step starts: a dotted line through the lanes, its label above the plot area (inside it, the label
    # would sit on the first rank's lane)
    for step, x in tl["step_starts"].items():
        fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=1, yref="paper", line=dict(dash="dot", color="#888", width=1))
        fig.add_annotation(x=x, y=1, yref="paper", yanchor="bottom", xanchor="left", text=f"step {step}",
                           showarrow=False, font=dict(size=11, color="#555"))
    plot_h = 34 * len(lanes) + 20
    fig.update_layout(barmode="overlay", height=plot_h + 30 + 100, margin=dict(l=20, r=20, t=30, b=100),
                      xaxis_title="ms (clocks aligned)" if tl.get("aligned") else "ms (each rank's own clock)",
                      yaxis=dict(autorange="reversed", type="category", automargin=True),
                      legend=dict(orientation="h", y=-70 / plot_h, yanchor="top", x=0, xanchor="left"))
    return fig
