"""The report's specific views: charts for the analyses whose tables are known.

Each view function returns an HTML fragment; ``SPECIFIC`` maps a view name to the function that
draws its head (the generic blocks of ``html.result_html`` follow). ``DRAWN`` names tables already
shown here so the generic block does not repeat them.
"""
from __future__ import annotations

from typing import Any, Callable

from rankscope.analysis.base import Result
from rankscope.model.run import Run
from rankscope.render import charts
from rankscope.analysis.diagnosis.work import first_dims
from rankscope.analysis.steps.breakdown import SHOWN as BREAKDOWN_COLS
from rankscope.analysis.view import Col as C
from rankscope.render.declare import cell
from rankscope.render.blocks import declared_table, esc, findings_html

DRAWN: dict[str, tuple[str, ...]] = {"breakdown": ("breakdown",), "straggler": ("per_rank",),
                                     "trajectory": ("trajectory",)}
DRAWN_FINDINGS = ("straggler",)
_MEM_POINTS = 400
_MEM_RANKS = 16
_SRC = ("src", "src_rank", "from", "from_rank", "sender")
_DST = ("dst", "dst_rank", "to", "to_rank", "receiver", "peer")
_METRICS = ("bytes", "time", "dur", "bandwidth", "bw", "busbw", "algbw", "count")


def _ok(results: dict[str, Result], name: str) -> Result | None:
    r = results.get(name)
    return r if r is not None and not r.skipped else None


def overview(run: Run, results: dict[str, Result]) -> str:
    """Verdict with its evidence, cluster step time, per-rank breakdown stacked bars."""
    st = _ok(results, "straggler")
    if st is None:
        why = results["straggler"].skipped if "straggler" in results else "not run"
        return f'<section id="overview">{coverage_html(run)}<p class="muted">straggler analysis skipped: {esc(why)}</p></section>'
    # evidence under the bar, said beside "no straggler": not the green of a clean run
    cls = "warn" if st.findings else "note" if st.summary.get("below_bar") else "ok"
    stragglers = {r for f in st.findings for r in f.ranks}
    per_rank = charts.rows_of(st.tables["per_rank"])
    walls = sorted(r["wall"] for r in per_rank)
    cluster = f"<p>cluster step time (median over ranks): <b>{walls[len(walls) // 2] / 1e6:,.2f} ms</b></p>" \
        if walls else ""
    missing = coverage_html(run)
    fig = charts.figure_div(charts.breakdown_figure(per_rank, stragglers), "breakdown-chart")
    hot = {i for i, r in enumerate(per_rank) if r["rank"] in stragglers}
    cols = (C("rank", "rank", "count"), C("wall", "step time", "ns"), C("own", "own time", "ns"),
            *[c for c in BREAKDOWN_COLS if c.key in ("computing", "comm_exposed", "data_wait", "free")])
    table = declared_table(per_rank, cols, hot=hot)
    limits = "".join(f'<p class="muted">{esc(x)}</p>' for x in st.summary.get("limits", []))
    from rankscope.render.blocks import evidence_html as _evidence

    proof = "".join(f'<div class="muted">{esc(f.title.split(",")[0])}'
                    f'{f" · confidence {f.confidence:.0%}" if f.confidence is not None else ""}{_evidence(f.evidence)}'
                    "</div>" for f in st.findings)
    return (f'<section id="overview">{missing}<p class="verdict {cls}">{esc(st.summary.get("verdict", ""))}</p>'
            f"{proof}{limits}{cluster}</section><!--cluster--><section><h3>per rank, median over steps</h3>{fig}"
            f"{table}</section>")


