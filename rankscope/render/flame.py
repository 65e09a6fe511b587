"""Folded call stacks (Brendan Gregg's ``frame;frame;frame value`` format) and icicle nodes.

A host event's parent is the last event one level shallower on the same thread that starts at or
before it (the ``depth`` column of the events table gives the level). Per level, parents are
found with one ``searchsorted`` over positions in (tid, ts, -dur) order; paths are built level by
level with vectorized string concatenation; self time = duration minus the children's durations.
``ProfilerStep#N`` frames are merged into ``ProfilerStep`` so that steps add up.

Example::

    from rankscope.render.flame import write_folded
    write_folded(run, "run.folded")       # then: flamegraph.pl run.folded > flame.svg
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

HOST_KINDS = ("cpu_op", "user_annotation", "python_function")
MAX_NODES = 1500


def rank_stacks(run: Any, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(stack strings, self ns) of every host event of one rank."""
    import pyarrow.compute as pc

    ev = run.table(rank, "events", columns=["name", "kind", "ts", "dur", "tid", "depth"])
    ev = ev.filter(pc.is_in(pc.cast(ev.column("kind"), "string"), value_set=_kinds()))
    if ev.num_rows == 0:
        return np.array([], dtype=object), np.array([], dtype=np.int64)
    names = np.asarray(pc.cast(ev.column("name"), "string").to_numpy(zero_copy_only=False)).astype(str)
    names = np.char.replace(np.char.replace(names, ";", ":"), "\n", " ")
    names = np.where(np.char.startswith(names, "ProfilerStep#"), "ProfilerStep", names)
    ts, dur = ev.column("ts").to_numpy(), ev.column("dur").to_numpy()
    tid, depth = ev.column("tid").to_numpy(), ev.column("depth").to_numpy().astype(np.int64)
    order = np.lexsort((-dur, ts, tid))
    names, ts, dur, tid, depth = names[order], ts[order], dur[order], tid[order], depth[order]
    paths = names.astype(object)
    child_sum = np.zeros(len(ts), dtype=np.int64)
    orphan = np.zeros(len(ts), dtype=bool)
    pos = np.arange(len(ts))
    for d in range(1, int(depth.max(initial=0)) + 1):
        kids, cands = pos[depth == d], pos[depth == d - 1]
        j = np.searchsorted(cands, kids) - 1
        par = cands[np.maximum(j, 0)]
        good = (j >= 0) & (tid[par] == tid[kids]) & (ts[par] + dur[par] >= ts[kids])
        orphan[kids[~good]] = True
        kids, par = kids[good], par[good]
        paths[kids] = paths[par] + ";" + paths[kids].astype(str)
        np.add.at(child_sum, par, dur[kids])
    keep = ~orphan
    return paths[keep], np.maximum(dur - child_sum, 0)[keep]


def _kinds() -> Any:
    import pyarrow as pa

    return pa.array(HOST_KINDS)


def folded(run: Any, ranks: list[int] | None = None) -> list[tuple[str, int]]:
    """Folded stacks summed over ``ranks`` (default all): [(stack, self µs)], largest first."""
    import polars as pl

    parts = []
    for r in ranks if ranks is not None else run.rank_ids:
        stacks, self_ns = rank_stacks(run, r)
        if len(stacks):
            parts.append(pl.DataFrame({"stack": stacks.astype(str), "ns": self_ns}))
    if not parts:
        return []
    agg = pl.concat(parts).group_by("stack").agg(pl.col("ns").sum()).sort("ns", descending=True)
    return [(s, int(ns // 1000)) for s, ns in agg.iter_rows() if ns >= 1000]


def write_folded(run: Any, out: str | Path, ranks: list[int] | None = None) -> Path:
    """Write the folded stacks of ``run`` (one ``stack value_us`` line each) and return the path."""
    p = Path(out)
    p.write_text("".join(f"{s} {v}\n" for s, v in folded(run, ranks)), encoding="utf-8")
    return p


def icicle_nodes(run: Any, ranks: list[int] | None = None, max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """ids / labels / parents / inclusive values (µs) for an icicle chart, small frames folded away."""
    inclusive: dict[str, float] = {}
    for stack, v in folded(run, ranks):
        frames = stack.split(";")
        for i in range(1, len(frames) + 1):
            key = ";".join(frames[:i])
            inclusive[key] = inclusive.get(key, 0.0) + v
    total = sum(v for k, v in inclusive.items() if ";" not in k) or 1.0
    share = 0.001
    while sum(1 for v in inclusive.values() if v >= share * total) > max_nodes:
        share *= 2
    keep = sorted(k for k, v in inclusive.items() if v >= share * total)
    ids = [f"n{i}" for i in range(len(keep))]
    index = dict(zip(keep, ids))
    parents = [index.get(k.rpartition(";")[0], "") for k in keep]
    labels = [k.rpartition(";")[2][:80] for k in keep]
    return {"ids": ids, "labels": labels, "parents": parents, "values": [inclusive[k] for k in keep],
            "min_share": share}
