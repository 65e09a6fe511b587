"""Clock alignment from hand-made matched collectives: known offsets, outliers, anchors, switch-off."""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.clock.alignment import align, findings
from rankscope.model.info import RankInfo
from rankscope.model.run import Run

T0 = 1_767_225_600_000_000_000


def _matched(offsets: dict[int, int], groups: dict[str, list[int]], n: int = 40, outliers: bool = True,
             seed: int = 0, drift_ppm: dict[int, float] | None = None, every_ns: int = 1_000_000,
             dur: int = 50_000) -> pl.DataFrame:
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
                             "op": "all_reduce", "rank": r, "ts": end - dur, "end": end, "dur": dur,
                             "dev_ts": -1, "dev_end": -1, "bytes": 1 << 20})
    return pl.DataFrame(rows)


def _run(ranks: list[int], anchors: dict[int, int] | None = None, errors: dict[int, int] | None = None,
         hosts: dict[int, str] | None = None) -> Run:
    infos = {r: RankInfo(rank=r, clock_offset_ns=(anchors or {}).get(r), clock_error_ns=(errors or {}).get(r),
                         host=(hosts or {}).get(r)) for r in ranks}
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


def test_anchors_are_refined_within_their_error_and_switch_off_gives_zeros():
    offs = {0: 0, 1: 1_000_000, 2: 2_000_000}
    m = _matched(offs, {"0": [0, 1, 2]}, outliers=False)
    # anchors off by -100 / +200 µs, measured with ±150 µs: the collectives refine them, inside that error
    al = align(_run([0, 1, 2], anchors={1: 900_000, 2: 2_200_000}, errors={1: 150_000, 2: 150_000}), m, enabled=True)
    assert abs(al.offset_ns[1] - 1_000_000) < 20_000 and al.source[1] == "anchors refined by collectives"
    assert al.offset_ns[2] == 2_200_000 - 150_000  # the estimate (2 ms) held at the edge of the anchors' window
    assert not (al.rejected or al.contradicted or al.weak)
    assert [(f.kind, f.severity.value) for f in findings(al)] == [("clock_skew", "info")]
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


def _kinds(al) -> dict[str, str]:
    return {f.kind: f.severity.value for f in findings(al)}


def test_one_host_keeps_its_anchors_over_false_matches():
    """The pipeline job of issue 25: one host, anchors within 701 ns; matches that were not the same call
    put ranks 1 and 2 at +1,174 ms and -448 ms with a huge drift. The anchors stay, within their error,
    and that is a warning, not info."""
    wrong = {0: 0, 1: 1_174_000_000, 2: -448_000_000}
    m = _matched(wrong, {"0": [0, 1, 2]}, n=60, every_ns=20_000_000, outliers=False, drift_ppm={1: 651_197.0})
    hosts = {0: "node-0", 1: "node-0", 2: "node-0"}
    al = align(_run([0, 1, 2], anchors={0: 0, 1: 701, 2: -300}, errors={1: 40_000, 2: 40_000}, hosts=hosts),
               m, enabled=True)
    assert abs(al.offset_ns[1] - 701) <= 40_000 and abs(al.offset_ns[2] + 300) <= 40_000
    assert al.applied_drift_ppm == {} and al.source[1].startswith("anchors (same host)")
    assert _kinds(al) == {"clock_estimate_rejected": "warning", "clock_drift_rejected": "warning"}


def test_another_hosts_clock_that_moved_is_aligned_from_the_collectives_with_a_warning():
    """Rank 1 on another host, whose clock was stepped by 250 ms after the anchors said 0: with the anchors,
    rank 1 would finish collectives before rank 0 started them, so causality overrules them."""
    m = _matched({0: 0, 1: 250_000_000}, {"0": [0, 1]}, outliers=False, dur=2_000_000)  # spans overlap
    al = align(_run([0, 1], anchors={0: 0, 1: 0}, errors={1: 100_000}, hosts={0: "node-0", 1: "node-1"}), m,
               enabled=True)
    assert abs(al.offset_ns[1] - 250_000_000) < 20_000 and al.source[1] == "collectives (anchors contradicted)"
    assert _kinds(al) == {"clock_anchors_contradicted": "warning"}
    # on one host the same trace cannot be right: the anchors stay and the estimate is said to be rejected
    one = align(_run([0, 1], anchors={0: 0, 1: 0}, errors={1: 100_000}, hosts={0: "node-0", 1: "node-0"}), m,
                enabled=True)
    assert abs(one.offset_ns[1]) <= 100_000 and _kinds(one) == {"clock_estimate_rejected": "warning"}


def test_offsets_without_anchors_stay_inside_what_causality_allows():
    """No anchors: a rank whose collectives end a median 3 ms after rank 0's but which started each one
    before rank 0 finished it cannot be 3 ms ahead: the offset is held inside the causal bounds."""
    rows = []
    for k in range(20):
        t = T0 + k * 10_000_000
        rows += [{"pg_name": "0", "pg_ranks": "0,1", "instance": k, "op": "all_reduce", "rank": 0, "ts": t,
                  "end": t + 1_000_000, "dur": 1_000_000, "dev_ts": -1, "dev_end": -1, "bytes": 4},
                 {"pg_name": "0", "pg_ranks": "0,1", "instance": k, "op": "all_reduce", "rank": 1, "ts": t + 500_000,
                  "end": t + 4_000_000, "dur": 3_500_000, "dev_ts": -1, "dev_end": -1, "bytes": 4}]
    al = align(_run([0, 1]), pl.DataFrame(rows), enabled=True)
    # rank 1 ended 4 ms after rank 0 started: o_1 <= 4 ms; rank 0 ended 0.5 ms after rank 1 started: o_1 >= -0.5 ms.
    # The median end difference (3 ms) is inside: kept; a drift-free offset without anchors on 20 samples: no warning
    assert abs(al.offset_ns[1] - 3_000_000) < 1_000 and findings(al)[0].kind == "clock_skew"
    few = align(_run([0, 1]), pl.DataFrame(rows[:8]), enabled=True)
    assert _kinds(few) == {"clock_offset_unsupported": "warning"}


def test_causal_bounds_from_point_to_point_pairs():
    from rankscope.analysis.clock.bounds import TOLERANCE_NS, bounds

    # 0 -> 1 sent at 100, received (ended) at 350 on rank 1's clock; 1 -> 0 sent at 400 (rank 1), ended 420 (rank 0)
    p2p = pl.DataFrame({"sender": [0, 1], "receiver": [1, 0], "send_start": [100, 400], "recv_end": [350, 420],
                        "paired": [True, True]})
    b = bounds(pl.DataFrame(), p2p, ref=0)
    assert b == {1: (-20 - TOLERANCE_NS, 250 + TOLERANCE_NS)}
