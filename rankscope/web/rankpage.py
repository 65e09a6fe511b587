"""The web UI's page of one rank: its steps (where each step's time went), its top operators and
kernels, its memory, and its slice of the merged timeline (a download of the chosen steps)."""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.base import frame


def top_ops(run: Any, rank: int, kinds: tuple[str, ...], n: int = 25) -> list[dict[str, Any]]:
    """The rank's operators (or kernels) by total time, per step: name, calls, total and mean per call."""
    ev = frame(run.table(rank, "events", columns=["name", "kind", "dur"]))
    steps = max(1, run.ranks[rank].counts.get("steps", 0) or 1)
    ev = ev.filter(pl.col("kind").cast(pl.Utf8).is_in(list(kinds)) & ~pl.col("name").cast(pl.Utf8).str.starts_with(
        "ProfilerStep#"))
    return (ev.group_by(pl.col("name").cast(pl.Utf8)).agg(calls=pl.len() / steps, total=pl.col("dur").sum() / steps,
                                                          mean=pl.col("dur").mean())
            .sort("total", descending=True).head(n).to_dicts())


def device_analyses() -> list[str]:
    """The analyses shown per rank below its operators: the GPU analyses (``rankscope.analysis.gpu``: kernel
    breakdown, idle time per stream, launch delay, queue length, bandwidth, annotations, idle gaps, ...)."""
    from rankscope.analysis.registry import analyses

    return [n for n, a in analyses().items() if a.view is not None and a.run.__module__.startswith("rankscope.analysis.gpu.")]


def device_sections(results: dict[str, Any], rank: int) -> list[str]:
    """The GPU analyses (the report's "operators" view: kernel breakdown, idle time per stream, launch delay,
    queue length, bandwidth, annotations, idle gaps and their causes, ...) cut to this rank: each declared
    table that has a rank column, its rows of this rank, under the analysis' title. Nothing when a run has no
    device activity (those analyses are skipped)."""
    from rankscope.render.blocks import declared_table, esc
    from rankscope.render.declare import view_of

    out = []
    for name, res in results.items():
        if res is None or res.skipped:
            continue
        if name not in device_analyses():
            continue
        view = view_of(name, res.summary, res.tables)
        blocks = []
        for tv in view.tables:
            tab = res.tables.get(tv.table)
            df = frame(tab) if tab is not None else None
            if df is None or "rank" not in df.columns:
                continue
            rows = df.filter(pl.col("rank") == rank).to_dicts()
            if rows:
                blocks.append(f"<h4>{esc(tv.title)}</h4>" + declared_table(rows, [c for c in tv.cols if c.key != "rank"]))
        if blocks:
            out.append(f'<section class="rank-device"><h3>{esc(view.title)}</h3>{"".join(blocks)}</section>')
    return out


def page(run: Any, results: dict[str, Any], rank: int, name: str) -> str:
    from rankscope.analysis.diagnosis.waits import choose_steps
    from rankscope.intlist import format_int_list
    from rankscope.render import charts
    from rankscope.analysis.steps.breakdown import SHOWN as BREAKDOWN_COLS
    from rankscope.analysis.view import Col
    from rankscope.render.blocks import declared_table, esc
    from rankscope.render.html import _CSS, _JS, _plotly_js

    parts = []
    st = results.get("straggler")
    flagged = [f.title for f in (st.findings if st and not st.skipped else []) if rank in f.ranks]
    parts.append(f'<p class="verdict {"warn" if flagged else "ok"}">'
                 f'{esc("; ".join(flagged) if flagged else f"rank {rank} is not named by the straggler verdict")}</p>')
    bd_res = results.get("breakdown")
    if bd_res is not None and not bd_res.skipped:
        bd = frame(bd_res.tables["breakdown"])
        mine = bd.filter(pl.col("rank") == rank).sort("step")
        rows = mine.to_dicts()
        parts.append("<h3>steps</h3>" + charts.figure_div(charts.breakdown_figure(
            rows, set(), [f"step {r['step']}" for r in rows], "ms"), "rank-steps-chart"))
        parts.append(declared_table(rows, BREAKDOWN_COLS[1:]))
        chosen = choose_steps(bd, None)
        if chosen:
            href = f"/runs/{name}/timeline?steps={format_int_list(chosen)}&ranks={rank}"
            parts.append(f'<p><a id="rank-timeline-link" href="{esc(href)}">download rank {rank}\'s slice of the '
                         f"merged timeline, steps {esc(format_int_list(chosen))}</a> (open it in ui.perfetto.dev)</p>")
    for title, what, kinds in (("top operators", "operator", ("cpu_op",)),
                               ("top kernels", "kernel", ("kernel", "memcpy", "memset"))):
        rows = top_ops(run, rank, kinds)
        cols = (Col("name", what), Col("calls", "calls per step", "count"), Col("total", "time per step", "ns"),
                Col("mean", "mean per call", "ns"))
        if rows:
            parts.append(f"<h3>{title}</h3>" + declared_table(rows, cols))
    parts += device_sections(results, rank)
    mem = frame(run.table(rank, "memory", columns=["ts", "total_allocated"])) if run.ranks[rank].counts.get(
        "memory", 1) else pl.DataFrame()
    if mem.height:
        mem = mem.gather_every(max(1, mem.height // 400))
        t0 = int(mem["ts"][0])
        fig = charts.lines_figure({f"rank {rank}": (((mem["ts"] - t0) / 1e6).to_list(),
                                                    (mem["total_allocated"] / 1e6).to_list())},
                                  "ms since the first memory event", "allocated (MB)")
        parts.append("<h3>memory</h3>" + charts.figure_div(fig, "rank-memory-chart"))
    else:
        parts.append('<p class="muted">no memory events (profile with profile_memory=True)</p>')
    host = run.ranks[rank].host or "?"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>rankscope · {esc(run.run_id)} · rank {rank}</title><style>{_CSS}</style>"
            f"<script>{_plotly_js()}</script><script>{_JS}</script></head><body><header><h1>{esc(run.run_id)} · rank "
            f'{rank}</h1><div class="sub">host {esc(host)} · <a style="color:#9cc3ff" href="/runs/{esc(name)}">the '
            f'run</a> · <a style="color:#9cc3ff" href="/">all runs</a></div></header><main><div class="view active" '
            f'id="view-rank"><section>{"".join(parts)}</section></div></main>'
            "<script>rsDraw(document.getElementById('view-rank'))</script></body></html>")
