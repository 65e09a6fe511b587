"""Counter series of one rank for the merged timeline: launch queue length per stream and memory
copy bandwidth per copy kind (``queue_length.series``, ``memory_bw.series``), on the rank's clock.

Pattern: the analyses' own series (value held until the next point), named for their counter track.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.classify import DEVICE_KINDS

SCHEMA = {"name": pl.Utf8, "ts": pl.Int64, "value": pl.Float64, "unit": pl.Utf8}


def rank_counters(run: Any, rank: int) -> pl.DataFrame:
    """name ("queue length · stream 7", "memory bandwidth · Memcpy HtoD (GB/s)"), ts (ns), value, unit."""
    from rankscope.analysis.gpu import memory_bw, queue_length
    from rankscope.analysis.rankdata import RankData

    d = RankData(run, rank)
    if not d.kind_in(DEVICE_KINDS).any():
        return pl.DataFrame(schema=SCHEMA)
    q = queue_length.series(d).select(pl.format("queue length · stream {}", "stream").alias("name"), "ts",
                                      pl.col("queue_length").cast(pl.Float64).alias("value"), pl.lit("count").alias("unit"))
    b = memory_bw.series(d).select(pl.format("memory bandwidth · {} (GB/s)", "name").alias("name"), "ts",
                                   pl.col("gbps").alias("value"), pl.lit("gbps").alias("unit"))
    return pl.concat([q.cast(SCHEMA), b.cast(SCHEMA)])  # type: ignore[arg-type]
