"""The edges between ranks of one run, on one clock: what the critical path across ranks stands on.

Pattern: two kinds of edges, both from the ranks' ``collectives`` tables, both put on the reference
rank's clock by the "clock" analysis' alignment (offset and applied drift per rank):

- a *collective instance*: the same call of one process group on each of its ranks, matched by (group,
  sequence number) where the trace or the recorder gives them, else by order within a group that is
  unambiguous (``collectives.match_collectives``; never send / receive, never calls whose group is
  unknown). No rank of a synchronising instance can leave it before the last one arrived;
- a *point-to-point pair*: the k-th send from a to b with the k-th receive on b from a
  (``p2p_pairs.p2p_pairs``). The receive cannot end before its send started.

``run_edges(run)`` returns both tables, the alignment used and the findings that limit them (calls not
matched for want of a group, clocks that could not be aligned).

Example::

    e = run_edges(run)                      # or run_edges(run, results) after run_all(...)
    last = e.collectives.group_by("pg_name", "seq").agg(pl.col("start").max())
    waits = e.p2p.filter("paired").with_columns(lag=pl.col("recv_end") - pl.col("send_start"))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from rankscope.analysis.base import Finding, Result, frame
from rankscope.analysis.clock.alignment import ClockAlignment, align, alignment_from
from rankscope.model.run import Run

COLLECTIVE_COLUMNS = ["pg_name", "pg_ranks", "seq", "op", "matched_by", "rank", "start", "end", "issue", "bytes",
                      "n_ranks", "complete"]
P2P_COLUMNS = ["sender", "receiver", "k", "bytes", "recv_bytes", "send_start", "send_end", "recv_start", "recv_end",
               "paired"]


@dataclass
class RunEdges:
    """The edges between the ranks of one run (times in ns on the reference rank's clock).

    ``collectives``: one row per (instance, rank): ``pg_name``, ``pg_ranks`` (members, "0,1,2,3"),
    ``seq`` (the instance: sequence number in the group when ``matched_by`` is "seq", else the n-th call
    of the group), ``op``, ``rank``, ``start`` / ``end`` of the rank's part (device kernel when there is
    one, else the host span: gloo's worker thread), ``issue`` (when the rank's training thread issued it,
    -1 when the trace does not say), ``bytes``, ``n_ranks`` (ranks seen in the instance) and ``complete``
    (every member of the group seen).

    ``p2p``: one row per transfer: ``sender``, ``receiver``, ``k`` (its order in the pair), ``bytes``
    (sent), ``recv_bytes`` (receive buffer), ``send_start`` (posted) / ``send_end`` (its wait returned) on
    the sender, ``recv_start`` / ``recv_end`` on the receiver, ``paired`` (False: the other side is not
    in the trace; its times are -1). Every send and receive with a known peer is a row.
    """

    collectives: pl.DataFrame
    p2p: pl.DataFrame
    alignment: ClockAlignment
    findings: list[Finding] = field(default_factory=list)


def _collectives(run: Run, al: ClockAlignment) -> pl.DataFrame:
    from rankscope.analysis.comm.collectives import match_collectives

    m = frame(match_collectives(run))
    if m.height == 0:
        return pl.DataFrame(schema={c: (pl.Utf8 if c in ("pg_name", "pg_ranks", "op", "matched_by") else
                                        pl.Boolean if c == "complete" else pl.Int64) for c in COLLECTIVE_COLUMNS})
    dev = pl.col("dev_ts") >= 0
    start = pl.when(dev).then(pl.col("dev_ts")).otherwise(pl.col("ts"))
    stop = pl.when(dev).then(pl.col("dev_end")).otherwise(pl.col("end"))
    issue = pl.col("issue_ts")
    key = ["pg_name", "pg_ranks", "instance"]
    return (m.with_columns(pl.col("pg_name").cast(pl.Utf8), pl.col("pg_ranks").cast(pl.Utf8), pl.col("op").cast(pl.Utf8))
            .select(*key, "op", "matched_by", "rank", "bytes",
                    start=start - al.correction_expr(start), end=stop - al.correction_expr(stop),
                    issue=pl.when(issue >= 0).then(issue - al.correction_expr(issue)).otherwise(-1))
            .with_columns(n_ranks=pl.len().over(key).cast(pl.Int64))
            .with_columns(complete=pl.col("n_ranks") >= pl.col("pg_ranks").str.count_matches(",") + 1)
            .rename({"instance": "seq"}).select(COLLECTIVE_COLUMNS).sort("pg_name", "seq", "rank"))


def _shift(al: ClockAlignment, col: str, rank_col: str) -> pl.Expr:
    t = pl.col(col)
    return pl.when(t >= 0).then(t - al.correction_expr(t, rank_col)).otherwise(-1).alias(col)


def _p2p(run: Run, al: ClockAlignment) -> pl.DataFrame:
    from rankscope.analysis.comm.p2p import p2p_pairs

    p = p2p_pairs(run)
    if p.height == 0:
        return p
    return p.with_columns(*(_shift(al, c, "sender") for c in ("send_start", "send_end")),
                          *(_shift(al, c, "receiver") for c in ("recv_start", "recv_end"))).select(P2P_COLUMNS)


def run_edges(run: Run, results: dict[str, Result] | None = None) -> RunEdges:
    """The edges of ``run`` (see :class:`RunEdges`), on the clock of the "clock" analysis in ``results``
    when it ran, else on a fresh alignment."""
    from rankscope.analysis.clock.alignment import findings as clock_findings
    from rankscope.analysis.comm.collectives import unattributed_finding

    al = alignment_from(results or {}) if results else None
    fresh = al is None
    if al is None:
        al = align(run)
    found: list[Finding] = []
    why = unattributed_finding(run)
    if why is not None:
        found.append(why)
    if fresh:
        found += [f for f in clock_findings(al) if f.severity.value != "info"]
    elif results and "clock" in results:
        found += [f for f in results["clock"].findings if f.severity.value != "info"]
    return RunEdges(_collectives(run, al), _p2p(run, al), al, found)


def summary(e: RunEdges) -> dict[str, Any]:
    """Counts for a glance: instances by how they were matched, transfers paired and not."""
    c, p = e.collectives, e.p2p
    inst = c.select("pg_name", "seq", "matched_by").unique() if c.height else c
    return {"instances": inst.height,
            "matched_by": {str(k): int(v) for k, v in inst.group_by("matched_by").len().iter_rows()} if c.height else {},
            "p2p_paired": int(p["paired"].sum()) if p.height else 0,
            "p2p_unpaired": int((~p["paired"]).sum()) if p.height else 0}
