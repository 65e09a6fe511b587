"""Captured windows across ranks: did every rank capture the same steps?

Pattern: with a schedule (or a trigger) every rank should record the same step numbers, so
that per-step comparisons across ranks compare like with like. Per rank the captured steps
come from ``meta.json`` (``windows[].steps``, written by ``rankscope.profile`` /
``trace_handler``) minus the windows whose file was dropped from the spool (``MANIFEST.json``
``dropped``) or never written (a window with ``error``); a rank without meta.json (a plain directory of Kineto traces) falls back to its
``steps`` table (``ProfilerStep#N``). The reference is the step set most ranks captured; every
rank that differs gets its missing and extra steps in one warning. Idle ranks (meta ``idle``:
the wall-clock backstop closed the window because ``step()`` stopped coming) and dropped
windows are reported as warnings too. A rank that has meta.json but no trace file at all (all
of its windows dropped, or idle before its first window) is read from the run directory.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from rankscope.analysis.base import Analysis, Finding, Result, Severity
from rankscope.analysis.view import Col, TableView, View
from rankscope.model.run import Run

COLUMNS = ["rank", "source", "windows", "steps", "n_steps", "missing", "extra", "trace_steps", "idle",
           "idle_since_step", "dropped"]


def ranges(steps: list[int] | set[int] | tuple[int, ...]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"`` (empty: ``""``)."""
    out: list[str] = []
    xs = sorted(set(steps))
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object, {} when missing or damaged (ingest already said what is wrong with it); a
    meta.json checked against its declared shape (model/sanity.py META) like the ranks' own."""
    import os

    from rankscope.model.sanity import read_meta, read_object

    if not os.path.exists(path):  # False also when it cannot be looked at (an unreadable rank directory)
        return {}
    return read_meta(path, []) if path.name == "meta.json" else read_object(path, [])


def _ints(xs: Any) -> list[int]:
    """The integer steps of a list read from a file (anything else is skipped)."""
    return [s for s in xs if type(s) is int] if isinstance(xs, list) else []


def _rank_dirs(run: Run) -> dict[int, Path]:
    root = Path(run.path) / "ranks"
    try:
        return {int(d.name): d for d in root.iterdir() if d.is_dir() and d.name.isdigit() and len(d.name) < 8}
    except OSError:  # no ranks/ folder, or an unreadable one (ingest said so)
        return {}


def _trace_steps(run: Run, rank: int) -> list[int] | None:
    if rank not in run.ranks or run.ranks[rank].cache is None:
        return None
    try:
        col = run.table(rank, "steps", columns=["step"]).column("step")
    except Exception:  # noqa: BLE001 - no steps table cached: the rank has no trace steps to offer
        return None
    return sorted({int(s) for s in col.to_pylist() if s is not None and int(s) >= 0})


def rank_capture(rank: int, meta: dict[str, Any], dropped: list[str], trace_steps: list[int] | None) -> dict[str, Any]:
    """What one rank captured: steps (meta windows minus dropped files, else trace steps), idle, drops."""
    raw_windows = meta.get("windows")
    windows = [w for w in raw_windows if isinstance(w, dict)] if isinstance(raw_windows, list) else []
    # dropped from a full spool, or never written (export failed / unfinished at exit)
    gone = set(dropped) | {str(w.get("file")) for w in windows if w.get("error")}
    dropped_steps = sorted({s for w in windows if w.get("file") in gone for s in _ints(w.get("steps"))})
    if windows:
        kept = {s for w in windows if w.get("file") not in gone for s in _ints(w.get("steps"))}
        source = "meta"
    else:
        kept, source = set(trace_steps or []), "trace" if trace_steps is not None else "none"
    idle = meta.get("idle") if isinstance(meta.get("idle"), dict) else None
    closed_idle = [w["index"] if type(w.get("index")) is int else i for i, w in enumerate(windows)
                   if w.get("closed_by") == "idle_timeout"]
    if idle is None and closed_idle:
        idle = {"closed_windows": closed_idle}
    raw_trig = meta.get("triggers")
    trig: list[Any] = raw_trig if isinstance(raw_trig, list) else []
    late = sorted({s for t in trig if isinstance(t, dict) for s in _ints(t.get("missed_steps"))})
    return {"rank": rank, "source": source, "windows": len(windows), "steps": sorted(kept),
            "trace_steps": trace_steps, "idle": idle, "dropped": sorted(gone), "dropped_steps": dropped_steps,
            "late_trigger_steps": late}


def collect(run: Run) -> list[dict[str, Any]]:
    """:func:`rank_capture` for every rank with traces or a meta.json in the run directory."""
    dirs = _rank_dirs(run)
    expected = run.manifest.get("ranks_expected")
    if expected is not None:  # ranks left out by profile(ranks=...) write an empty meta.json: not a mismatch
        dirs = {r: d for r, d in dirs.items() if r in set(expected)}
    out = []
    for r in sorted(set(run.ranks) | set(dirs)):
        d = dirs.get(r)
        meta = run.ranks[r].meta if r in run.ranks and run.ranks[r].meta else {}
        if not meta and d is not None:
            meta = _read_json(d / "meta.json")
        man = _read_json(d / "MANIFEST.json") if d is not None else {}
        dropped = [str(x) for x in man.get("dropped") or []] if isinstance(man.get("dropped"), list) else []
        if r not in run.ranks and not meta and not dropped:
            continue
        out.append(rank_capture(r, meta, dropped, _trace_steps(run, r)))
    return out


