"""Point-to-point transfers paired across ranks: the k-th send from a to b is the k-th receive on b from a.

Pattern: a pair of ranks delivers its messages in order (NCCL and gloo match a pair's sends and receives
in posting order), so sends and receives are paired per (sender, receiver) by their order on each side,
never by a group's sequence (each rank numbers its own point-to-point ops) and never as a group
collective. ``pair_in_order`` is that rule on any items (``rankscope hang`` applies it to recorder
entries). Here it runs on the trace's calls: every ``send`` / ``recv`` row of the ranks' ``collectives``
tables whose peer is known (``model/comm_issue``), ordered by when the rank posted it.

A profiling window that starts or ends inside a pair's traffic can cut a message on one side only; then
every later pair would be off by one. Per (sender, receiver), the lists are therefore aligned by dropping
up to ``MAX_SHIFT`` leading items on one side where that makes strictly more pairs agree (same bytes and,
when clocks are given, a receive that ends after its send started). Unpaired sends and receives stay in
the table with the other side empty: every send and receive of the trace is counted.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping, Sequence, TypeVar

if TYPE_CHECKING:
    import polars as pl

    from rankscope.model.run import Run

T = TypeVar("T")
MAX_SHIFT = 2
TOLERANCE_NS = 50_000  # a receive may appear to end this much before its send started, plus the clocks' error
COLUMNS = ["sender", "receiver", "k", "bytes", "recv_bytes", "send_start", "send_end", "recv_start", "recv_end",
           "paired"]


def pair_in_order(sends: Mapping[tuple[int, int], Sequence[T]], recvs: Mapping[tuple[int, int], Sequence[T]]
                  ) -> Iterator[tuple[int, int, int, T | None, T | None]]:
    """``(sender, receiver, k, send, receive)`` for every k of every pair: the k-th send from a to b with
    the k-th receive on b from a (keys are (sender, receiver)); None on the side that has fewer.

    >>> list(pair_in_order({(0, 1): ["s0", "s1"]}, {(0, 1): ["r0"]}))
    [(0, 1, 0, 's0', 'r0'), (0, 1, 1, 's1', None)]
    """
    for src, dst in sorted(set(sends) | set(recvs)):
        a, b = sends.get((src, dst), ()), recvs.get((src, dst), ())
        for k in range(max(len(a), len(b))):
            yield src, dst, k, a[k] if k < len(a) else None, b[k] if k < len(b) else None


def _calls(run: Run, offsets: Mapping[int, int] | None) -> pl.DataFrame:
    """Every send / recv of every rank with a known peer: rank, op, peer, bytes, start (posted), end."""
    import polars as pl

    from rankscope.analysis.base import frame

    cols = ["op", "ts", "dur", "issue_ts", "peer", "bytes_in", "bytes_out"]
    parts = []
    for r in run.rank_ids:
        try:
            t = run.table(r, "collectives", columns=cols)
        except (KeyError, ValueError):  # a cache without the columns (never written by this version)
            continue
        if t.num_rows == 0:
            continue
        off = int((offsets or {}).get(r, 0))
        parts.append(frame(t).with_columns(pl.col("op").cast(pl.Utf8)).filter(
            pl.col("op").is_in(["send", "recv"]) & (pl.col("peer").fill_null(-1) >= 0)).select(
            rank=pl.lit(r, pl.Int64), op="op", peer="peer",
            bytes=pl.max_horizontal("bytes_in", "bytes_out"),
            start=pl.when(pl.col("issue_ts") >= 0).then(pl.min_horizontal("issue_ts", "ts")).otherwise("ts") - off,
            end=pl.col("ts") + pl.col("dur") - off))
    if not parts:
        return pl.DataFrame(schema={"rank": pl.Int64, "op": pl.Utf8, "peer": pl.Int64, "bytes": pl.Int64,
                                    "start": pl.Int64, "end": pl.Int64})
    return pl.concat(parts).sort("rank", "start")


def _agree(a: Sequence[tuple[int, int, int]], b: Sequence[tuple[int, int, int]], shift: int, tol: int | None) -> int:
    """How many pairs agree when b is shifted by ``shift`` against a (items: bytes, start, end); ``tol``:
    how early a receive may seem to end before its send started (None: times not compared)."""
    n = 0
    for k in range(len(a)):
        j = k + shift
        if 0 <= j < len(b) and a[k][0] == b[j][0] and (tol is None or b[j][2] + tol >= a[k][1]):
            n += 1
    return n


def _aligned(a: list[T], b: list[T], key: Sequence[tuple[int, int, int]], kb: Sequence[tuple[int, int, int]],
             tol: int | None) -> tuple[list[T | None], list[T | None]]:
    """The two lists with up to MAX_SHIFT leading items of one side unpaired, where that pairs strictly more."""
    best, score = 0, _agree(key, kb, 0, tol)
    for s in [x for d in range(1, MAX_SHIFT + 1) for x in (d, -d)]:
        got = _agree(key, kb, s, tol)
        if got > score:
            best, score = s, got
    if best > 0:  # receives b[0:best] have no send in the window
        return [None] * best + list(a), list(b)
    if best < 0:
        return list(a), [None] * -best + list(b)
    return list(a), list(b)


def p2p_pairs(run: Run, offsets: Mapping[int, int] | None = None) -> pl.DataFrame:
    """One row per point-to-point transfer (see the module docstring): sender, receiver, k (its order in
    the pair), bytes sent and the receive buffer's bytes, send start (posted) / end (its wait returned) on
    the sender's clock and receive start / end on the receiver's, each minus ``offsets`` (rank -> ns) when
    given; ``paired`` is False for a send or receive whose other side is not in the trace (its times -1)."""
    import polars as pl

    calls = _calls(run, offsets)
    sends: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    recvs: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for rank, op, peer, nbytes, start, end in calls.select("rank", "op", "peer", "bytes", "start", "end").iter_rows():
        side = sends if op == "send" else recvs
        side.setdefault((rank, peer) if op == "send" else (peer, rank), []).append((nbytes, start, end))
    # times are compared only on aligned clocks, as loosely as the clocks are known (anchors' error bounds)
    err = max((abs(i.clock_error_ns or 0) for i in run.ranks.values()), default=0)
    tol = TOLERANCE_NS + 2 * err if offsets is not None else None
    for pair in set(sends) & set(recvs):
        sends[pair], recvs[pair] = _aligned(sends[pair], recvs[pair], sends[pair], recvs[pair], tol)  # type: ignore[assignment]
    rows = []
    gone = (-1, -1, -1)
    for src, dst, _, s, r in pair_in_order(sends, recvs):
        if s is None and r is None:
            continue
        a, b = s or gone, r or gone
        rows.append((src, dst, a[0] if s is not None else b[0], b[0], a[1], a[2], b[1], b[2],
                     s is not None and r is not None))
    if not rows:
        return pl.DataFrame(schema={c: (pl.Boolean if c == "paired" else pl.Int64) for c in COLUMNS})
    df = pl.DataFrame(rows, schema=[(c, pl.Boolean if c == "paired" else pl.Int64) for c in COLUMNS if c != "k"],
                      orient="row")
    return df.with_columns(k=pl.int_range(pl.len()).over("sender", "receiver").cast(pl.Int64)).select(COLUMNS)
