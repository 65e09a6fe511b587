"""The web UI's run table: one row per run (started, ranks, hosts, steps, median step time, verdict with
its cause, size), sortable and filterable.

The page lists the runs at once from their listings; each row's analysis (the straggler verdict needs
the traces read) is fetched by the page from ``/api/runs/NAME/summary``, one run after another, and
kept per run version (names, sizes and times of its files), so a run is analyzed once until it changes.
"""
from __future__ import annotations

import html
import time
from typing import Any

CAUSES = {"imbalance": "input imbalance", "comm": "communication", "data": "data loading",
          "host": "host", "compute": "compute", "contention": "contention", "likely": "likely (no cause drawn)",
          "unclear": "unclear"}


def summarize(run: Any, results: dict[str, Any], size: int) -> dict[str, Any]:
    """The row of one analyzed run."""
    from rankscope.analysis.base import frame

    st = results.get("straggler")
    bd = results.get("breakdown")
    steps, median_ms = 0, None
    if bd is not None and not bd.skipped:
        df = frame(bd.tables["breakdown"])
        steps = int(df["step"].n_unique())
        walls = sorted(df.filter(df["complete"])["wall"].to_list() or df["wall"].to_list())
        median_ms = round(walls[len(walls) // 2] / 1e6, 2) if walls else None
    verdict = (st.summary.get("verdict") if st is not None and not st.skipped
               else f"not analyzed: {st.skipped}" if st is not None else "")
    causes = sorted({f.evidence.get("cause", "likely") for f in (st.findings if st and not st.skipped else [])})
    hosts = sorted({i.host for i in run.ranks.values() if i.host})
    created = (run.manifest or {}).get("created_ns")
    return {"ranks": len(run.ranks), "world_size": run.world_size, "missing": len(run.missing),
            "hosts": len(hosts), "steps": steps, "median_step_ms": median_ms, "verdict": verdict,
            "cause": ", ".join(CAUSES.get(c, c) for c in causes) or ("none" if st and not st.skipped else ""),
            "size_bytes": size, "started": _iso(created)}


def _iso(ns: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(int(ns) / 1e9))
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


_JS = """
const rows=[...document.querySelectorAll('#runs tbody tr')];
function fmtSize(b){for(const [u,s] of [['GB',1e9],['MB',1e6],['kB',1e3]])if(b>=s)return (b/s).toFixed(1)+' '+u;return b+' B';}
async function fill(){for(const tr of rows){const n=tr.dataset.run;try{const r=await fetch('/api/runs/'+encodeURIComponent(n)+'/summary');
const s=await r.json();if(!r.ok)throw new Error(s.error||r.status);
for(const [k,v] of Object.entries({started:s.started,ranks:s.ranks+(s.missing?' ('+s.missing+' missing)':''),hosts:s.hosts,
steps:s.steps,step:s.median_step_ms==null?'':s.median_step_ms.toFixed(2),cause:s.cause,verdict:s.verdict,size:fmtSize(s.size_bytes)})){
const td=tr.querySelector('td.'+k);td.textContent=v;}
tr.querySelector('td.size').dataset.v=s.size_bytes;tr.classList.toggle('hot',!!s.cause&&s.cause!=='none');}
catch(e){tr.querySelector('td.verdict').textContent='cannot analyze: '+e.message;}}
document.getElementById('status').textContent='';}
function sortBy(th){const i=[...th.parentNode.children].indexOf(th),d=th.dataset.dir==='asc'?'desc':'asc';th.dataset.dir=d;
const b=document.querySelector('#runs tbody');const val=td=>td.dataset.v??td.textContent;
const k=(a,c)=>{const x=parseFloat(val(a.cells[i])),y=parseFloat(val(c.cells[i]));
return (!isNaN(x)&&!isNaN(y))?x-y:val(a.cells[i]).localeCompare(val(c.cells[i]));};
[...b.rows].sort((a,c)=>d==='asc'?k(a,c):-k(a,c)).forEach(r=>b.appendChild(r));}
document.querySelectorAll('#runs th').forEach(th=>th.addEventListener('click',()=>sortBy(th)));
document.getElementById('filter').addEventListener('input',e=>{const q=e.target.value.toLowerCase();
rows.forEach(r=>r.style.display=r.textContent.toLowerCase().includes(q)?'':'none');});
fill();
"""

COLS = (("name", "run"), ("started", "started"), ("ranks", "ranks"), ("hosts", "hosts"), ("steps", "steps"),
        ("step", "median step (ms)"), ("verdict", "verdict"), ("cause", "cause"), ("size", "size"))


def page(root_name: str, names: list[str], switcher: str) -> str:
    """The index page: the run table (cells filled by the page's script) and the compare form."""
    esc = html.escape
    body = "".join(f'<tr data-run="{esc(n)}"><td class="name"><a class="run" href="/runs/{esc(n)}">{esc(n)}</a></td>'
                   + "".join(f'<td class="{k}"></td>' for k, _ in COLS[1:]) + "</tr>" for n in names)
    head = "".join(f"<th>{esc(label)}</th>" for _, label in COLS)
    table = (f'<p><input id="filter" placeholder="filter runs (name, verdict, cause)" size="40"> '
             f'<span id="status" class="muted">analyzing runs…</span></p>'
             f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>') if names else \
        f"<p>no runs under {esc(root_name)}</p>"
    css = ("body{font-family:system-ui,sans-serif;margin:24px;color:#1d2330}table{border-collapse:collapse;"
           "font-size:13px}td,th{border-bottom:1px solid #e5e7eb;padding:4px 10px;text-align:left}th{background:"
           "#f0f2f5;cursor:pointer}td.verdict{max-width:520px}tr.hot td.cause{color:#b3261e;font-weight:600}"
           ".muted{color:#6b7280;font-size:12px}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>rankscope runs</title><style>{css}</style></head><body>"
            f"<h1>rankscope · runs under {esc(root_name)}</h1>{table}<h3>compare two runs</h3>{switcher}"
            f"<script>{_JS if names else ''}</script></body></html>")