def _steps(xs: list[int]) -> str:
    return ("step " if len(xs) == 1 else "steps ") + ranges(xs)


def _reference(caps: list[dict[str, Any]]) -> tuple[int, ...]:
    """The step set most ranks captured (ties: the larger set, then the earlier steps)."""
    counts = Counter(tuple(c["steps"]) for c in caps)
    return max(counts, key=lambda s: (counts[s], len(s), [-x for x in s]))


def _findings(caps: list[dict[str, Any]], ref: tuple[int, ...]) -> list[Finding]:
    out: list[Finding] = []
    diff = {c["rank"]: c for c in caps if tuple(c["steps"]) != ref}
    if diff:
        per: dict[str, dict[str, Any]] = {
            str(r): {"missing": sorted(set(ref) - set(c["steps"])), "extra": sorted(set(c["steps"]) - set(ref)),
                     "captured": c["steps"]} for r, c in diff.items()}
        for r, c in diff.items():  # its meta says it saw a trigger's plan late (collect/profiler._adopt)
            if c.get("late_trigger_steps"):
                per[str(r)]["late_trigger_steps"] = c["late_trigger_steps"]
        parts = [f"rank {r} " + " and ".join(x for x in (
            f"lacks {_steps(p['missing'])}" if p["missing"] else "",
            f"has extra {_steps(p['extra'])}" if p["extra"] else "") if x)
            + (" (its trigger thread saw the capture late)" if p["missing"] and set(p["missing"])
               <= set(p.get("late_trigger_steps", [])) else "") for r, p in per.items()]
        out.append(Finding("capture_mismatch", f"ranks captured different steps (most ranks: {ranges(ref) or 'none'}); "
                           + "; ".join(parts), Severity.WARNING, tuple(diff),
                           {"reference_steps": list(ref), "ranks_on_reference": len(caps) - len(diff),
                            "common_steps": sorted(set.intersection(*(set(c["steps"]) for c in caps))),
                            "per_rank": per}))
    idle = {c["rank"]: c["idle"] for c in caps if c["idle"]}
    if idle:
        since = {r: i.get("since_step") for r, i in idle.items()}
        out.append(Finding("idle_rank", "rank(s) " + ", ".join(
            f"{r}" + (f" (no step() after step {s})" if s is not None else "") for r, s in since.items())
            + " stopped calling step(); the idle backstop closed their window", Severity.WARNING,
            tuple(idle), {"per_rank": {str(r): i for r, i in idle.items()}}))
    drops = {c["rank"]: c for c in caps if c["dropped"]}
    if drops:
        n = sum(len(c["dropped"]) for c in drops.values())
        out.append(Finding("dropped_windows", f"{n} window(s) lost (dropped from a full spool or not exported) "
                           f"on rank(s) "
                           f"{', '.join(map(str, drops))}; their steps are missing from the run",
                           Severity.WARNING, tuple(drops),
                           {"per_rank": {str(r): {"files": c["dropped"], "steps": c["dropped_steps"]}
                                         for r, c in drops.items()}}))
    for c in caps:
        ts = c["trace_steps"]
        if c["source"] == "meta" and ts is not None and set(ts) != set(c["steps"]):
            out.append(Finding("capture_meta_trace_disagree",
                               f"rank {c['rank']}: meta.json lists steps {ranges(c['steps']) or 'none'} but its "
                               f"traces hold steps {ranges(ts) or 'none'}", Severity.INFO, (c["rank"],),
                               {"meta_steps": c["steps"], "trace_steps": ts}))
    return out


def run_capture(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``capture``: captured steps per rank, mismatch / idle / dropped findings."""
    import pyarrow as pa

    caps = collect(run)
    if not caps:
        return Result("capture", skipped="no rank has captured steps (no meta.json windows, no ProfilerStep#)")
    ref = _reference(caps)
    rows = {k: [] for k in COLUMNS}  # type: dict[str, list[Any]]
    for c in caps:
        s = set(c["steps"])
        vals = [c["rank"], c["source"], c["windows"], ranges(c["steps"]), len(s), ranges(set(ref) - s),
                ranges(s - set(ref)), ranges(c["trace_steps"] or []), bool(c["idle"]),
                (c["idle"] or {}).get("since_step"), len(c["dropped"])]
        for k, v in zip(COLUMNS, vals):
            rows[k].append(v)
    table = pa.table(rows, schema=pa.schema([("rank", pa.int64()), ("source", pa.string()), ("windows", pa.int64()),
                                             ("steps", pa.string()), ("n_steps", pa.int64()),
                                             ("missing", pa.string()), ("extra", pa.string()),
                                             ("trace_steps", pa.string()), ("idle", pa.bool_()),
                                             ("idle_since_step", pa.int64()), ("dropped", pa.int64())]))
    findings = _findings(caps, ref)
    aligned = not any(f.kind == "capture_mismatch" for f in findings)
    return Result("capture", tables={"capture": table}, findings=findings,
                  summary={"aligned": aligned, "ranks": len(caps), "reference_steps": ranges(ref)})


ANALYSIS = Analysis(
    name="capture",
    description="captured steps per rank: window mismatch, idle ranks, dropped windows",
    run=run_capture,
    view=View("Captured steps", (Col("reference_steps", "steps captured on most ranks"),), (
        TableView("capture", "per rank", (Col("rank", "rank", "count"), Col("source", "from"),
                                          Col("windows", "windows", "count"), Col("n_steps", "steps", "count"),
                                          Col("missing", "missing steps"), Col("extra", "extra steps"),
                                          Col("dropped", "dropped windows"))),), place="problems"),
)
