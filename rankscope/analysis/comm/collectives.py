"""Collectives matched across ranks: who arrived late, who waited, what moved at what bandwidth.

Pattern: the same collective call appears once on every rank of its process group. Calls are
matched by (process group, sequence number) when the trace or the recorder gives them (record_param_comms
on NCCL; on gloo the recorder's window files, ``model/comm_seq``), else by their order within the process
group on each rank. Never matched here: send / receive (paired per sender and receiver in
``p2p_pairs``), and calls whose group the trace does not name while the ranks are in sub-groups
(``UNKNOWN_PG``: said by ``unattributed_finding``, with what to turn on). Per matched instance:

- arrival skew = latest start − earliest start over the participating ranks;
- wait of a rank = its duration − the minimum duration over the group (time spent waiting for
  the others), transfer = the minimum duration (the part every rank had to spend);
- algbw = bytes / transfer, busbw = algbw × the nccl-tests factor of the op for n ranks
  (all_reduce 2(n−1)/n; all_gather, reduce_scatter, all_to_all (n−1)/n; others 1).

Times are the device kernel span when the rank has one, else the host span. Counts that differ
across ranks are reported as findings, never fatal (with sequence numbers, only inside the range every
member's window holds). Only the small ``collectives`` table of each rank is read (no events).

Example::

    inst = match_collectives(run)                 # one row per (instance, rank)
    res = run_collectives(run, {})                # Result with tables["instances"], ["p2p"]
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from rankscope.analysis.base import Analysis, Finding, Result, Severity, frame
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.intlist import format_int_list
from rankscope.model.comms import UNKNOWN_PG
from rankscope.model.run import Run

MATCH_COLUMNS = ["pg_name", "pg_ranks", "instance", "op", "rank", "ts", "end", "dur", "dev_ts", "dev_end",
                 "bytes", "issue_ts", "matched_by"]
_READ = ["op", "ts", "dur", "dev_ts", "dev_dur", "pg_name", "pg_ranks", "seq", "bytes_in", "bytes_out", "issue_ts"]
P2P_OPS = ("send", "recv")
# gloo runs a reduce_scatter into one tensor as an all_reduce: a rank whose issuing op fell outside the
# window shows the one where the others show the other; not a different collective
FAMILY = {"reduce_scatter": "all_reduce"}


def bus_factor(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    """nccl-tests bus bandwidth factor per op for n ranks."""
    nf = n.cast(pl.Float64)
    return (pl.when(op == "all_reduce").then(2.0 * (nf - 1) / nf)
            .when(op.is_in(["all_gather", "reduce_scatter", "all_to_all"])).then((nf - 1) / nf)
            .otherwise(1.0))


def _rank_table(run: Run, rank: int, offset: int) -> pa.Table | None:
    """One rank's collectives with the string columns decoded and its rank / clock offset added."""
    t = _read(run, rank)
    if t is None or t.num_rows == 0:
        return None
    for c in ("op", "pg_name", "pg_ranks"):
        i = t.schema.get_field_index(c)
        t = t.set_column(i, c, t.column(c).cast(pa.string()))
    n = t.num_rows
    return t.append_column("rank", pa.array(np.full(n, rank, np.int64))).append_column(
        "offset", pa.array(np.full(n, offset, np.int64)))


def _read(run: Run, rank: int) -> pa.Table | None:
    """The columns matching needs; ``issue_ts`` filled with -1 in a cache written before it existed."""
    try:
        return run.table(rank, "collectives", columns=_READ)
    except (KeyError, ValueError, pa.ArrowInvalid):
        t = run.table(rank, "collectives", columns=_READ[:-1])
        return t.append_column("issue_ts", pa.array(np.full(t.num_rows, -1, np.int64)))