def cluster_view(run: Run, results: dict[str, Result], timeline_url: str | None = None) -> str:
    """Who waits for whom over the worst step and its neighbours (``analysis.waits``), with the way to the
    exact events: a link to the merged trace of those steps (served) or the command that writes it."""
    import shlex

    from rankscope.analysis.diagnosis.waits import cluster_timeline
    from rankscope.intlist import format_int_list

    tl = cluster_timeline(run, results)
    if "why" in tl:
        return f'<section id="cluster"><h3>Who waits for whom</h3><p class="muted">{esc(tl["why"])}</p></section>'
    steps, ranks = format_int_list(tl["steps"]), format_int_list(sorted(tl["ranks"]))
    href = f"{timeline_url}?steps={steps}" if timeline_url else None
    if href:
        how = (f'<a id="cluster-timeline-link" href="{esc(href)}&amp;ranks={esc(ranks)}">download these steps as a '
               "merged trace</a> (open it in ui.perfetto.dev); click a rank's lane for that rank alone")
    else:
        cmd = f"rankscope timeline {shlex.quote(str(run.path))} --steps {steps} --ranks {ranks} -o steps.pftrace"
        how = f"the exact events of these steps: <code>{esc(cmd)}</code>, then open the file in ui.perfetto.dev"
    grouped = (f" ({len(tl['lanes'])} of {len(run.rank_ids)} ranks: the slowest, median and fastest by own time)"
               if len(tl["lanes"]) < len(run.rank_ids) else "")
    return (f'<section id="cluster"><h3>Who waits for whom: step{"s" if len(tl["steps"]) > 1 else ""} {esc(steps)}'
            f"{esc(grouped)}</h3><p class=\"muted\">each lane is a rank; grey lines join each collective's "
            "arrivals across ranks, the red diamond is the last rank to arrive (the others wait for it in red)</p>"
            f'{charts.figure_div(charts.cluster_figure(tl), "cluster-chart", href)}<p class="muted">{how}</p></section>')


def coverage_html(run: Run) -> str:
    """Missing and damaged ranks, each with its reason: shown first, above the verdict."""
    cov = run.coverage()
    items = [f"missing rank {m['rank']}: {esc(m['why'])}" for m in cov["missing"][:64]]
    if len(cov["missing"]) > 64:
        items.append(f"and {len(cov['missing']) - 64} more missing ranks")
    items += [f"damaged rank {d['rank']}: {esc(d['why'])} (left out of the verdict)" for d in cov["damaged"]]
    return f'<ul class="warn coverage">{"".join(f"<li>{i}</li>" for i in items)}</ul>' if items else ""


def trajectory(run: Run, results: dict[str, Result]) -> str:
    """Per rank gap / forward+backward / tail; step time per rank; per rank × step table, slowest highlighted."""
    tr, bd = _ok(results, "trajectory"), _ok(results, "breakdown")
    parts = []
    if tr is not None and "per_rank" in tr.tables:
        rows = charts.rows_of(tr.tables["per_rank"])
        fig = charts.stacked_figure(rows, "rank", [("iteration_gap", "gap before compute"),
                                                   ("fwd_bwd", "forward + backward"),
                                                   ("iteration_tail", "tail after compute")], "ms per step (median)", 1e6)
        parts.append("<h3>iteration trajectory per rank (median over steps)</h3>"
                     + charts.figure_div(fig, "trajectory-chart"))
    src = tr.tables.get("trajectory") if tr is not None else None
    src = src if src is not None else (bd.tables["breakdown"] if bd is not None else None)
    if src is None:
        return "".join(parts)
    rows = charts.rows_of(src)
    # the straggler verdict's measure: own time = wall minus exposed communication (waiting for others)
    slowest: dict[int, tuple[int, int]] = {}
    for i, r in enumerate(rows):
        own = r["wall"] - (r.get("comm_exposed") or 0)
        if r["step"] not in slowest or own > slowest[r["step"]][1]:
            slowest[r["step"]] = (i, own)
    cols = BREAKDOWN_COLS + (C("iteration_gap", "gap before compute", "ns"), C("fwd_bwd", "forward + backward", "ns"),
                             C("iteration_tail", "tail after compute", "ns"))
    parts.append(charts.figure_div(charts.steps_figure(rows), "steps-chart"))
    parts.append("<h3>per rank × step (highlighted: the rank with the longest own time in each step, "
                 "i.e. step time minus exposed communication, the straggler verdict's measure)</h3>"
                 + declared_table(rows, cols, hot={i for i, _ in slowest.values()}, limit=1000))
    return f'<section id="steps">{"".join(parts)}</section>'


def _pick(cols: list[str], names: tuple[str, ...]) -> str | None:
    return next((c for c in cols if c.lower() in names), None)


