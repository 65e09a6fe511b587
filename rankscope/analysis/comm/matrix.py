"""Communication matrix: rank × rank bytes, time and bandwidth per process group and op type.

Pattern: traffic is taken as exact where the trace says it, modelled where it does not, and the model is
stated. Exact: point-to-point transfers (sender → receiver from the paired sends and receives,
``p2p_pairs``), and all_to_all calls whose split sizes the trace holds (``c10d::alltoall_base_``'s
"Concrete Inputs", NCCL's "In split size"): rank a → member j gets the bytes a sent to j, so uneven
traffic is drawn as it happened (2.5x the tokens *to* rank 1 is the column of rank 1). Modelled: for any
other collective of n ranks, each rank moves its *bus bytes* (bytes × the nccl-tests factor of the op)
during its transfer time (duration − wait), split evenly over its n − 1 peers. Calls whose process group
is unknown (``collectives_unattributed``) are left out rather than spread over the world. Tables:
``matrix`` (pg, op, src, dst, bytes, time, count, bandwidth, ``exact``), ``by_op`` (the totals per op, so
a view can filter the matrix by op) and ``process_groups`` (name, type, ranks, size, description, ops).
"""
from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from rankscope.analysis.base import Analysis, Result, frame
from rankscope.analysis.view import Col, TableView, View
from rankscope.analysis.comm.collectives import bus_factor
from rankscope.model.run import Run

P2P_OPS = ("send", "recv")
_COLS = ["pg_name", "pg_ranks", "op", "src", "dst", "bytes", "time_ns", "count", "exact"]


def _peers(df: pl.DataFrame) -> pl.DataFrame:
    return (df.filter(pl.col("pg_ranks").str.len_chars() > 0)
            .with_columns(peer=pl.col("pg_ranks").str.split(",").cast(pl.List(pl.Int64))).explode("peer"))


def collective_pairs(pr: pl.DataFrame, exact_ranks: pl.DataFrame | None = None) -> pl.DataFrame:
    """src → dst rows of collective ops (bus bytes split evenly over peers). ``exact_ranks``: the
    (pg_name, rank) whose all_to_all calls are counted exactly instead (``all_to_all_pairs``)."""
    c = pr.filter(~pl.col("op").is_in(P2P_OPS) & (pl.col("bytes") > 0))
    if exact_ranks is not None and exact_ranks.height:
        c = c.join(exact_ranks.with_columns(op=pl.lit("all_to_all")), on=["pg_name", "rank", "op"], how="anti")
    if c.height == 0:
        return pl.DataFrame()
    n = pl.col("pg_ranks").str.count_matches(",") + 1
    per_rank = (c.with_columns(n=n, transfer=pl.col("span") - pl.col("wait"))
                .filter(pl.col("n") > 1)
                .with_columns(bus=pl.col("bytes") * bus_factor(pl.col("op"), pl.col("n")))
                .group_by(["pg_name", "pg_ranks", "op", "rank", "n"])
                .agg(bytes=pl.col("bus").sum(), time_ns=pl.col("transfer").sum(), count=pl.len()))
    return (_peers(per_rank).filter(pl.col("peer") != pl.col("rank"))
            .with_columns(bytes=pl.col("bytes") / (pl.col("n") - 1), exact=pl.lit(False))
            .select("pg_name", "pg_ranks", "op", pl.col("rank").alias("src"), pl.col("peer").alias("dst"),
                    "bytes", "time_ns", "count", "exact"))


def _splits(run: Run) -> pl.DataFrame:
    """all_to_all calls with split sizes: pg_name, pg_ranks, rank, the bytes sent to each member."""
    parts = []
    for r in run.rank_ids:
        try:
            t = run.table(r, "collectives", columns=["op", "pg_name", "pg_ranks", "split_out", "ts", "dur"])
        except (KeyError, ValueError):
            continue
        if t.num_rows == 0:
            continue
        df = frame(t).with_columns(pl.col(c).cast(pl.Utf8) for c in ("op", "pg_name", "pg_ranks", "split_out"))
        df = df.filter((pl.col("op") == "all_to_all") & (pl.col("split_out").str.len_chars() > 0)
                       & (pl.col("pg_ranks").str.len_chars() > 0))
        if df.height:
            parts.append(df.with_columns(rank=pl.lit(r, pl.Int64)))
    return pl.concat(parts) if parts else pl.DataFrame()


