"""``key_averages().table()`` with a Node ID column: local and remote operators side by side.

Remote rows are named as PyTorch's original RPC profiling named them,
``rpc_async#fn(worker0 -> worker1)#remote_op: aten::mm``, with the id of the worker that ran them.
Percentages are of the summed self time of every row shown and hidden (local and remote).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

HEADERS = ("Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls", "Node ID")
SORT_KEYS = {"self_cpu_time_total": 1, "cpu_time_total": 2, "count": 3}


def remote_rows(calls: Iterable[dict[str, Any]]) -> list[tuple[str, int, int, int, int]]:
    """(name, self ns, total ns, calls, node id) per remote operator and call name."""
    acc: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for c in calls:
        for e in c.get("events") or ():
            if e["name"] == "[memory]":
                continue
            a = acc[(f"{c['name']}#remote_op: {e['name']}", int(e.get("worker_id", c.get("dst_id", -1))))]
            a[0] += int(e.get("self", e["dur"]))
            a[1] += int(e["dur"])
            a[2] += 1
    return [(name, v[0], v[1], v[2], node) for (name, node), v in acc.items()]


def local_rows(averages: Any, node_id: int) -> list[tuple[str, int, int, int, int]]:
    """Rows of torch's ``key_averages()`` (times in µs there) in ns, with this worker's id."""
    return [(str(a.key), int(a.self_cpu_time_total * 1000), int(a.cpu_time_total * 1000), int(a.count), node_id)
            for a in averages]


def _t(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f}ms"
    return f"{ns / 1e3:.3f}us"


def render(rows: list[tuple[str, int, int, int, int]], *, sort_by: str = "cpu_time_total",
           row_limit: int = 100, name_width: int = 72) -> str:
    """The table as text (torch's layout: a header, dashes, rows, the self CPU total below)."""
    total_self = sum(r[1] for r in rows) or 1
    key = SORT_KEYS.get(sort_by, 2)
    shown = sorted(rows, key=lambda r: (-int(r[key]), r[0]))[:row_limit] if row_limit > 0 else rows
    cells = [(r[0] if len(r[0]) <= name_width else r[0][:name_width - 3] + "...",
              f"{100 * r[1] / total_self:.2f}%", _t(r[1]), f"{100 * r[2] / total_self:.2f}%", _t(r[2]),
              _t(r[2] / max(r[3], 1)), str(r[3]), str(r[4])) for r in shown]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(HEADERS)]
    line = "  ".join("-" * w for w in widths)
    fmt = lambda cs: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cs, widths)))  # noqa: E731
    out = [line, fmt(HEADERS), line, *(fmt(c) for c in cells), line, f"Self CPU time total: {_t(total_self)}"]
    return "\n".join(out) + "\n"
