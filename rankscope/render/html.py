"""Self-contained HTML report: plotly's JavaScript is embedded, so it opens offline.

The page has one view per question (overview, iteration trajectory, communication, operators and
kernels, memory, clock, flame graph, diff, problems). Every analysis result is shown in the view
its declaration names (``Analysis.view.place``; none: "More"): findings, summary, and its tables as
sortable HTML tables, or "skipped: reason". Views in ``rankscope.render.views`` add charts for
the analyses whose tables they know. Renders tables and findings; computes no statistics. Every
string that comes from a trace is escaped with ``html.escape`` before it reaches the page.

Example::

    from rankscope.render.html import render
    render(run, results, "report.html", diff=diff_result)
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from rankscope.analysis.base import Result
from rankscope.model.run import Run
from rankscope.render.blocks import declared_table, esc, findings_html
from rankscope.render.declare import view_of
from rankscope.render.charts import breakdown_figure, columns_of, rows_of, steps_figure  # noqa: F401

VIEWS: dict[str, str] = {
    "overview": "Overview", "trajectory": "Iteration trajectory", "pipeline": "Pipeline", "communication": "Communication",
    "operators": "Operators & kernels", "memory": "Memory", "clock": "Clock", "hang": "Collectives / hang",
    "rpc": "RPC", "flame": "Flame graph",
    "diff": "Diff", "more": "More", "problems": "Problems & skipped",
}
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{opacity:.75;font-size:13px}main{padding:8px 24px;max-width:1300px}
nav{background:#262d3d;padding:0 18px;position:sticky;top:0;z-index:5}
nav a{display:inline-block;color:#cfd5e2;padding:9px 12px;text-decoration:none;font-size:14px}
nav a.active{color:#fff;border-bottom:3px solid #6ea8fe}nav a.empty{opacity:.55}
section{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:12px 18px;margin:14px 0}
.view{display:none}.view.active{display:block}
h2{font-size:16px;margin:4px 0 10px}h3{font-size:14px;margin:12px 0 6px}.verdict{font-size:18px;font-weight:600}
.warn{color:#b3261e}.ok{color:#1e7a35}.note{color:#7a5200}table{border-collapse:collapse;font-size:13px;margin:6px 0}
td,th{border-bottom:1px solid #eceef2;padding:4px 10px;text-align:right}th{background:#f0f2f5;cursor:pointer}
td:first-child,th:first-child{text-align:left}.muted{color:#6b7280;font-size:12px}
tr.hot td{background:#fdecea}.sev-critical{color:#b3261e;font-weight:600}.sev-warning{color:#b36b00}
.scroll{max-height:520px;overflow:auto}code{font-size:12px;word-break:break-all}
table{max-width:100%}td{overflow-wrap:anywhere}td[data-v]{white-space:nowrap}td.t,th.t{text-align:left}.rs-fig{width:100%}
table.facts td{text-align:left;border:0;padding:1px 10px 1px 0}
"""

_JS = """
function rsShow(v){document.querySelectorAll('.view').forEach(e=>e.classList.toggle('active',e.id==='view-'+v));
document.querySelectorAll('nav a').forEach(a=>a.classList.toggle('active',a.dataset.view===v));
rsDraw(document.getElementById('view-'+v));}
function rsDraw(view){if(!view)return;view.querySelectorAll('script[data-fig]').forEach(s=>{if(s.dataset.done||s.closest('[hidden]'))return;
s.dataset.done='1';const f=JSON.parse(s.textContent);Plotly.newPlot(s.dataset.fig,f.data,f.layout,
{displaylogo:false,responsive:true}).then(el=>{const h=s.dataset.href;if(h)el.on('plotly_click',d=>{
const r=d.points[0].customdata;if(r!==undefined&&r!==null)location.href=h+'&ranks='+r;});});});}
function rsSort(th){const t=th.closest('table'),b=t.tBodies[0],i=[...th.parentNode.children].indexOf(th),
d=th.dataset.dir==='asc'?'desc':'asc';th.dataset.dir=d;const num=s=>{const x=parseFloat(s.replace(/,/g,''));
return isNaN(x)?null:x};const rows=[...b.rows].sort((r1,r2)=>{const a=r1.cells[i].textContent,c=r2.cells[i].textContent,
x=num(r1.cells[i].dataset.v??a),y=num(r2.cells[i].dataset.v??c);const k=(x!==null&&y!==null)?x-y:a.localeCompare(c);return d==='asc'?k:-k});rows.forEach(r=>b.appendChild(r));}
document.addEventListener('click',e=>{const a=e.target.closest('nav a');if(a){e.preventDefault();
history.replaceState(null,'','#'+a.dataset.view);rsShow(a.dataset.view);}
const th=e.target.closest('th');if(th&&th.closest('table.sortable'))rsSort(th);});
function rsHash(){const v=location.hash.slice(1),first=document.querySelector('.view');
rsShow(document.getElementById('view-'+v)?v:document.getElementById('view-overview')?'overview':first?first.id.slice(5):'');}
window.addEventListener('DOMContentLoaded',rsHash);window.addEventListener('hashchange',rsHash);
"""