def communication(run: Run, results: dict[str, Result]) -> str:
    """Rank × rank heatmaps (bytes, time, bandwidth), wait vs transfer per collective, bandwidth by group."""
    out = []
    for name in ("comm_matrix", "comm", "bandwidth"):
        res = _ok(results, name)
        for tname, t in (res.tables.items() if res else ()):
            if res is not None and name == "comm_matrix" and tname == "matrix" and "by_op" in res.tables:
                out += _heatmaps_by_op(name, t, charts.rows_of(res.tables["by_op"]))
            else:
                out += _heatmaps(name, tname, t)
    coll = _ok(results, "collectives")
    inst = coll.tables.get("instances") if coll else None
    if inst is not None and {"max_wait", "transfer", "op", "instance"} <= set(charts.columns_of(inst)):
        allrows = charts.rows_of(inst)
        rows = allrows[:300]
        names = [f"{r['op']} #{r['instance']}, ranks {cell(r.get('pg_ranks', ''), 'group')}" for r in rows]
        fig = charts.calls_figure(names, [("wait for the last rank", [(r["max_wait"] or 0) / 1e6 for r in rows]),
                                          ("transfer", [(r["transfer"] or 0) / 1e6 for r in rows])],
                                  "ms", "collective, in the order matched (hover a bar for its operation and group)")
        first = f"the first {len(rows):,} of {len(allrows):,}" if len(allrows) > len(rows) else f"all {len(rows):,}"
        out.append(f"<h3>per collective: wait for the last rank vs transfer ({first} collectives)</h3>"
                   + charts.figure_div(fig, "wait-chart"))
        bw = [{**r, "group": f"ranks {cell(r.get('pg_ranks', ''), 'group')}"} for r in allrows if r.get("busbw_gbps")]
        if "busbw_gbps" in charts.columns_of(inst) and bw:
            fig = charts.points_figure(bw, "group", "busbw_gbps", "GB/s", "process group")
            out.append("<h3>bus bandwidth of each collective, by process group</h3>" + charts.figure_div(fig, "busbw-chart"))
        else:
            out.append('<h3>bus bandwidth by process group</h3><p class="muted">no bandwidth: the collectives '
                       "carry no sizes or transfer times (profile with record_shapes=True)</p>")
    if not any("heat-" in x for x in out):
        out.insert(0, '<p class="muted">no communication matrix: it needs the size of each collective (profile '
                   "with record_shapes=True) and the members of each process group</p>")
    return f"<section>{''.join(out)}</section>"


_HEAT_CELLS = 128
_HEAT_TITLES = {"bytes": ("data sent, rank → rank", "MB", 1e6, "bytes"),
                "time_ns": ("communication time, rank → rank", "ms", 1e6, "ns"),
                "count": ("calls, rank → rank", "", 1.0, "count"),
                "bandwidth (GB/s)": ("bandwidth, rank → rank", "GB/s", 1.0, "gbps")}


_OPS_SHOWN = 12


def _heatmaps_by_op(name: str, t: object, ops: list[dict[str, Any]]) -> list[str]:
    """The matrix summed over every operation, and a choice of one operation at a time (``by_op``'s order:
    most bytes first, up to _OPS_SHOWN): an all_to_all's uneven exchange is not hidden under an all_reduce's
    even one."""
    every = _heatmaps(name, "matrix", t)
    if len(ops) < 2 or not every:
        return every
    rows = charts.rows_of(t)
    opts = ['<option value="heat-op-all">every operation</option>']
    picks = [f'<div class="heat-op" id="heat-op-all">{"".join(every)}</div>']
    for k, o in enumerate(ops[:_OPS_SHOWN]):
        mine = [r for r in rows if r.get("op") == o["op"]]
        figs = _heatmaps(name, f"matrix-op{k}", mine)
        if figs:
            what = f"{o['op']} ({cell(o.get('bytes'), 'bytes')}{'' if o.get('exact') else ', modelled'})"
            opts.append(f'<option value="heat-op-{k}">{esc(what)}</option>')
            picks.append(f'<div class="heat-op" id="heat-op-{k}" hidden>{"".join(figs)}</div>')
    more = f" (the {_OPS_SHOWN} with the most bytes of {len(ops)})" if len(ops) > _OPS_SHOWN else ""
    pick = ('<p>operation <select id="heat-op-select" onchange="document.querySelectorAll(\'.heat-op\').forEach(d=>'
            f'd.hidden=d.id!==this.value);rsDraw(document.getElementById(this.value))">{"".join(opts)}</select>{more}</p>')
    return [pick, *picks]