def all_to_all_pairs(run: Run, pr: pl.DataFrame) -> pl.DataFrame:
    """src → dst rows of all_to_all calls from their split sizes (exact); time is the sending rank's
    transfer time of those calls (duration − wait, from ``pr``), as for the modelled rows."""
    sp = _splits(run)
    if sp.height == 0:
        return pl.DataFrame()
    rows = (sp.with_columns(dst=pl.col("pg_ranks").str.split(",").cast(pl.List(pl.Int64)),
                            b=pl.col("split_out").str.split(",").cast(pl.List(pl.Int64)))
            .filter(pl.col("dst").list.len() == pl.col("b").list.len())
            .explode("dst", "b").filter(pl.col("dst") != pl.col("rank"))
            .group_by("pg_name", "pg_ranks", "rank", "dst").agg(bytes=pl.col("b").sum(), count=pl.len()))
    a2a = pr.filter(pl.col("op") == "all_to_all")
    t = (a2a.group_by("pg_name", "rank").agg(time_ns=(pl.col("span") - pl.col("wait")).sum())
         if a2a.height else pl.DataFrame(schema={"pg_name": pl.Utf8, "rank": pl.Int64, "time_ns": pl.Int64}))
    return (rows.join(t, on=["pg_name", "rank"], how="left")
            .select("pg_name", "pg_ranks", op=pl.lit("all_to_all"), src="rank", dst="dst",
                    bytes=pl.col("bytes").cast(pl.Float64), time_ns=pl.col("time_ns").fill_null(0), count="count",
                    exact=pl.lit(True)))


def p2p_pairs(p2p: pl.DataFrame | None) -> pl.DataFrame:
    """src → dst rows of point-to-point transfers (the paired sends and receives of ``collectives``): bytes
    sent, and the time from both sides being posted to the receive's end (paired transfers only)."""
    if p2p is None or p2p.height == 0:
        return pl.DataFrame()
    paired = pl.col("paired")
    xfer = (pl.col("recv_end") - pl.max_horizontal("send_start", "recv_start")).clip(lower_bound=0)
    return (p2p.filter(pl.col("bytes") >= 0)
            .with_columns(t=pl.when(paired).then(xfer).otherwise(0))
            .group_by("sender", "receiver")
            .agg(bytes=pl.col("bytes").sum().cast(pl.Float64), time_ns=pl.col("t").sum(), count=pl.len())
            .select(pg_name=pl.lit(""), pg_ranks=pl.concat_str("sender", "receiver", separator=","),
                    op=pl.lit("send"), src="sender", dst="receiver", bytes="bytes", time_ns="time_ns",
                    count="count", exact=pl.lit(True)))


def matrix(pr: pl.DataFrame, exact: list[pl.DataFrame] | None = None) -> pl.DataFrame:
    """The communication matrix rows with bandwidth (GB/s == bytes/ns)."""
    extra = [t for t in (exact or []) if t.height]
    done = (pl.concat([t.filter(pl.col("op") == "all_to_all").select(pl.col("pg_name"), rank=pl.col("src"))
                       for t in extra]).unique() if extra else None)
    parts = [t for t in [collective_pairs(pr, done), *extra] if t.height]
    if not parts:
        return pl.DataFrame()
    m = pl.concat([t.select(_COLS).with_columns(pl.col("bytes").cast(pl.Float64), pl.col("time_ns").cast(pl.Int64),
                                                pl.col("count").cast(pl.Int64)) for t in parts])
    return (m.with_columns(bandwidth_gbps=pl.when(pl.col("time_ns") > 0)
                           .then(pl.col("bytes") / pl.col("time_ns")).otherwise(None))
            .sort(["pg_name", "op", "src", "dst"]))