def result_html(name: str, result: Result, *, skip_tables: tuple[str, ...] = ()) -> str:
    """Block of one analysis as declared (``render.declare``): title, findings, facts, tables (or why
    it has nothing to show and how to get it)."""
    from rankscope.render.declare import cell

    v = view_of(name, result.summary, result.tables)
    head = f"<h3>{esc(v.title)}</h3>"
    if result.skipped:
        how = f" ({esc(v.empty)})" if v.empty and "(" not in result.skipped else ""
        return f'{head}<p class="muted">nothing to show: {esc(result.skipped)}{how}</p>'
    parts = [head, findings_html(result)]
    facts = [(c.label, cell(result.summary.get(c.key), c.unit)) for c in v.facts if c.key in result.summary]
    facts = [(k, x) for k, x in facts if x]
    if facts:
        parts.append('<table class="facts">' + "".join(f"<tr><td>{esc(k)}</td><td>{esc(x)}</td></tr>"
                                                        for k, x in facts) + "</table>")
    for tv in v.tables:
        t = result.tables.get(tv.table)
        if tv.table in skip_tables or t is None:
            continue
        rows = rows_of(t)
        body = declared_table(rows, tv.cols) if rows else f'<p class="muted">{esc(tv.empty)}</p>'
        parts.append(f"<details><summary>{esc(tv.title)} ({len(rows):,} rows)</summary>{body}</details>")
    return "".join(parts)


def timeline_hint(run: Run) -> str:
    """How to get the merged timeline, which the report does not embed (it can be hundreds of MB)."""
    cmd = f"rankscope timeline {shlex.quote(str(run.path))} -o merged.pftrace"
    return (f"<p>The report holds aggregates only. For the merged multi-rank timeline (one process per rank, "
            f"clock-aligned, collectives linked across ranks) run <code>{esc(cmd)}</code>, add "
            "<code>--steps 3-4 --ranks 0-7</code> to keep it small, and open the file in ui.perfetto.dev (it "
            "loads locally; nothing is uploaded). <code>rankscope serve</code> offers it as a download.</p>")


def build(run: Run, results: dict[str, Result], *, diff: Result | None = None, flame: bool = True,
          nav_extra: str = "", timeline_html: str | None = None, timeline_url: str | None = None) -> str:
    """The report page as a string (the web UI serves it as is). ``timeline_html`` replaces the hint on how
    to get the merged timeline (the web UI puts a download form there)."""
    from rankscope.render import views

    body: dict[str, list[str]] = {v: [] for v in VIEWS}
    for view, fn in views.SPECIFIC.items():
        body[view].append(_safe(fn, run, results))
    cluster = _safe(views.cluster_view, run, results, timeline_url)
    body["overview"] = [x.replace("<!--cluster-->", cluster, 1) if "<!--cluster-->" in x else x
                        for x in body["overview"]]
    if not any(cluster in x for x in body["overview"]):
        body["overview"].insert(1, cluster)
    for name, res in results.items():
        if res.skipped:  # said once, with how to get it, in "Problems & skipped"
            continue
        view = view_of(name).place
        if name in views.DRAWN_FINDINGS:  # the verdict and its evidence are drawn by the overview already
            res = Result(res.name, res.tables, [], res.skipped, res.summary)
        body[view].append(f"<section>{result_html(name, res, skip_tables=views.DRAWN.get(name, ()))}</section>")
    if flame:
        body["flame"].append(_safe(views.flame_view, run, results))
    if diff is not None:
        body["diff"].append(_safe(views.diff_view, run, diff))
    body["problems"].append(views.problems_view(run, results))
    body["overview"].append(f'<section id="timeline-hint"><h3>Timeline</h3>'
                            f"{timeline_hint(run) if timeline_html is None else timeline_html}</section>")
    shown = [v for v in VIEWS if any(body[v]) or v in ("overview", "problems")]
    nav = "".join(f'<a href="#{v}" data-view="{v}">{esc(VIEWS[v])}</a>' for v in shown)
    main = "".join(f'<div class="view" id="view-{v}"><h2>{esc(VIEWS[v])}</h2>{"".join(body[v])}</div>'
                   for v in shown)
    title = f"rankscope · {esc(run.run_id)}"
    sub = f"{len(run.ranks)} ranks · {esc(run.path)}" + (f" · compared with {esc(diff.summary.get('baseline', ''))}"
                                                         if diff is not None else "")
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>{title}</title>
<style>{_CSS}</style><script>{_plotly_js()}</script><script>{_JS}</script></head><body>
<header><h1>{title}</h1><div class="sub">{sub}</div>{nav_extra}</header><nav>{nav}</nav>
<main>{main}</main>
<script id="rankscope-data" type="application/json">{_json_blob(run, results)}</script>
</body></html>"""


def render(run: Run, results: dict[str, Result], out: str | Path, *, diff: Result | None = None,
           flame: bool = True) -> Path:
    """Write the report and return its path."""
    p = Path(out)
    p.write_text(build(run, results, diff=diff, flame=flame), encoding="utf-8")
    return p


def _safe(fn: Any, *args: Any) -> str:
    """A view that fails shows its error instead of breaking the whole report."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - one broken view must not hide the others
        return f'<section><p class="warn">this view failed: {esc(type(exc).__name__)}: {esc(exc)}</p></section>'


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _json_blob(run: Run, results: dict[str, Result]) -> str:
    st = results.get("straggler", Result("straggler"))
    data = {"run_id": run.run_id, "ranks": run.rank_ids, "missing": run.missing, "coverage": run.coverage(),
            "verdict": st.summary.get("verdict"),
            "analyses": {n: (r.skipped or "ok") for n, r in results.items()}}
    # "</" must not close the script element early.
    return json.dumps(data, default=str).replace("</", "<\\/")