def _heatmaps(name: str, tname: str, t: object) -> list[str]:
    cols = charts.columns_of(t)
    src, dst = _pick(cols, _SRC), _pick(cols, _DST)
    if not (src and dst):
        return []
    rows = charts.rows_of(t)
    ranks = sorted({int(r[src]) for r in rows} | {int(r[dst]) for r in rows})
    # beyond _HEAT_CELLS ranks per side, blocks of consecutive ranks (a 1,024 x 1,024 matrix is 13 MB of JSON
    # and no one reads single cells of it): sums per block, bandwidth from the sums
    width = -(-len(ranks) // _HEAT_CELLS)
    idx = {r: i // width for i, r in enumerate(ranks)}
    n = -(-len(ranks) // width)
    sums = [c for c in cols if any(m in c.lower() for m in _METRICS) and "bw" not in c.lower()
            and "bandwidth" not in c.lower()]
    z = {m: [[0.0] * n for _ in range(n)] for m in sums}
    for r in rows:  # summed over ops and groups: one cell per rank pair (or block pair)
        for m in sums:
            z[m][idx[int(r[src])]][idx[int(r[dst])]] += float(r[m] or 0)
    byt, tim = _pick(sums, ("bytes",)), _pick(sums, ("time_ns", "time", "dur"))
    if byt and tim:
        z["bandwidth (GB/s)"] = [[b / t if t else 0.0 for b, t in zip(rb, rt)] for rb, rt in zip(z[byt], z[tim])]
    starts = [ranks[i * width] for i in range(n)]
    out = []
    for i, (m, zz) in enumerate(z.items()):
        if m == "count":
            continue
        title, unit, scale, kind = _HEAT_TITLES.get(m, (m.replace("_", " "), "", 1.0, "float"))
        title += f" (blocks of {width} ranks)" if width > 1 else ""
        # a rank with itself is no pair: left blank, so the colour scale spans the pairs only
        pairs: list[list[float | None]] = [[None if a == b and width == 1 else v for b, v in enumerate(row)]
                                           for a, row in enumerate(zz)]
        shown = [v for row in pairs for v in row if v is not None]
        if not shown:
            continue
        lo, hi = min(shown), max(shown)
        if hi - lo <= 0.005 * max(abs(hi), abs(lo)):  # one colour would say nothing: say the value
            what = "pairs of ranks" if width == 1 else f"pairs of blocks of {width} ranks"
            out.append(f'<p id="heat-{esc(tname)}-{i}" class="heat-equal"><b>{esc(title)}</b>: '
                       f"{esc(cell(hi, kind))} for every one of the {len(shown):,} {what} (all equal, so no "
                       "matrix is drawn)</p>")
            continue
        cells = [[None if v is None else float(f"{v / scale:.4g}") for v in row] for row in pairs]
        out.append(charts.figure_div(charts.heatmap_figure(cells, starts, title, unit, width), f"heat-{tname}-{i}"))
    return out


def operators(run: Run, results: dict[str, Result]) -> str:
    """Cross-rank spread of the top operators / kernels for tables with name + min/mean/max columns."""
    out = []
    for name in ("opstats", "kernels"):
        res = _ok(results, name)
        for tname, t in (res.tables.items() if res else ()):
            cols = charts.columns_of(t)
            lo = next((c for c in cols if c.lower().startswith("min")), None)
            hi = next((c for c in cols if c.lower().startswith("max")), None)
            mid = next((c for c in cols if c.lower().startswith(("mean", "median", "avg"))), None)
            key = _pick(cols, ("name", "op", "kernel", "operator"))
            if not (lo and hi and mid and key):
                continue
            rows = [dict(r) for r in charts.rows_of(t)[:25] if None not in (r[lo], r[mid], r[hi])]
            if "input_dims" in cols:  # one bar per (operator, shapes): show the shape
                for r in rows:
                    r[key] = f"{r[key]} {first_dims(r.get('input_dims') or '')}".strip()
            what = "kernel" if name == "kernels" else "operator"
            by = " and input shape" if "input_dims" in cols else ""
            out.append(f"<h3>top {what}s{by}: total time per rank over the capture, {mid} over ranks (bars: "
                       "least … most)</h3>")
            rows = [{**r, lo: r[lo] / 1e6, mid: r[mid] / 1e6, hi: r[hi] / 1e6} for r in rows]  # ns -> ms
            out.append(charts.figure_div(charts.spread_figure(rows, key, lo, mid, hi, f"ms ({mid} over ranks)"),
                                         f"spread-{name}-{tname}"))
    return f"<section>{''.join(out)}</section>" if out else ""


def memory(run: Run, results: dict[str, Result]) -> str:
    """Memory per rank from the ``memory`` analysis: the largest peak and the operator running at it, each
    rank's peak (bars), and allocated memory over time for the ranks with the highest peaks (at most 16
    lines of 400 points). Without memory events, says why (the skipped reason is in "Problems")."""
    mem = _ok(results, "memory")
    if mem is None or "timeline" not in mem.tables:
        why = results["memory"].skipped if "memory" in results else "the memory analysis did not run"
        return (f'<section><p class="muted">no memory to show: {esc(why)}. Profile with profile_memory=True to '
                "see each rank's allocated memory over time, its peak and the operator at the peak.</p></section>")
    peaks = sorted(charts.rows_of(mem.tables.get("peaks")), key=lambda p: -(p["peak_allocated"] or 0))
    parts = []
    if peaks:
        top = peaks[0]
        op = f", while <b>{esc(top['operator_at_peak'])}</b> ran" if top.get("operator_at_peak") else ""
        parts.append(f'<p id="memory-peak">largest peak: <b>{esc(cell(top["peak_allocated"], "bytes"))}</b> allocated '
                     f"on rank {esc(top['rank'])}{op}</p>")
        by_rank = sorted(peaks, key=lambda p: (p["rank"], p["device"]))
        unit, scale = _mem_unit(top["peak_allocated"] or 0)
        fig = charts.bars_figure([{**p, "peak": (p["peak_allocated"] or 0) / scale} for p in by_rank],
                                 "rank", ["peak"], "peak allocated memory per rank", unit,
                                 {"peak": "peak allocated"}, "rank")
        parts.append(charts.figure_div(fig, "memory-peaks-chart"))
    shown = {(p["rank"], p["device"]) for p in peaks[:_MEM_RANKS]}
    rows = [r for r in charts.rows_of(mem.tables["timeline"]) if (r["rank"], r.get("device", -1)) in shown]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(f"rank {r['rank']}" + (f" device {r['device']}" if r.get("device", -1) != -1 else ""),
                      []).append(r)
    series = {}
    unit, scale = _mem_unit(peaks[0]["peak_allocated"] or 0 if peaks else 0)
    for k, rs in sorted(by.items(), key=lambda kv: (kv[1][0]["rank"], kv[1][0].get("device", -1))):
        rs = rs[:: max(1, len(rs) // _MEM_POINTS)]
        t0 = rs[0]["ts"]
        series[k] = ([(x["ts"] - t0) / 1e6 for x in rs], [(x["allocated"] or 0) / scale for x in rs])
    if series:
        which = (f" ({len(series)} ranks with the highest peaks of {len(peaks)})" if len(peaks) > len(series) else "")
        fig = charts.lines_figure(series, "ms since the rank's first memory event", f"allocated ({unit})")
        parts.append(f"<h3>allocated memory over time{esc(which)}</h3>" + charts.figure_div(fig, "memory-chart"))
    return f'<section>{"".join(parts)}</section>'


def _mem_unit(largest: float) -> tuple[str, float]:
    """The unit a chart of memory sizes up to ``largest`` bytes reads best in."""
    return ("GB", 1e9) if largest >= 1e9 else ("MB", 1e6) if largest >= 1e6 else ("kB", 1e3)


def clock(run: Run, results: dict[str, Result]) -> str:
    """Each rank's clock offset to rank 0 and its error bound, as recorded in the run."""
    ck = _ok(results, "clock")
    if ck is not None and "offsets" in ck.tables:
        rows = charts.rows_of(ck.tables["offsets"])
        fig = charts.bars_figure([{**x, "offset_ms": (x["offset_ns"] or 0) / 1e6,
                                   "residual_ms": (x["residual_ns"] or 0) / 1e6} for x in rows],
                                 "rank", ["offset_ms", "residual_ms"], "clock offset to the reference rank and "
                                 "residual skew after alignment", "ms",
                                 {"offset_ms": "clock offset", "residual_ms": "residual after alignment"}, "rank")
        return f'<section>{charts.figure_div(fig, "clock-chart")}</section>'
    rows = [{"rank": r, "host": run.ranks[r].host or "", "offset": run.ranks[r].clock_offset_ns,
             "error": run.ranks[r].clock_error_ns} for r in run.rank_ids]
    if all(x["offset"] is None for x in rows) and "clock" not in results:
        return ('<section><p class="muted">no clock offsets recorded: timelines are shown on each rank\'s own '
                "clock</p></section>")
    cols = (C("rank", "rank", "count"), C("host", "host"), C("offset", "offset to rank 0", "ns"),
            C("error", "error bound", "ns"))
    return f"<section><h3>clock offsets to rank 0 (as recorded)</h3>{declared_table(rows, cols)}</section>"


def flame_view(run: Run, results: dict[str, Result]) -> str:
    """Icicles of host call stacks (inclusive time): the cluster (summed over ranks) and, to pick from,
    the straggler verdict's ranks, the fastest rank by own time and rank 0 (a few, so the report stays small)."""
    from rankscope.render.flame import icicle_nodes

    st = _ok(results, "straggler")
    picks: list[tuple[str, list[int] | None]] = [(f"all {len(run.ranks)} ranks (summed)", None)]
    why: dict[int, str] = {}
    for f in st.findings if st else []:
        for r in f.ranks:
            why.setdefault(r, "straggler" if f.kind == "straggler" else "likely straggler")
    if st is not None and "per_rank" in st.tables:
        pr = sorted(charts.rows_of(st.tables["per_rank"]), key=lambda r: r["own"])
        if pr:
            why.setdefault(pr[0]["rank"], "fastest own time")
    if run.rank_ids:
        why.setdefault(run.rank_ids[0], "")
    for r, reason in list(why.items())[:4]:
        picks.append((f"rank {r}" + (f" ({reason})" if reason else ""), [r]))
    opts, figs = [], []
    for i, (label, ranks) in enumerate(picks):
        nodes = icicle_nodes(run, ranks)
        if not nodes["ids"]:
            continue
        opts.append(f'<option value="flame-{i}">{esc(label)}</option>')
        fig = charts.figure_div(charts.icicle_figure(nodes["ids"], nodes["labels"], nodes["parents"], nodes["values"]),
                                "flame-chart" if i == 0 else f"flame-chart-{i}")
        figs.append(f'<div class="flame-pick" id="flame-{i}"{"" if i == 0 else " hidden"}>{fig}</div>')
    if not figs:
        return '<section><p class="muted">no nested host events to draw</p></section>'
    pick = ('<p>show <select id="flame-select" onchange="document.querySelectorAll(\'.flame-pick\').forEach(d=>'
            'd.hidden=d.id!==this.value);rsDraw(document.getElementById(this.value))">' + "".join(opts) + "</select></p>")
    return (f'<section><p class="muted">host call stacks, inclusive time; frames under 0.1% of the total are '
            "folded away. Folded stacks for other tools: <code>rankscope.render.flame.write_folded</code></p>"
            f"{pick}{''.join(figs)}</section>")


def diff_view(run: Run, diff: Result) -> str:
    """Run-vs-run comparison (see rankscope.render.diff)."""
    from rankscope.render.diff import html_section

    return html_section(diff)


def problems_view(run: Run, results: dict[str, Result]) -> str:
    """What went wrong while reading, and which analyses were skipped and why."""
    items = [esc(p) for p in run.problems]
    if run.missing:
        items.append(f"missing ranks: {esc(', '.join(map(str, run.missing)))}")
    from rankscope.render.declare import view_of

    for n, r in results.items():
        if r.skipped:
            v = view_of(n)
            if v.optional:
                continue
            how = f" ({v.empty})" if v.empty and "(" not in r.skipped else ""
            items.append(f"{esc(v.title)}: nothing to show: {esc(r.skipped)}{esc(how)}")
    body = "".join(f"<li>{i}</li>" for i in items) or "<li>none</li>"
    return f'<section id="problems"><ul>{body}</ul></section>'


SPECIFIC: dict[str, Callable[[Run, dict[str, Result]], str]] = {
    "overview": overview, "trajectory": trajectory, "communication": communication,
    "operators": operators, "memory": memory, "clock": clock,
}
