"""Clock alignment from hand-made matched collectives: known offsets, outliers, anchors, switch-off."""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.clock import align
from rankscope.model.info import RankInfo
from rankscope.model.run import Run

T0 = 1_767_225_600_000_000_000


def _matched(offsets: dict[int, int], groups: dict[str, list[int]], n: int = 40, outliers: bool = True,
             seed: int = 0) -> pl.DataFrame:
    """Collectives whose true ends coincide (± 30 µs jitter), seen on each rank's own clock."""
    rng = np.random.default_rng(seed)
    rows = []
    for g, (name, ranks) in enumerate(groups.items()):
        for k in range(n):
            end_true = T0 + (k * 1_000_000) + g * 137_000
            for r in ranks:
                end = end_true + offsets[r] + int(rng.normal(0, 30_000))
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
    from rankscope.analysis.clock import alignment_from
    from rankscope.analysis.base import Result

    m = _matched({0: 0, 1: 5_000_000}, {"0": [0, 1]}, outliers=False)
    monkeypatch.setenv("RANKSCOPE_CLOCK_ALIGN", "0")
    assert not align(_run([0, 1]), m).enabled
    monkeypatch.delenv("RANKSCOPE_CLOCK_ALIGN")
    al = align(_run([0, 1]), m)
    assert al.enabled and abs(al.offset_ns[1] - 5_000_000) < 20_000
    frame = al.to_frame()
    assert frame.columns == ["rank", "offset_ns", "residual_ns", "drift_ppm", "samples", "source"]
    res = Result("clock", summary={"offsets_ns": {"0": 0, "1": 5}})
    assert alignment_from({"clock": res}) == {0: 0, 1: 5} and alignment_from({}) == {}
