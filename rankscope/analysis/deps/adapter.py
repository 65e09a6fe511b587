"""Where the inter-rank edges come from: one rank's communication calls, keyed so that ranks meet.

Pattern: the keys follow the rules of ``analysis/comm/edges.py`` (``collectives.match_collectives`` for
collective instances, ``p2p_pairs`` for point-to-point transfers), applied to one rank's
``collectives`` table so that the per-rank pass needs no other rank: a collective of a group whose
calls carry sequence numbers is keyed by (group, sequence) and its calls without one are left out,
else by its order within the group on that rank; a call whose group the trace does not name
(``UNKNOWN_PG``) is not matched; a send / receive is keyed per (sender, receiver) in order (the
k-th send from a to b meets the k-th receive on b from a) and is never a group collective; without
a peer it stays unmatched and is counted. Every time stays on the rank's own clock: the join uses
durations only, so no clock alignment is needed (``edges.run_edges`` aligns them for the views).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

if TYPE_CHECKING:
    import pyarrow as pa

P2P = ("send", "recv")
CALL_COLUMNS = ["key", "op", "kind", "ts", "end", "dev_ts", "dev_end", "issue_ts", "pg", "seq"]


def calls(table: "pa.Table", rank: int) -> pl.DataFrame:
    """One row per communication call of ``rank``: ``key`` (the same string on every rank taking
    part), ``op``, ``kind`` ("collective" | "p2p"), host span ``ts``/``end``, device span
    ``dev_ts``/``dev_end`` (-1: none), ``issue_ts`` (-1: unknown), ``pg`` and ``seq`` (the number
    shown: sequence or order in the group)."""
    return _from_collectives(table, rank)


def _from_collectives(table: "pa.Table", rank: int) -> pl.DataFrame:
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    if df.height == 0:
        return pl.DataFrame(schema={"key": pl.String, "op": pl.String, "kind": pl.String, "ts": pl.Int64,
                                    "end": pl.Int64, "dev_ts": pl.Int64, "dev_end": pl.Int64, "issue_ts": pl.Int64,
                                    "pg": pl.String, "seq": pl.Int64})
    cols = set(df.columns)
    df = df.with_columns(pl.col("op").cast(pl.String), pl.col("pg_name").cast(pl.String).alias("pg"),
                         pl.col("pg_ranks").cast(pl.String),
                         *[(pl.col(c) if c in cols else pl.lit(-1, pl.Int64)).alias(c) for c in ("peer", "issue_ts")])
    from rankscope.model.comms import UNKNOWN_PG

    p2p = pl.col("op").is_in(P2P)
    members = pl.col("pg_ranks").str.strip_chars("[] ").str.split(",")
    other = members.list.eval(pl.element().str.strip_chars().cast(pl.Int64, strict=False)).list.set_difference([rank])
    df = df.with_columns(  # a send / receive in a group of two whose peer the trace does not name: the other member
        peer=pl.when(p2p & (pl.col("peer") < 0) & (members.list.len() == 2) & (other.list.len() == 1))
        .then(other.list.first()).otherwise(pl.col("peer")))
    group = ["pg", "pg_ranks"]
    by_seq = ((pl.col("seq") >= 0) & ~p2p).any().over(group)
    df = df.sort("ts").with_columns(p2p=p2p, by_seq=by_seq)
    df = df.with_columns(  # order within the group, over the calls that are matched by order
        order=pl.int_range(pl.len()).over([*group, pl.col("p2p"), pl.col("seq") >= 0]).cast(pl.Int64),
        unmatched=~pl.col("p2p") & ((pl.col("pg") == UNKNOWN_PG) | (pl.col("by_seq") & (pl.col("seq") < 0))))
    sender = pl.when(pl.col("op") == "send").then(pl.lit(rank)).otherwise(pl.col("peer"))
    receiver = pl.when(pl.col("op") == "send").then(pl.col("peer")).otherwise(pl.lit(rank))
    pair_order = pl.int_range(pl.len()).over([sender, receiver]).cast(pl.Int64)
    coll_seq = pl.when(pl.col("by_seq")).then(pl.col("seq")).otherwise(pl.col("order"))
    dev = pl.col("dev_ts") >= 0
    out = df.with_columns(
        kind=pl.when(pl.col("p2p")).then(pl.lit("p2p")).otherwise(pl.lit("collective")),
        seq=pl.when(pl.col("p2p")).then(pair_order).otherwise(coll_seq),
        key=pl.when(pl.col("p2p") & (pl.col("peer") >= 0))
        .then(pl.format("p2p:{}->{}#{}", sender, receiver, pair_order))
        .when(pl.col("p2p") | pl.col("unmatched")).then(pl.lit(None, pl.String))
        .otherwise(pl.format("{}|{}#{}", pl.col("pg"), pl.col("pg_ranks"), coll_seq)),
        end=pl.col("ts") + pl.col("dur"),
        dev_end=pl.when(dev).then(pl.col("dev_ts") + pl.col("dev_dur")).otherwise(-1),
        # a send / receive's "group" is its pair (the trace may not name its process group): "1->3"
        pg=pl.when(pl.col("p2p") & (pl.col("peer") >= 0)).then(pl.format("{}->{}", sender, receiver))
        .otherwise(pl.col("pg")))
    return out.select(CALL_COLUMNS)


@dataclass
class Calls:
    """``calls`` as numpy columns (per-step slices without a DataFrame engine in the loop)."""

    key: np.ndarray  # object: str or None
    op: np.ndarray  # object
    kind: np.ndarray  # object
    ts: np.ndarray
    end: np.ndarray
    dev_ts: np.ndarray
    dev_end: np.ndarray
    issue_ts: np.ndarray
    pg: np.ndarray  # object
    seq: np.ndarray

    @classmethod
    def of(cls, df: pl.DataFrame) -> "Calls":
        cols = {}
        for f in fields(cls):
            s = df[f.name]
            cols[f.name] = np.asarray(s.to_list(), dtype=object) if s.dtype == pl.String else \
                np.asarray(s.to_numpy(), dtype=np.int64)
        return cls(**cols)

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, sel: np.ndarray) -> "Calls":
        return Calls(**{f.name: getattr(self, f.name)[sel] for f in fields(self)})

    def rows(self) -> list[dict[str, Any]]:
        return [{"op": o, "kind": k, "pg": p, "seq": int(s)} for o, k, p, s in zip(self.op, self.kind, self.pg, self.seq)]


def unmatched_p2p(calls_df: pl.DataFrame) -> int:
    """Point-to-point calls that could not be keyed (no peer in the data)."""
    return int(calls_df.filter(pl.col("kind") == "p2p")["key"].null_count())


def instances(keys_by_rank: dict[int, list[Any]]) -> dict[Any, list[tuple[int, int]]]:
    """key -> [(rank, index of the call on that rank)] over all ranks (keys seen once are kept:
    a collective whose other members are not in this window has no edge to add)."""
    out: dict[Any, list[tuple[int, int]]] = {}
    for r, keys in keys_by_rank.items():
        for i, k in enumerate(keys):
            if k is not None:
                out.setdefault(k, []).append((r, i))
    return out


def as_int(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def joinable(keys: np.ndarray, rank: int, present: set[int]) -> np.ndarray:
    """Calls that another rank of the run takes part in (a group member or the p2p peer is present);
    a group whose members are unknown is joinable when the run has other ranks."""
    others = present - {rank}
    out = np.zeros(len(keys), bool)
    for i, k in enumerate(keys.tolist()):  # one per call of the rank
        if k is None or not others:
            continue
        if k.startswith("p2p:"):
            a, b = k[4:].split("#")[0].split("->")
            out[i] = bool({int(a), int(b)} & others)
        else:
            members = k.split("|", 1)[1].rsplit("#", 1)[0] if "|" in k else ""
            out[i] = not members or any(int(m) in others for m in members.split(",") if m.lstrip("-").isdigit())
    return out
