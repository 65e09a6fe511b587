"""Self-contained HTML report: plotly's JavaScript is embedded, so it opens offline.

Renders tables and findings; computes no statistics. Every string that comes from a trace is
escaped with ``html.escape`` before it reaches the page.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rankscope.analysis.base import Result
from rankscope.model.run import Run

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{opacity:.75;font-size:13px}main{padding:16px 24px;max-width:1300px}
section{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:12px 18px;margin:14px 0}
h2{font-size:16px;margin:4px 0 10px}.verdict{font-size:18px;font-weight:600}
.warn{color:#b3261e}.ok{color:#1e7a35}table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #eceef2;padding:4px 10px;text-align:right}th{background:#f0f2f5}
td:first-child,th:first-child{text-align:left}.muted{color:#6b7280;font-size:12px}
"""


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _figure_div(fig: Any, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def breakdown_figure(per_rank: Any, stragglers: set[int]) -> Any:
    """Stacked bars: per rank, median step time split into compute / exposed comm / data / idle."""
    import plotly.graph_objects as go

    rows = per_rank.to_pylist()
    ranks = [f"rank {r['rank']}" + (" ⚠" if r["rank"] in stragglers else "") for r in rows]
    fig = go.Figure()
    for col, label, color in (("computing", "compute", "#4c78a8"), ("comm_exposed", "exposed comm", "#e45756"),
                              ("data_wait", "data wait", "#f58518"), ("free", "idle", "#bab0ac")):
        fig.add_bar(name=label, x=ranks, y=[r[col] / 1e6 for r in rows], marker_color=color)
    fig.update_layout(barmode="stack", yaxis_title="ms per step (median)", height=380,
                      margin=dict(l=50, r=20, t=30, b=40), legend=dict(orientation="h"))
    return fig


def steps_figure(bd: Any) -> Any:
    """Step time per rank over steps."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in sorted(set(bd.column("rank").to_pylist())):
        sub = [x for x in bd.to_pylist() if x["rank"] == r]
        fig.add_scatter(name=f"rank {r}", x=[x["step"] for x in sub], y=[x["wall"] / 1e6 for x in sub],
                        mode="lines+markers")
    fig.update_layout(xaxis_title="step", yaxis_title="step time (ms)", height=320,
                      margin=dict(l=50, r=20, t=30, b=40))
    return fig


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    return str(v)


def render(run: Run, results: dict[str, Result], out: str | Path) -> Path:
    """Write the report and return its path."""
    sections = [_overview(run, results)]
    if "breakdown" in results and not results["breakdown"].skipped:
        sections.append(_steps_section(results))
    sections.append(_problems(run, results))
    title = f"rankscope · {html.escape(run.run_id)}"
    doc = f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{_CSS}</style><script>{_plotly_js()}</script></head><body>
<header><h1>{title}</h1><div class="sub">{len(run.ranks)} ranks · {html.escape(run.path)}</div></header>
<main>{''.join(sections)}</main>
<script id="rankscope-data" type="application/json">{_json_blob(run, results)}</script>
</body></html>"""
    p = Path(out)
    p.write_text(doc, encoding="utf-8")
    return p


def _json_blob(run: Run, results: dict[str, Result]) -> str:
    data = {"run_id": run.run_id, "ranks": run.rank_ids, "missing": run.missing,
            "verdict": results.get("straggler", Result("straggler")).summary.get("verdict")}
    # "</" must not close the script element early.
    return json.dumps(data).replace("</", "<\\/")


def _overview(run: Run, results: dict[str, Result]) -> str:
    st = results.get("straggler")
    if st is None or st.skipped:
        why = st.skipped if st else "not run"
        return f'<section id="overview"><h2>Overview</h2><p class="muted">straggler analysis skipped: {html.escape(why)}</p></section>'
    verdict = st.summary["verdict"]
    cls = "warn" if st.findings else "ok"
    stragglers = {r for f in st.findings for r in f.ranks}
    fig = _figure_div(breakdown_figure(st.tables["per_rank"], stragglers), "breakdown-chart")
    ev = "".join(f"<li>{html.escape(f.title)}: <code>{html.escape(json.dumps(f.evidence, default=str))}</code></li>"
                 for f in st.findings)
    missing = (f'<p class="warn">missing ranks: {html.escape(", ".join(map(str, run.missing)))}</p>'
               if run.missing else "")
    return (f'<section id="overview"><h2>Overview</h2><p class="verdict {cls}">{html.escape(verdict)}</p>'
            f"{missing}<ul>{ev}</ul>{fig}</section>")


def _steps_section(results: dict[str, Result]) -> str:
    bd = results["breakdown"].tables["breakdown"]
    rows = [{"rank": r["rank"], "step": r["step"], **{k: r[k] / 1e3 for k in (
        "wall", "computing", "comm_exposed", "overlapped", "data_wait", "free")}, "complete": r["complete"]}
        for r in bd.to_pylist()]
    cols = ["rank", "step", "wall", "computing", "comm_exposed", "overlapped", "data_wait", "free", "complete"]
    fig = _figure_div(steps_figure(bd), "steps-chart")
    return (f'<section id="steps"><h2>Steps (µs)</h2>{fig}'
            f"<details><summary>per rank × step table</summary>{_table(rows, cols)}</details></section>")


def _problems(run: Run, results: dict[str, Result]) -> str:
    items = [html.escape(p) for p in run.problems]
    items += [f"analysis {html.escape(n)} skipped: {html.escape(r.skipped)}" for n, r in results.items() if r.skipped]
    body = "".join(f"<li>{i}</li>" for i in items) or "<li>none</li>"
    return f'<section id="problems"><h2>Problems and skipped analyses</h2><ul>{body}</ul></section>'
