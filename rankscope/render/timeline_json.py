"""Chrome trace-event JSON of a timeline selection (``rankscope.render.timeline.collect``).

Timestamps are µs relative to the earliest aligned event (``metadata.base_ns`` holds it), so that
doubles keep sub-µs precision. Rows are serialized per event type by polars (no Python loop per
event): complete slices ``X``, collective slices on tid ``collectives``, flows ``s``/``t``/``f``
(binding to the enclosing slice), counters ``C`` for memory and the GPU series (launch queue length,
memory bandwidth), metadata ``M`` for names.
"""
from __future__ import annotations

import json
from typing import Any

from rankscope.render.tracks import coll_label, track_label

COLL_TID = "collectives"


def _base(frames: dict[int, Any]) -> int:
    firsts = [int(f[k]["ts"].min()) for f in frames.values() for k in ("events", "collectives", "memory")
              if f[k].height]
    return min(firsts) if firsts else 0


def _meta(sel: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r, f in sel["frames"].items():
        pid = r + 1
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": sel["names"][r]}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": r}})
        for t in f["events"]["track"].unique().sort().to_list():
            label = track_label(t, f.get("remote"))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(t), "args": {"name": label}})
        for lane in sorted(set(f["collectives"]["lane"].to_list()) | {0}):
            tid = coll_label(lane)
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tid}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                        "args": {"sort_index": (1 << 30) + lane}})
    return out


def _rows(df: Any) -> str:
    """The rows of ``df`` as JSON objects without the enclosing brackets ('' when empty)."""
    return df.write_json()[1:-1] if df.height else ""


def chrome_json(sel: dict[str, Any], run_id: str) -> str:
    """The whole trace as one JSON document string."""
    import polars as pl

    frames = sel["frames"]
    base = _base(frames)
    us = lambda c: ((pl.col(c) - base) / 1e3).round(3)  # noqa: E731
    parts = [json.dumps(x) for x in _meta(sel)]
    flows: list[Any] = []
    for r, f in frames.items():
        pid = r + 1
        ev = f["events"].select(pl.lit("X").alias("ph"), "name", pl.lit("op").alias("cat"), us("ts").alias("ts"),
                                (pl.col("dur") / 1e3).round(3).alias("dur"), pl.lit(pid).alias("pid"),
                                pl.col("track").alias("tid"))
        co = f["collectives"]
        lane_tid = pl.when(pl.col("lane") == 0).then(pl.lit(COLL_TID)).otherwise(
            pl.format(COLL_TID + " {}", pl.col("lane") + 1))
        cx = co.select(pl.lit("X").alias("ph"), "name", pl.lit("collective").alias("cat"), us("ts").alias("ts"),
                       (pl.col("dur") / 1e3).round(3).alias("dur"), pl.lit(pid).alias("pid"),
                       lane_tid.alias("tid"),
                       pl.struct("op", "pg_name", "pg_ranks", "seq", "bytes_in", "k", pl.col("flow").alias("flow_id"))
                       .alias("args"))
        flows.append(co.filter(pl.col("flow").is_not_null()).select(
            pl.lit("collective").alias("name"), pl.lit("flow").alias("cat"), pl.col("flow").alias("id"),
            us("ts").alias("ts"), pl.lit(pid).alias("pid"), lane_tid.alias("tid"), pl.lit("e").alias("bp")))
        mem = f["memory"].select(pl.lit("C").alias("ph"), pl.lit("memory").alias("name"), us("ts").alias("ts"),
                                 pl.lit(pid).alias("pid"),
                                 pl.struct((pl.col("total_allocated") / 2**20).round(3).alias("allocated_MiB"))
                                 .alias("args"))
        cnt = f.get("counters")
        gpu = cnt.select(pl.lit("C").alias("ph"), "name", us("ts").alias("ts"), pl.lit(pid).alias("pid"),
                         pl.struct(pl.col("value")).alias("args")) if cnt is not None and cnt.height else None
        parts += [x for x in (_rows(ev), _rows(cx), _rows(mem), _rows(gpu) if gpu is not None else "") if x]
    parts += [x for x in [_flow_rows(flows)] if x]
    meta = {"rankscope": {"run_id": run_id, "base_ns": base, "clock_offsets_ns": {str(k): v for k, v in
                                                                                   sel["offsets"].items()},
                          "clock_drift_ppm": {str(k): v for k, v in sel.get("drift_ppm", {}).items()}}}
    return ('{"displayTimeUnit":"ns","metadata":' + json.dumps(meta) + ',"traceEvents":[' + ",".join(parts) + "]}")


def _flow_rows(flows: list[Any]) -> str:
    """Flow steps over all ranks in time order: 's' starts, 't' continues, 'f' ends (at the latest call)."""
    import polars as pl

    fl = pl.concat(flows) if flows else None
    if fl is None or not fl.height:
        return ""
    fl = fl.sort("id", "ts").with_columns(i=pl.int_range(pl.len()).over("id"), n=pl.len().over("id"))
    ph = pl.when(pl.col("i") == 0).then(pl.lit("s")).when(pl.col("i") == pl.col("n") - 1).then(pl.lit("f")) \
        .otherwise(pl.lit("t"))
    return _rows(fl.with_columns(ph=ph).drop("i", "n"))