def _frame(t: pa.Table) -> pl.DataFrame:
    """All ranks' collective calls (no send / recv: those pair per sender and receiver, see
    ``p2p_pairs``), times minus offsets. A group whose calls carry sequence numbers is matched by them
    (its calls without one are left out: they are not the same count); a group without, by order."""
    df = frame(t).filter(~pl.col("op").is_in(P2P_OPS) & (pl.col("pg_name") != UNKNOWN_PG))
    off = pl.col("offset")
    dev = pl.col("dev_ts") >= 0
    key = ["pg_name", "pg_ranks"]
    df = (df.with_columns(by_seq=(pl.col("seq") >= 0).any().over(key))
          .filter(~pl.col("by_seq") | (pl.col("seq") >= 0))
          .sort(["rank", "ts"]))
    return (df.with_columns(
                order=pl.int_range(pl.len()).over(["rank", *key]).cast(pl.Int64),
                end=pl.col("ts") + pl.col("dur") - off,
                dev_end=pl.when(dev).then(pl.col("dev_ts") + pl.col("dev_dur") - off).otherwise(-1),
                dev_ts=pl.when(dev).then(pl.col("dev_ts") - off).otherwise(-1),
                issue_ts=pl.when(pl.col("issue_ts") >= 0).then(pl.col("issue_ts") - off).otherwise(-1),
                ts=pl.col("ts") - off,
                bytes=pl.max_horizontal("bytes_in", "bytes_out"))
            .with_columns(instance=pl.when(pl.col("by_seq")).then(pl.col("seq")).otherwise(pl.col("order")),
                          matched_by=pl.when(pl.col("by_seq")).then(pl.lit("seq")).otherwise(pl.lit("order"))))


def match_collectives(run: Run, offsets: dict[int, int] | None = None) -> pa.Table:
    """One row per (collective instance, rank), times in ns on each rank's own clock.

    ``offsets`` (rank -> ns) is subtracted from every time of that rank when given. ``dev_ts`` /
    ``dev_end`` are -1 when the call has no device kernel, ``issue_ts`` when the trace does not say when
    the training thread issued it; ``matched_by`` is "seq" (group and sequence number) or "order" (the
    n-th call of the group on every rank). Point-to-point ops and calls whose group is unknown are not
    here (``p2p_pairs``; ``unattributed``). Several analyses (clock, links, straggler, advice,
    collectives) ask for the same matching: the last result is kept on the run.
    """
    key = (tuple(run.rank_ids), tuple(sorted((offsets or {}).items())))
    memo = run.__dict__.get("_matched_collectives")
    if memo is not None and memo[0] == key:
        return memo[1]
    parts = [t for t in (_rank_table(run, r, int((offsets or {}).get(r, 0))) for r in run.rank_ids)
             if t is not None]
    df = _frame(pa.concat_tables(parts, promote_options="permissive")) if parts else None
    if df is None or df.height == 0:
        out = pa.table({c: pa.array([], t) for c, t in zip(MATCH_COLUMNS, _TYPES)})
    else:
        out = df.select(MATCH_COLUMNS).sort(["pg_name", "instance", "rank"]).to_arrow()
    run.__dict__["_matched_collectives"] = (key, out)
    return out


