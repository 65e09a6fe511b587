"""Clock alignment from hand-made matched collectives: known offsets, outliers, anchors, switch-off."""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.clock.alignment import align
from rankscope.model.info import RankInfo
from rankscope.model.run import Run

T0 = 1_767_225_600_000_000_000


def _matched(offsets: dict[int, int], groups: dict[str, list[int]], n: int = 40, outliers: bool = True,
             seed: int = 0, drift_ppm: dict[int, float] | None = None, every_ns: int = 1_000_000) -> pl.DataFrame:
    """Collectives whose true ends coincide (± 30 µs jitter), seen on each rank's own clock (which
    may run ``drift_ppm`` fast: local = true + offset + ppm * 1e-6 * (true - T0))."""
    rng = np.random.default_rng(seed)
    rows = []
    for g, (name, ranks) in enumerate(groups.items()):
        for k in range(n):
            end_true = T0 + (k * every_ns) + g * 137_000
            for r in ranks:
                end = end_true + offsets[r] + int(rng.normal(0, 30_000))
                end += int((drift_ppm or {}).get(r, 0.0) * 1e-6 * (end_true - T0))
                if outliers and k % 9 == r % 9:
                    end += int(rng.choice([-9_000_000, 9_000_000]))  # gloo: single pairs ±9 ms apart
                rows.append({"pg_name": name, "pg_ranks": ",".join(map(str, ranks)), "instance": k,
                             "op": "all_reduce", "rank": r, "ts": end - 50_000, "end": end, "dur": 50_000,
                             "dev_ts": -1, "dev_end": -1, "bytes": 1 << 20})
    return pl.DataFrame(rows)


def _run(ranks: list[int], anchors: dict[int, int] | None = None) -> Run:
    infos = {r: RankInfo(rank=r, clock_offset_ns=(anchors or {}).get(r)) for r in ranks}
    return Run(path="mem", run_id="t", ranks=infos, world_size=len(ranks))


def test_offsets_recovered_despite_outliers():
    offs = {0: 0, 1: 250_000_000, 2: -480_000_000, 3: 3_000_000}
    groups = {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}  # no world group: solved through edges
    al = align(_run([0, 1, 2, 3]), _matched(offs, groups), enabled=True)
    for r, o in offs.items():
        assert abs(al.offset_ns[r] - o) < 20_000, (r, al.offset_ns[r], o)
    assert all(al.residual_ns[r] < 60_000 for r in offs) and al.source[3] == "collectives"
    shifted = al.shift(1, np.array([T0 + 250_000_000]))
    assert abs(int(shifted[0]) - T0) < 20_000


def test_anchors_are_refined_and_switch_off_gives_zeros():
    offs = {0: 0, 1: 1_000_000, 2: 2_000_000}
    m = _matched(offs, {"0": [0, 1, 2]}, outliers=False)
    al = align(_run([0, 1, 2], anchors={1: 900_000, 2: 2_200_000}), m, enabled=True)
    assert abs(al.offset_ns[1] - 1_000_000) < 20_000 and al.source[1] == "anchors+collectives"
    off = align(_run([0, 1, 2]), m, enabled=False)
    assert off.offset_ns == {0: 0, 1: 0, 2: 0} and not off.enabled and off.source[2] == "off"


def test_anchors_only_when_no_collectives():
    empty = _matched({0: 0, 1: 0}, {"0": [0, 1]}).head(0)
    al = align(_run([0, 1], anchors={0: 0, 1: 42}), empty, enabled=True)
    assert al.offset_ns == {0: 0, 1: 42}


def test_environment_switch_and_registered_result(monkeypatch):
    from rankscope.analysis.clock.alignment import alignment_from
    from rankscope.analysis.base import Result

    m = _matched({0: 0, 1: 5_000_000}, {"0": [0, 1]}, outliers=False)
    monkeypatch.setenv("RANKSCOPE_CLOCK_ALIGN", "0")
    assert not align(_run([0, 1]), m).enabled
    monkeypatch.delenv("RANKSCOPE_CLOCK_ALIGN")
    al = align(_run([0, 1]), m)
    assert al.enabled and abs(al.offset_ns[1] - 5_000_000) < 20_000
    frame = al.to_frame()
    assert frame.columns == ["rank", "offset_ns", "residual_ns", "drift_ppm", "drift_applied", "samples", "source"]
    res = Result("clock", summary={"offsets_ns": {"0": 0, "1": 5}, "drift_applied_ppm": {"1": 2.5},
                                   "t_ref_ns": 7})
    got = alignment_from({"clock": res})
    assert got is not None and got.offset_ns == {0: 0, 1: 5} and got.applied_drift_ppm == {1: 2.5}
    assert got.t_ref_ns == 7 and alignment_from({}) is None


def test_drift_over_a_long_window_is_estimated_and_applied():
    # 30 s window (120 collectives, 250 ms apart); rank 1's clock runs 20 ppm fast: ±300 µs at the ends
    m = _matched({0: 0, 1: 3_000_000, 2: -1_000_000}, {"0": [0, 1, 2]}, n=120, every_ns=250_000_000,
                 drift_ppm={1: 20.0})
    al = align(_run([0, 1, 2]), m, enabled=True)
    assert abs(al.applied_drift_ppm[1] - 20.0) < 2.0 and 2 not in al.applied_drift_ppm
    for true in (T0, T0 + 15_000_000_000, T0 + 29_750_000_000):
        local = true + 3_000_000 + int(20e-6 * (true - T0))
        assert abs(int(al.shift(1, np.array([local]))[0]) - true) < 50_000  # within 50 µs everywhere
        assert abs(int(al.shift(2, np.array([true - 1_000_000]))[0]) - true) < 50_000
    # a constant offset alone is off by ~300 µs at the window's ends
    assert abs((T0 + 3_000_000) - al.offset_ns[1] - T0) > 250_000
    # the polars expression gives the same correction as the numpy one
    ts = pl.Series("ts", [T0, T0 + 29_750_000_000])
    expr = pl.DataFrame({"rank": [1, 1], "ts": ts}).select(al.correction_expr(pl.col("ts")))
    assert expr.to_series().to_list() == [int(al.correction(1, t)) for t in ts.to_list()]


def test_no_drift_applied_to_noise():
    m = _matched({0: 0, 1: 3_000_000}, {"0": [0, 1]}, n=120, every_ns=250_000_000)  # outliers, no drift
    al = align(_run([0, 1]), m, enabled=True)
    assert al.applied_drift_ppm == {} and abs(al.drift_ppm[1]) < 2.0
