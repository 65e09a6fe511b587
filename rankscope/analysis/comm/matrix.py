"""Communication matrix: rank × rank bytes, time and bandwidth per process group and op type.

Pattern: collective traces say what each rank moved, not over which link, so the matrix is a
model, stated here: for a collective of n ranks, each rank moves its *bus bytes* (bytes × the
nccl-tests factor of the op) during its transfer time (duration − wait), split evenly over its
n − 1 peers. Point-to-point ops are exact when the group has two members: a ``send`` on rank a
is a → b, a ``recv`` on rank b is a → b. Plus a process-group map: name, type (collective or p2p),
rank set, size, description and the ops seen. Reads only the ``collectives`` analysis output.
"""
from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from rankscope.analysis.base import Result
from rankscope.analysis.comm.collectives import bus_factor
from rankscope.model.run import Run

P2P_OPS = ("send", "recv")


def _peers(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(peer=pl.col("pg_ranks").str.split(",").cast(pl.List(pl.Int64))).explode("peer")


def collective_pairs(pr: pl.DataFrame) -> pl.DataFrame:
    """src → dst rows of collective ops (bus bytes split evenly over peers)."""
    c = pr.filter(~pl.col("op").is_in(P2P_OPS) & (pl.col("bytes") > 0))
    if c.height == 0:
        return pl.DataFrame()
    n = pl.col("pg_ranks").str.count_matches(",") + 1
    per_rank = (c.with_columns(n=n, transfer=pl.col("span") - pl.col("wait"))
                .filter(pl.col("n") > 1)
                .with_columns(bus=pl.col("bytes") * bus_factor(pl.col("op"), pl.col("n")))
                .group_by(["pg_name", "pg_ranks", "op", "rank", "n"])
                .agg(bytes=pl.col("bus").sum(), time_ns=pl.col("transfer").sum(), count=pl.len()))
    return (_peers(per_rank).filter(pl.col("peer") != pl.col("rank"))
            .with_columns(bytes=pl.col("bytes") / (pl.col("n") - 1))
            .select("pg_name", "pg_ranks", "op", pl.col("rank").alias("src"), pl.col("peer").alias("dst"),
                    "bytes", "time_ns", "count"))


def p2p_pairs(pr: pl.DataFrame) -> pl.DataFrame:
    """src → dst rows of send/recv in two-member groups."""
    p = pr.filter(pl.col("op").is_in(P2P_OPS) & (pl.col("pg_ranks").str.count_matches(",") == 1))
    if p.height == 0:
        return pl.DataFrame()
    p = _peers(p).filter(pl.col("peer") != pl.col("rank"))
    send = pl.col("op") == "send"
    return (p.with_columns(src=pl.when(send).then(pl.col("rank")).otherwise(pl.col("peer")),
                           dst=pl.when(send).then(pl.col("peer")).otherwise(pl.col("rank")),
                           transfer=pl.col("span") - pl.col("wait"))
            .group_by(["pg_name", "pg_ranks", "op", "src", "dst"])
            .agg(bytes=pl.col("bytes").sum().cast(pl.Float64), time_ns=pl.col("transfer").sum(), count=pl.len()))


def matrix(pr: pl.DataFrame) -> pl.DataFrame:
    """The communication matrix rows with bandwidth (GB/s == bytes/ns)."""
    parts = [t for t in (collective_pairs(pr), p2p_pairs(pr)) if t.height]
    if not parts:
        return pl.DataFrame()
    cols = ["pg_name", "pg_ranks", "op", "src", "dst", "bytes", "time_ns", "count"]
    m = pl.concat([t.select(cols).with_columns(pl.col("bytes").cast(pl.Float64), pl.col("time_ns").cast(pl.Int64),
                                               pl.col("count").cast(pl.Int64)) for t in parts])
    return (m.with_columns(bandwidth_gbps=pl.when(pl.col("time_ns") > 0)
                           .then(pl.col("bytes") / pl.col("time_ns")).otherwise(None))
            .sort(["pg_name", "op", "src", "dst"]))


def pg_map(run: Run, pr: pl.DataFrame) -> pl.DataFrame:
    """Process groups: name, type, ranks, size, description, ops seen."""
    desc: dict[str, str] = {}
    for info in run.ranks.values():
        for g in info.process_groups or []:
            desc.setdefault(str(g.get("name", g.get("pg_name", ""))), str(g.get("desc", g.get("pg_desc", ""))))
    seen = pr.group_by(["pg_name", "pg_ranks"]).agg(ops=pl.col("op").unique().sort(), calls=pl.len())
    return (seen.with_columns(
        type=pl.when(pl.col("ops").list.eval(pl.element().is_in(P2P_OPS)).list.all()).then(pl.lit("p2p"))
        .otherwise(pl.lit("collective")),
        size=pl.col("pg_ranks").str.count_matches(",") + 1,
        desc=pl.col("pg_name").replace_strict(desc, default="", return_dtype=pl.Utf8),
        ops=pl.col("ops").list.join(","))
        .sort("pg_name"))


def run_comm_matrix(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``comm_matrix`` (after ``collectives``)."""
    pr = pl.from_arrow(results["collectives"].tables["per_rank"])
    assert isinstance(pr, pl.DataFrame)
    m = matrix(pr)
    pgs = pg_map(run, pr)
    tables: dict[str, pa.Table] = {"process_groups": pgs.to_arrow()}
    if m.height:
        tables["matrix"] = m.to_arrow()
    summary = {"pairs": m.height, "process_groups": pgs.height,
               "note": "collective traffic split evenly over peers (bus bytes); p2p exact for 2-rank groups"}
    return Result("comm_matrix", tables=tables, summary=summary)
