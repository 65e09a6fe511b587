"""Drawing what the analyses declare (``Analysis.view``, beside each analysis's code): a view's facts and
columns in human units, the evidence of a finding as labelled facts, and the diff view's tables. Nothing
renders an analysis's raw summary dict or a table's internal column names (the full results stay in
``rankscope analyze --json``).

One vocabulary everywhere: compute, exposed communication, data wait, idle. Times in ms (µs below
0.1 ms), bytes and bandwidth in human units.
"""
from __future__ import annotations

from typing import Any

from rankscope.analysis.view import NS, Col, TableView, View


def _plain(key: str) -> str:
    return key.replace("_ns", "").replace("_", " ")


def view_of(name: str, summary: dict[str, Any] | None = None, tables: dict[str, Any] | None = None) -> View:
    """The declaration of an analysis. One that declares nothing (a plugin's) is shown plainly: its scalar
    summary facts and its tables, with names made readable (durations ending in _ns shown in ms)."""
    from rankscope.analysis.registry import analyses

    declared = analyses().get(name)
    if declared is not None and declared.view is not None:
        return declared.view
    from rankscope.render.charts import columns_of

    facts = tuple(Col(k, _plain(k), NS if k.endswith("_ns") else "text") for k, v in (summary or {}).items()
                  if isinstance(v, (int, float, str)) and not isinstance(v, bool))
    tvs = tuple(TableView(t, _plain(t), tuple(Col(c, _plain(c), NS if c.endswith("_ns") else "text")
                                               for c in columns_of(tab)))
                for t, tab in (tables or {}).items() if tab is not None)
    return View(_plain(name).capitalize(), facts, tvs)


def ms(ns: float) -> str:
    """A duration given in ns: "12.3 ms", "0.84 ms", "35 µs"."""
    v = ns / 1e6
    if abs(v) >= 100:
        return f"{v:,.0f} ms"
    if abs(v) >= 0.1:
        return f"{v:,.1f} ms" if abs(v) >= 10 else f"{v:,.2f} ms"
    return f"{ns / 1e3:,.0f} µs" if abs(ns) >= 1e3 or ns == 0 else f"{ns:,.0f} ns"


def group_label(ranks: Any, width: int = 24) -> str:
    """The ranks of a process group, short: "0-7", "0,2,4,6", "1,3,…,63 (32 ranks)"."""
    from rankscope.intlist import format_int_list

    items = sorted({int(r) for r in ranks})
    text = format_int_list(items) if items else "none"
    return text if len(text) <= width else f"{items[0]},{items[1]},…,{items[-1]} ({len(items)} ranks)"


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def cell(value: Any, unit: str) -> str:
    """One value in its unit's human form ('' for missing); a unit ending in "+" is a change and prints
    its sign ("+2.50 ms", "-1.2 MB")."""
    if value is None or value == "":
        return ""
    if unit.endswith("+"):
        try:
            v = float(value)
        except (TypeError, ValueError):
            return str(value)
        text = cell(abs(v), unit[:-1])
        return text if v == 0 or text.lstrip("0.,") in ("", " ms", " µs", " ns", " B") else \
            ("+" if v > 0 else "-") + text
    try:
        if unit == NS:
            return ms(float(value))
        if unit == "us":
            return ms(float(value) * 1e3)
        if unit == "bytes":
            return human_bytes(float(value))
        if unit == "gbps":
            return f"{float(value):,.2f} GB/s"
        if unit == "share":
            return f"{float(value):+.0%}" if float(value) < 0 else f"{float(value):.0%}"
        if unit == "count":
            return f"{int(value):,}" if float(value) == int(value) else f"{float(value):,.2f}"
        if unit == "float":
            return f"{float(value):,.2f}"
        if unit == "device":
            return "CPU" if int(value) < 0 else f"device {int(value)}"
        if unit == "words":  # a category named like an identifier (HTA's "host_wait"): said in words
            return str(value).replace("_", " ")
    except (TypeError, ValueError):
        pass
    if unit in ("ranks", "group") and isinstance(value, str) and value.replace(",", "").replace(" ", "").isdigit():
        value = [int(x) for x in value.split(",") if x.strip()]  # "0,1,2,3" as written by the analyses
    if unit == "group" and isinstance(value, (list, tuple)):
        return group_label(value)
    if unit == "ranks" or isinstance(value, (list, tuple)):
        from rankscope.intlist import format_int_list

        items = list(value) if isinstance(value, (list, tuple)) else [value]
        try:
            return format_int_list(sorted(int(v) for v in items)) if items else "none"
        except (TypeError, ValueError):
            return ", ".join(map(str, items))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in list(value.items())[:8])
    return str(value)


LABELS = {"own_time_ns": ("own time", NS), "others_median_ns": ("other ranks' median own time", NS),
          "relative_excess": ("excess", "share"), "consistency": ("slower in this share of steps", "share"),
          "test": ("test", "text"), "lost_per_step_ns": ("time lost per step", NS),
          "lost_share_of_step": ("share of the step", "share"), "lost_total_ns": ("time lost in all", NS),
          "last_arrival_share": ("arrived last at this share of collectives", "share"),
          "others_wait_at_collectives_per_step_ns": ("others waited for it per step", NS),
          "work_ratio": ("input work vs the other ranks", "float"), "example_op": ("operator", "text"),
          "example": ("its inputs", "text"), "example_others": ("the others' inputs", "text"),
          "last_arrivals": ("last arrivals", "count"), "instances": ("matched collectives", "count"),
          "longest_own_time_steps": ("steps with the longest own time", "count"), "steps": ("steps", "count"),
          "share": ("share", "share"), "ratio": ("ratio", "float"), "median_ns": ("median", NS),
          "threshold": ("threshold", "text"), "transfer_ns": ("transfer", NS), "peers_median_ns": ("peers' median", NS),
          "bytes": ("size", "bytes"), "arrival_skew_ns": ("arrival skew", NS), "wall_diff_ns": ("step time change", NS),
          "own_diff_norm_ns": ("own time change (normalized)", NS), "speed_factor": ("host speed factor", "float"),
          "operator": ("operator", "text"), "input_dims": ("inputs", "text"), "input_dims_base": ("baseline inputs", "text"),
          "cause": ("cause", "text"), "component": ("component", "text")}


def evidence_facts(ev: dict[str, Any], limit: int = 16) -> list[tuple[str, str]]:
    """Known evidence keys as (label, value) in human units; nested dicts are walked one level down;
    unknown keys are left to the JSON output."""
    out: list[tuple[str, str]] = []
    for k, v in ev.items():
        if isinstance(v, dict):
            out += [(LABELS[k2][0], cell(v2, LABELS[k2][1])) for k2, v2 in v.items()
                    if k2 in LABELS and not isinstance(v2, (dict, list))]
        elif k in LABELS and not isinstance(v, list):
            out.append((LABELS[k][0], cell(v, LABELS[k][1])))
    seen, uniq = set(), []
    for lab, val in out:
        if lab not in seen and val:
            seen.add(lab)
            uniq.append((lab, val))
    return uniq[:limit]