def by_op(m: pl.DataFrame) -> pl.DataFrame:
    """Totals per op: what the matrix holds for each op, for a view that filters the matrix by op."""
    return (m.group_by("op").agg(bytes=pl.col("bytes").sum(), links=pl.len(), count=pl.col("count").sum(),
                                 exact=pl.col("exact").all()).sort("bytes", descending=True))


def pg_map(run: Run, pr: pl.DataFrame) -> pl.DataFrame:
    """Process groups: name, type, ranks, size, description, ops seen."""
    desc: dict[str, str] = {}
    for info in run.ranks.values():
        for g in info.process_groups or []:
            desc.setdefault(str(g.get("name", g.get("pg_name", ""))), str(g.get("desc", g.get("pg_desc", ""))))
    if pr.height == 0:
        return pl.DataFrame(schema={"pg_name": pl.Utf8, "pg_ranks": pl.Utf8, "ops": pl.Utf8, "calls": pl.UInt32,
                                    "type": pl.Utf8, "size": pl.UInt32, "desc": pl.Utf8})
    seen = pr.group_by(["pg_name", "pg_ranks"]).agg(ops=pl.col("op").unique().sort(), calls=pl.len())
    return (seen.with_columns(
        type=pl.when(pl.col("ops").list.eval(pl.element().is_in(P2P_OPS)).list.all()).then(pl.lit("p2p"))
        .otherwise(pl.lit("collective")),
        size=pl.col("pg_ranks").str.count_matches(",") + 1,
        desc=pl.col("pg_name").replace_strict(desc, default="", return_dtype=pl.Utf8),
        ops=pl.col("ops").list.join(","))
        .sort("pg_name"))


def _share(m: pl.DataFrame) -> float:
    """The share of the matrix's bytes that is exact (not modelled)."""
    if m.height == 0:
        return 0.0
    total = float(m["bytes"].sum())
    return float(m.filter(pl.col("exact"))["bytes"].sum()) / total if total > 0 else 0.0


def run_comm_matrix(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``comm_matrix`` (after ``collectives``)."""
    co = results["collectives"]
    pr = frame(co.tables["per_rank"]) if "per_rank" in co.tables else pl.DataFrame()
    p2p = frame(co.tables["p2p"]) if "p2p" in co.tables else None
    if pr.height == 0 and (p2p is None or p2p.height == 0):
        return Result("comm_matrix", skipped="no collectives matched across ranks")
    m = matrix(pr, [all_to_all_pairs(run, pr) if pr.height else pl.DataFrame(), p2p_pairs(p2p)])
    pgs = pg_map(run, pr)
    tables: dict[str, pa.Table] = {"process_groups": pgs.to_arrow()}
    if m.height:
        tables["matrix"] = m.to_arrow()
        tables["by_op"] = by_op(m).to_arrow()
    summary = {"pairs": m.height, "process_groups": pgs.height,
               "exact_bytes_share": _share(m),
               "note": "point-to-point and all_to_all with split sizes exact; other collectives: bus bytes split "
                       "evenly over peers"}
    return Result("comm_matrix", tables=tables, summary=summary)


ANALYSIS = Analysis(
    name="comm_matrix",
    description="rank × rank bytes, time and bandwidth; process-group map",
    run=run_comm_matrix,
    needs=("collectives",),
    after=("collectives",),
    view=View("Communication matrix", (Col("pairs", "rank pairs", "count"),
                                 Col("process_groups", "process groups", "count"),
                                 Col("note", "note")),
        (TableView("process_groups", "process groups", (
            Col("pg_name", "group"), Col("pg_ranks", "ranks", "group"), Col("type", "type"), Col("size", "size", "count"),
            Col("calls", "calls", "count"), Col("desc", "description"))),),
        "needs collective sizes: profile with record_shapes=True", place="communication"),
)
