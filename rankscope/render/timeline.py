"""One merged multi-rank timeline: Perfetto protobuf (default) or Chrome trace JSON.

Layout: one process per rank named ``rank R · HOST`` (pid = R + 1, so that no rank lands on pid 0),
one thread track per host thread and per device stream, a ``collectives`` track carrying each
collective call, and a ``memory allocated`` counter. Clock alignment: each rank's timestamps are
shifted by ``-offset`` where ``offset`` is the rank's clock offset to rank 0 (``RankInfo.clock_offset_ns``:
how far the rank's clock is ahead of rank 0's), or the ``offsets`` given; the offsets used are
written into the output (Chrome JSON ``metadata``; Perfetto process names say ``clock −X µs``).
Matched collectives (the k-th call of the same process group on every rank) are linked by flow
events, in time order across ranks. ``steps`` and ``ranks`` filters keep the file small.

Example::

    from rankscope.render.timeline import write_timeline
    write_timeline(run, "merged.pftrace", steps=[3, 4], ranks=[0, 1])
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rankscope.analysis.base import frame
from rankscope.errors import RankscopeError
from rankscope.intlist import parse_int_list
from rankscope.render.tracks import DEVICE_KINDS, RPC_BASE, STREAM_BASE, coll_label, track_label

if TYPE_CHECKING:
    import polars as pl

def parse_ints(spec: str | None, what: str) -> list[int] | None:
    """'0-3,7' -> [0, 1, 2, 3, 7]; None or '' -> None (no filter)."""
    if not spec or not spec.strip():
        return None
    try:
        return parse_int_list(spec)
    except ValueError as exc:
        raise RankscopeError(f"{what} {exc}") from exc


def aligned_offsets(run: Any) -> Any:
    """The clock alignment the clock analysis computes (offsets refined with matched collectives,
    and drifts where significant): a ``ClockAlignment``, accepted wherever ``offsets`` are."""
    from rankscope.analysis.clock.alignment import align

    return align(run)


def _window(run: Any, rank: int, steps: set[int] | None) -> tuple[int, int] | None:
    if not steps:
        return None
    st = run.table(rank, "steps").to_pylist()
    sel = [s for s in st if s["step"] in steps]
    if not sel:
        return (0, -1)
    return min(s["ts"] for s in sel), max(s["end"] for s in sel)


def _in_window(df: Any, win: tuple[int, int] | None, end_col: str | None = "dur") -> Any:
    import polars as pl

    if win is None:
        return df
    end = pl.col("ts") + pl.col(end_col) if end_col else pl.col("ts")
    return df.filter((end >= win[0]) & (pl.col("ts") <= win[1]))




def rank_frames(run: Any, rank: int, al: Any, steps: set[int] | None) -> dict[str, Any]:
    """Slices, collectives and memory of one rank, clock-aligned with ``al`` (a ``ClockAlignment``:
    ts minus the rank's offset, and its drift where one is applied), inside the selected steps."""
    import polars as pl

    def aligned(ts: Any) -> Any:
        return ts - al.rank_correction_expr(rank, ts)

    win = _window(run, rank, steps)
    ev = frame(run.table(rank, "events", columns=["name", "kind", "ts", "dur", "tid", "stream"]))
    ev = _in_window(ev.with_columns(pl.col("name").cast(pl.Utf8), pl.col("kind").cast(pl.Utf8)), win)
    track = pl.when(pl.col("kind").is_in(DEVICE_KINDS)).then(STREAM_BASE + pl.col("stream").clip(0)) \
        .otherwise(pl.col("tid"))
    ev = ev.select("name", aligned(pl.col("ts")).alias("ts"), "dur", track.alias("track"))
    co = frame(run.table(rank, "collectives", columns=["op", "name", "ts", "dur", "pg_name", "pg_ranks", "seq",
                                                        "bytes_in"]))
    co = _in_window(co.with_columns(pl.col(c).cast(pl.Utf8) for c in ("op", "name", "pg_name", "pg_ranks")), win)
    # matched across ranks by (group, sequence) where the trace or the recorder gives one, else by order
    seq = pl.col("seq") >= 0
    co = co.sort("ts").with_columns(aligned(pl.col("ts")).alias("ts"), rank=pl.lit(rank),
                                    k=pl.when(seq).then(pl.col("seq")).otherwise(pl.int_range(pl.len()).over("pg_ranks")),
                                    name=pl.when(seq).then(pl.format("{} · group {} #{} · {}", "name", "pg_name", "seq",
                                                                     _size(pl.col("bytes_in"))))
                                    .otherwise(pl.col("name")))
    # Calls on one track must not overlap, or begin/end pairs would cross: overlapping calls (DDP's
    # buckets in flight together) go to further lanes, each kept whole.
    co = co.with_columns(lane=pl.Series("lane", lanes(co["ts"].to_numpy(), co["dur"].to_numpy()), pl.Int32))
    mem = frame(run.table(rank, "memory", columns=["ts", "total_allocated"]))
    mem = _in_window(mem, win, None).with_columns(aligned(pl.col("ts")))
    from rankscope.analysis.gpu.counters import rank_counters

    cnt = _in_window(rank_counters(run, rank), win, None).with_columns(aligned(pl.col("ts")))
    rem, names = remote_events(run, rank, win)
    if rem.height:
        rem = rem.with_columns(aligned(pl.col("ts")).alias("ts"))
        ev = pl.concat([ev, rem.cast(ev.schema)])  # type: ignore[arg-type]
    return {"events": ev, "collectives": co, "memory": mem, "remote": names, "counters": cnt}


def remote_events(run: Any, rank: int, win: tuple[int, int] | None) -> tuple[Any, dict[int, str]]:
    """The events remote workers ran for this rank's RPC calls (``ranks/<r>/rpc.*.json.gz``), on the
    rank's own clock already (each call's offset applied when it was recorded), one track per worker."""
    import polars as pl

    calls = _rpc_calls(run).get(rank, [])
    from rankscope.model.readers.rpcfiles import tables

    ev = tables(calls)[1].filter(pl.col("name") != "[memory]")
    ev = _in_window(ev, win)
    names = {RPC_BASE + int(w): f"remote {n} (RPC, id {w})" for w, n in
             ev.select("worker_id", "worker").unique().iter_rows()}
    return ev.select("name", "ts", "dur", (RPC_BASE + pl.col("worker_id")).alias("track")), names


def _rpc_calls(run: Any) -> dict[int, list[dict[str, Any]]]:
    """RPC call records of the run by rank (read once per Run object)."""
    got = getattr(run, "_rpc_calls", None)
    if got is None:
        from rankscope.model.readers.rpcfiles import load

        got = {}
        for c in load(str(run.path))[0]:
            got.setdefault(c.get("rank"), []).append(c)
        try:
            run._rpc_calls = got
        except AttributeError:  # a frozen or slotted Run: read again next time
            pass
    return got


def _size(b: Any) -> Any:
    """Bytes as "1.5 MiB" / "64 KiB" / "16 B" (a polars expression); "?" when unknown."""
    import polars as pl

    return (pl.when(b < 0).then(pl.lit("?"))
            .when(b >= 1 << 20).then(pl.format("{} MiB", (b / 2**20).round(1)))
            .when(b >= 1 << 10).then(pl.format("{} KiB", (b / 2**10).round(1)))
            .otherwise(pl.format("{} B", b)))


def lanes(ts: Any, dur: Any) -> Any:
    """Greedy interval packing of slices sorted by start: each goes to the lowest lane free at its start
    (a slice that starts exactly when another ends shares its lane). Lane 0 holds the most."""
    import heapq

    out = np.zeros(len(ts), dtype=np.int32)
    free: list[int] = []  # lanes whose last slice has ended
    busy: list[tuple[int, int]] = []  # (end, lane)
    n_lanes = 0
    for i in range(len(ts)):
        t = int(ts[i])
        while busy and busy[0][0] <= t:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        out[i] = lane
        heapq.heappush(busy, (t + max(int(dur[i]), 0), lane))
    return out


def flows(colls: list[Any]) -> Any:
    """flow id per (rank, pg_ranks, k) for calls matched on at least two ranks; the latest call ends the flow."""
    import polars as pl

    allc = pl.concat([c.select("rank", "pg_ranks", "k", "ts") for c in colls if c.height]) if any(
        c.height for c in colls) else pl.DataFrame(schema={"rank": pl.Int32, "pg_ranks": pl.Utf8, "k": pl.Int64,
                                                           "ts": pl.Int64})
    allc = allc.with_columns(n=pl.len().over("pg_ranks", "k")).filter(pl.col("n") > 1)
    allc = allc.with_columns(flow=pl.struct("pg_ranks", "k").rank("dense").cast(pl.Int64),
                             last=pl.col("ts").rank("ordinal", descending=True).over("pg_ranks", "k") == 1)
    return allc.select("rank", "pg_ranks", "k", "flow", "last")


def collect(run: Any, *, ranks: list[int] | None = None, steps: list[int] | None = None,
            offsets: Any = None) -> dict[str, Any]:
    """Per-rank frames of the selection plus matched flows and the offsets used. ``offsets``: a
    ``ClockAlignment`` (drifts applied too), a rank -> offset dict, or None (collection anchors)."""
    chosen = run.rank_ids if not ranks else [r for r in run.rank_ids if r in set(ranks)]
    if not chosen:
        raise RankscopeError(f"--ranks {ranks}: none of these ranks is in {run.path} (ranks: {run.rank_ids})")
    from rankscope.analysis.clock.alignment import ClockAlignment

    drifts: dict[int, float] = dict(getattr(offsets, "applied_drift_ppm", {}) or {})
    table = getattr(offsets, "offset_ns", offsets) or {}
    used = {r: int(table.get(r, run.ranks[r].clock_offset_ns or 0)) for r in chosen}
    al = ClockAlignment(ref=chosen[0], offset_ns=used, applied_drift_ppm=drifts,
                        t_ref_ns=int(getattr(offsets, "t_ref_ns", 0) or 0))
    frames = {r: rank_frames(run, r, al, set(steps) if steps else None) for r in chosen}
    if steps and all(f["events"].height == 0 for f in frames.values()):
        raise RankscopeError(f"--steps {steps}: no events in these steps in {run.path}")
    fl = flows([f["collectives"] for f in frames.values()])
    for r, f in frames.items():
        f["collectives"] = f["collectives"].join(fl.drop("rank").filter(fl["rank"] == r) if fl.height else
                                                 fl.drop("rank"), on=["pg_ranks", "k"], how="left")
    return {"frames": frames, "offsets": used, "drift_ppm": {r: drifts[r] for r in chosen if drifts.get(r)},
            "names": {r: _proc_name(run, r, used[r], drifts.get(r, 0.0)) for r in chosen}}


def _proc_name(run: Any, rank: int, offset: int, drift_ppm: float = 0.0) -> str:
    host = run.ranks[rank].host or "?"
    return (f"rank {rank} · {host}" + (f" · clock {-offset / 1e3:+.1f} µs" if offset else "")
            + (f" {-drift_ppm:+.1f} ppm" if drift_ppm else ""))


def write_timeline(run: Any, out: str | Path, *, fmt: str | None = None, ranks: list[int] | None = None,
                   steps: list[int] | None = None, offsets: Any = None) -> Path:
    """Write the merged timeline; ``fmt`` is "perfetto" or "json" (default: from the extension)."""
    p = Path(out)
    fmt = fmt or ("json" if p.name.endswith((".json", ".json.gz")) else "perfetto")
    sel = collect(run, ranks=ranks, steps=steps, offsets=offsets)
    if fmt == "json":
        from rankscope.render.timeline_json import chrome_json

        data = chrome_json(sel, run.run_id).encode()
        if p.name.endswith(".gz"):
            import gzip

            data = gzip.compress(data, 6)
    elif fmt == "perfetto":
        data = perfetto_bytes(sel)
    else:
        raise RankscopeError(f"--format {fmt}: unknown timeline format (use perfetto or json)")
    p.write_bytes(data)
    return p


def perfetto_bytes(sel: dict[str, Any]) -> bytes:
    """The selection as a Perfetto ``Trace`` protobuf."""
    import polars as pl

    from rankscope.render import pftrace as pf

    frames = sel["frames"]
    names = pl.concat([pl.concat([f["events"]["name"], f["collectives"]["name"]]) for f in frames.values()]).unique()
    names = sorted(names.to_list())
    iid = pl.DataFrame({"name": names, "iid": np.arange(1, len(names) + 1, dtype=np.int64)})
    head = [pf.interned_names(names)]
    rows = []
    for r, f in frames.items():
        proc = (r + 1) << 32
        head.append(pf.process_track(proc, r + 1, sel["names"][r]))
        ev = f["events"]
        tracks = sorted(ev["track"].unique().to_list())
        tmap = {t: proc | (i + 2) for i, t in enumerate(tracks)}
        for t, u in tmap.items():
            label = track_label(t, f.get("remote"))
            tid = int(t) if 0 <= t < (1 << 31) - 4096 else (1 << 31) - 2 - tracks.index(t)
            head.append(pf.thread_track(u, proc, r + 1, tid, label))
        co_lanes = sorted(set(f["collectives"]["lane"].to_list()) | {0})
        for lane in co_lanes:
            head.append(pf.thread_track(coll_uuid(proc, lane), proc, r + 1, (1 << 31) - 1 - 4096 * lane,
                                        coll_label(lane)))
        head.append(pf.counter_track(proc | (1 << 31), proc, "memory allocated"))
        tm = pl.DataFrame({"track": tracks, "uuid": [tmap[t] for t in tracks]},
                          schema={"track": ev.schema["track"], "uuid": pl.UInt64})
        ev = ev.join(tm, on="track").with_columns(flow=pl.lit(-1, pl.Int64), last=pl.lit(False))
        co = f["collectives"].with_columns(uuid=pl.when(pl.col("lane") == 0).then(pl.lit(proc | 1, pl.UInt64))
                                           .otherwise(pl.lit(proc | (1 << 30), pl.UInt64)
                                                      + pl.col("lane").cast(pl.UInt64)), flow=pl.col("flow").fill_null(-1),
                                           last=pl.col("last").fill_null(False))
        cols = ["name", "ts", "dur", "uuid", "flow", "last"]
        rows.append(pl.concat([ev.select(cols), co.select(cols)]))
        mem = f["memory"]
        rows.append(pl.DataFrame({"name": None, "ts": mem["ts"], "dur": -1, "uuid": proc | (1 << 31),
                                  "flow": -1, "last": False, "value": mem["total_allocated"]},
                                 schema_overrides={"name": pl.Utf8, "uuid": pl.UInt64}))
        rows += counter_rows(f.get("counters"), proc, head)
    allr = pl.concat(rows, how="diagonal_relaxed").join(iid, on="name", how="left").with_columns(pl.col("iid").fill_null(0))
    if "dvalue" not in allr.columns:
        allr = allr.with_columns(dvalue=pl.lit(None, pl.Float64))
    return b"".join(head) + _encode_rows(allr)


def counter_rows(cnt: Any, proc: int, head: list[bytes]) -> list[Any]:
    """The GPU counter series of one rank (analysis/gpu/counters.py) as counter tracks (queue length per
    stream, memory bandwidth per copy kind): a track descriptor each into ``head``, rows returned."""
    import polars as pl

    from rankscope.render import pftrace as pf

    if cnt is None or not cnt.height:
        return []
    names = sorted(cnt["name"].unique().to_list())
    units = dict(cnt.select("name", "unit").unique("name").iter_rows())
    uu = {n: proc | (1 << 31) | (i + 1) for i, n in enumerate(names)}
    head += [pf.counter_track(uu[n], proc, n, 2 if units[n] == "count" else 0) for n in names]
    m = pl.DataFrame({"name": names, "uuid": [uu[n] for n in names]}, schema={"name": pl.Utf8, "uuid": pl.UInt64})
    c = cnt.join(m, on="name")
    return [c.select(pl.lit(None, pl.Utf8).alias("name"), "ts", pl.lit(-1).alias("dur"), "uuid",
                     pl.lit(-1, pl.Int64).alias("flow"), pl.lit(False).alias("last"), pl.lit(0).alias("value"),
                     pl.col("value").alias("dvalue"))]


def coll_uuid(proc: int, lane: int) -> int:
    """Track uuid of a rank's collectives lane (lane 0 keeps ``proc | 1``)."""
    return proc | 1 if lane == 0 else proc | (1 << 30) | lane


def _encode_rows(df: Any) -> bytes:
    """Begin/end packets for slices (dur >= 0) and counter packets (dur < 0), in per-track nesting order."""
    import polars as pl

    from rankscope.render import pftrace as pf

    # A zero-length slice lasts 1 ns, so that its end sorts after its begin.
    sl = df.filter(pl.col("dur") >= 0).with_columns(pl.col("dur").clip(1))
    begin = sl.with_columns(typ=pl.lit(pf.TYPE_BEGIN), o1=pl.lit(1), o2=-pl.col("dur"))
    end = sl.with_columns(typ=pl.lit(pf.TYPE_END), o2=-pl.col("ts"), ts=pl.col("ts") + pl.col("dur"),
                          o1=pl.lit(0), iid=pl.lit(0, pl.Int64), flow=pl.lit(-1, pl.Int64))
    cnt = df.filter(pl.col("dur") < 0).with_columns(typ=pl.lit(pf.TYPE_COUNTER), o1=pl.lit(2), o2=pl.lit(0))
    cols = ["ts", "typ", "uuid", "iid", "flow", "last", "value", "dvalue", "o1", "o2"]
    allp = pl.concat([x.select([c for c in cols if c in x.columns]) for x in (begin, end, cnt)], how="diagonal_relaxed")
    allp = allp.with_columns(pl.col("value").fill_null(0)).sort("uuid", "ts", "o1", "o2")
    return pf.track_events(allp["ts"].to_numpy(), allp["typ"].to_numpy(), allp["uuid"].to_numpy(),
                           allp["iid"].to_numpy(), allp["flow"].to_numpy(), allp["last"].to_numpy(),
                           allp["value"].to_numpy(), allp["dvalue"].fill_null(float("nan")).to_numpy())