_TYPES = [pa.string(), pa.string(), pa.int64(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.int64(),
          pa.int64(), pa.int64(), pa.int64(), pa.int64(), pa.string()]


def unattributed(run: Run) -> dict[int, int]:
    """Per rank, the collective calls whose process group the trace does not name while the rank is in
    sub-groups (gloo without the recorder): they are matched with nothing."""
    out = {}
    for r in run.rank_ids:
        t = run.table(r, "collectives", columns=["pg_name", "op"])
        if t.num_rows:
            df = frame(t).with_columns(pl.col("pg_name").cast(pl.Utf8), pl.col("op").cast(pl.Utf8))
            n = df.filter((pl.col("pg_name") == UNKNOWN_PG) & ~pl.col("op").is_in(P2P_OPS)).height
            if n:
                out[r] = n
    return out


def per_rank_times(matched: pl.DataFrame) -> pl.DataFrame:
    """Matched rows with the time used for skew/wait (device span when present) and wait per rank."""
    dev = pl.col("dev_ts") >= 0
    key = ["pg_name", "pg_ranks", "instance"]
    return (matched.with_columns(start=pl.when(dev).then(pl.col("dev_ts")).otherwise(pl.col("ts")),
                                 stop=pl.when(dev).then(pl.col("dev_end")).otherwise(pl.col("end")))
            .with_columns(span=pl.col("stop") - pl.col("start"))
            .with_columns(wait=pl.col("span") - pl.col("span").min().over(key),
                          arrival_lag=pl.col("start") - pl.col("start").min().over(key)))


def instances(per_rank: pl.DataFrame) -> pl.DataFrame:
    """One row per collective instance with skew, wait, transfer and bandwidths."""
    key = ["pg_name", "pg_ranks", "instance"]
    agg = per_rank.group_by(key).agg(
        op=pl.col("op").mode().sort().first(),  # a tie (one send, one recv) gives the same label every run
        # a point-to-point transfer is one send and one receive: the same instance, not a mismatch
        ops=pl.col("op").replace(FAMILY).n_unique(), n_ranks=pl.len(),
        start=pl.col("start").min(), arrival_skew=pl.col("start").max() - pl.col("start").min(),
        last_rank=pl.col("rank").sort_by("start").last(), first_rank=pl.col("rank").sort_by("start").first(),
        transfer=pl.col("span").min(), max_wait=pl.col("wait").max(), mean_wait=pl.col("wait").mean(),
        bytes=pl.col("bytes").max(), matched_by=pl.col("matched_by").first())
    n_group = pl.col("pg_ranks").str.count_matches(",") + 1
    algbw = pl.when((pl.col("transfer") > 0) & (pl.col("bytes") > 0)).then(
        pl.col("bytes") / pl.col("transfer")).otherwise(None)  # bytes/ns == GB/s
    return (agg.with_columns(group_size=n_group).with_columns(algbw_gbps=algbw)
            .with_columns(busbw_gbps=pl.col("algbw_gbps") * bus_factor(pl.col("op"), pl.col("group_size")))
            .sort(["start", "pg_name"]))


def mismatches(per_rank: pl.DataFrame, present: list[int], unattributed: set[int] | None = None) -> list[Finding]:
    """Process groups whose ranks recorded different numbers of calls. Where calls carry sequence
    numbers, only those between the last first and the first last of the members count: a window that
    starts or ends in the middle of a collective cuts it on some ranks only, which is no mismatch."""
    out: list[Finding] = []
    seq = per_rank.filter(pl.col("matched_by") == "seq") if "matched_by" in per_rank.columns else per_rank.head(0)
    if seq.height:
        key = ["pg_name", "pg_ranks"]
        seq = (seq.with_columns(lo=pl.col("instance").min().over([*key, "rank"]),
                                hi=pl.col("instance").max().over([*key, "rank"]))
               .with_columns(lo=pl.col("lo").max().over(key), hi=pl.col("hi").min().over(key))
               .filter(pl.col("instance").is_between(pl.col("lo"), pl.col("hi"))))
    order = per_rank.filter(pl.col("matched_by") != "seq") if "matched_by" in per_rank.columns else per_rank
    counts = pl.concat([d.group_by(["pg_name", "pg_ranks", "rank"]).agg(n=pl.len()) for d in (seq, order)])
    for (pg, ranks), g in counts.group_by(["pg_name", "pg_ranks"], maintain_order=True):
        members = [int(x) for x in str(ranks).split(",") if x] if ranks else []
        seen = dict(zip(g["rank"].to_list(), g["n"].to_list()))
        expect = [r for r in members if r in present and r not in (unattributed or ())] or list(seen)
        full = {r: int(seen.get(r, 0)) for r in expect}
        if len(set(full.values())) > 1:
            top = max(full.values())
            short = tuple(sorted(r for r, v in full.items() if v < top))
            out.append(Finding(
                kind="collective_count_mismatch", severity=Severity.WARNING, ranks=short,
                title=f"process group {pg}: ranks {list(short)} recorded fewer collectives ({min(full.values())} "
                      f"vs {top})", evidence={"pg_name": pg, "pg_ranks": ranks, "counts": full}))
    return out


def unattributed_finding(run: Run) -> Finding | None:
    """Why collectives were not matched across ranks: the traces list sub-groups but do not say which group
    each call belongs to (gloo without the recorder), and what to turn on."""
    missing = unattributed(run)
    if not missing:
        return None
    groups = sorted({str(g.get("name", g.get("pg_name", "?"))) for i in run.ranks.values()
                     for g in i.process_groups or []})
    total = sum(missing.values())
    return Finding(
        kind="collectives_unattributed", severity=Severity.WARNING, ranks=tuple(sorted(missing)),
        title=f"{total} collectives on ranks {format_int_list(sorted(missing))} were not matched across ranks: the "
              f"ranks are in {len(groups)} process groups and the traces do not say which group each call used "
              "(gloo); matching them by order across the world would mix the groups' calls. Turn on the collective "
              "recorder: import rankscope (or set TORCH_FR_BUFFER_SIZE=2000) before init_process_group and profile "
              "with rankscope.profile, which keeps each window's collectives with their group and sequence",
        evidence={"calls_per_rank": missing, "process_groups": groups})


def _offsets(run: Run) -> dict[int, int] | None:
    offs = {r: i.clock_offset_ns for r, i in run.ranks.items()}
    return {r: int(v) for r, v in offs.items() if v is not None} or None


def run_collectives(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``collectives``: tables ``instances`` and ``per_rank``."""
    offsets = _offsets(run)
    matched = pl.from_arrow(match_collectives(run, offsets))
    assert isinstance(matched, pl.DataFrame)
    from rankscope.analysis.comm.p2p import p2p_pairs

    p2p = p2p_pairs(run, offsets)
    why = unattributed_finding(run)
    lost = set(why.evidence["calls_per_rank"]) if why is not None else set()
    if matched.height == 0 and p2p.height == 0 and why is None:
        return Result("collectives", skipped="no collective calls in any rank")
    pr = per_rank_times(matched)
    inst = instances(pr)
    findings = mismatches(pr, run.rank_ids, lost) + ([why] if why is not None else [])
    mixed = inst.filter(pl.col("ops") > 1)
    if mixed.height:
        findings.append(Finding(kind="collective_op_mismatch", severity=Severity.WARNING,
                                title=f"{mixed.height} matched collective instances have different ops across ranks",
                                evidence={"examples": mixed.head(5).select("pg_name", "instance").to_dicts()}))
    lag = pr.group_by("rank").agg(pl.col("arrival_lag").median().alias("median_arrival_lag"),
                                  pl.col("wait").sum().alias("total_wait")).sort("rank")
    summary = {"instances": inst.height, "clock_offsets_applied": offsets is not None, "p2p_pairs": p2p.height,
               "matched_by": {str(k): int(v) for k, v in inst.group_by("matched_by").len().iter_rows()},
               "arrival_skew_p50_ns": float(np.median(inst["arrival_skew"].to_numpy())) if inst.height else 0.0,
               "last_arrivals": {int(r): int(n) for r, n in
                                 inst.group_by("last_rank").len().sort("last_rank").iter_rows()}}
    tables = {"instances": inst.to_arrow(), "per_rank": pr.to_arrow(), "arrival_by_rank": lag.to_arrow()}
    if p2p.height:
        tables["p2p"] = p2p.to_arrow()
    return Result("collectives", tables=tables,
                  findings=findings, summary=summary)


ANALYSIS = Analysis(
    name="collectives",
    description="collectives matched across ranks: arrival skew, wait, bandwidth",
    run=run_collectives,
    needs=("collectives",),
    view=View("Collectives matched across ranks", (
        Col("instances", "matched collectives", "count"), Col("arrival_skew_p50_ns", "median arrival skew", NS)),
        (TableView("arrival_by_rank", "arrival per rank", (
            Col("rank", "rank", "count"), Col("median_arrival_lag", "median lag behind the first rank", NS),
            Col("total_wait", "time others waited for it", NS))),
         TableView("instances", "per collective", (
             Col("op", "operation"), Col("pg_ranks", "group (ranks)", "group"), Col("instance", "call", "count"),
             Col("bytes", "size", "bytes"), Col("arrival_skew", "arrival skew", NS), Col("last_rank", "last rank", "count"),
             Col("max_wait", "longest wait", NS), Col("transfer", "transfer", NS), Col("busbw_gbps", "bus bandwidth", "gbps"))
         )), "no collectives in the traces", place="communication"),
)
