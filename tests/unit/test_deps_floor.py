"""The critical path's what-if on a host with more ranks than CPUs (rankscope.analysis.deps.floor).

Runs are stand-ins (SimpleNamespace) holding only what the floor reads: meta.json's host, host_cpus, device and
each window's scheduler samples, as ``rankscope.profile`` writes them (docs/contract.md)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from rankscope.analysis.deps.floor import Floor, bound
from rankscope.analysis.deps.whatif import WhatIf

MS = 1_000_000


def run(cpu_ms: dict[int, list[float]], cpus: object = 2, device: str = "cpu", hosts: dict[int, str] | None = None):
    def meta(r: int, c: list[float]) -> dict:
        sched = {"step": list(range(len(c))), "cpu_ns": [int(x * MS) for x in c], "runq_wait_ns": [0] * len(c)}
        return {"host": (hosts or {}).get(r, "node-0"), "host_cpus": cpus, "device": device,
                "windows": [{"index": 0, "steps": list(range(len(c))), "sched": sched}]}

    return SimpleNamespace(ranks={r: SimpleNamespace(meta=meta(r, c)) for r, c in cpu_ms.items()})


def joined(sigs: dict[int, tuple]) -> SimpleNamespace:
    return SimpleNamespace(ranks=[SimpleNamespace(rank=r, sig=s) for r, s in sigs.items()])


SAME = {r: ("all_reduce",) for r in range(4)}


def test_a_rank_at_the_median_cannot_beat_the_hosts_cpu_time():
    # 4 ranks on 2 CPUs: rank 0 runs 40 ms of CPU per step, the others 20 ms. At the median, the host's ranks
    # would need 4 x 20 ms over 2 CPUs: no step under 40 ms, whatever the path says.
    f = Floor.of(run({0: [40, 40], 1: [20, 20], 2: [20, 21], 3: [19, 20]}))
    assert f is not None
    assert f.ns(1, 0, [1, 2, 3]) == pytest.approx((20 + 21 + 20 + 20) / 2 * MS)  # rank 0 at its peers' median
    wall = 60 * MS
    got = bound([WhatIf(0, 58 * MS, 28 * MS), WhatIf(1, 58 * MS, 58 * MS)], joined(SAME), f, 1, wall)
    assert wall - got[0].saving_ns == pytest.approx(40.5 * MS, abs=1)  # 30 ms saved by the path, 19.5 ms by the host
    assert got[1].saving_ns == 0  # no saving: nothing to bound
    # a saving the floor leaves alone: the path's step at the median (45 ms) is above it
    kept = bound([WhatIf(0, 58 * MS, 43 * MS)], joined(SAME), f, 1, wall)
    assert kept[0].path_if_median_ns == 43 * MS


def test_a_measured_step_under_the_floor_saves_nothing():
    f = Floor.of(run({0: [90], 1: [60], 2: [60], 3: [60]}))
    got = bound([WhatIf(0, 100 * MS, 70 * MS)], joined(SAME), f, 0, 100 * MS)  # floor 120 ms > the measured 100 ms
    assert got[0].saving_ns == 0


def test_peers_are_the_ranks_that_run_the_same_calls():
    # ranks 2 and 3 run other calls (another pipeline stage): rank 0's CPU time is replaced by rank 1's alone
    f = Floor.of(run({0: [40], 1: [20], 2: [60], 3: [60]}))
    sigs = {0: ("a",), 1: ("a",), 2: ("b",), 3: ("b",)}
    got = bound([WhatIf(0, 100 * MS, 50 * MS)], joined(sigs), f, 0, 100 * MS)
    assert 100 * MS - got[0].saving_ns == pytest.approx((20 + 20 + 60 + 60) / 2 * MS, abs=1)


@pytest.mark.parametrize("case", ["enough CPUs", "unknown CPUs", "gpu", "no samples", "one rank per host"])
def test_no_floor_where_the_host_is_not_known_to_be_oversubscribed(case):
    cpu = {0: [40], 1: [20], 2: [20], 3: [20]}
    r = {"enough CPUs": lambda: run(cpu, cpus=4), "unknown CPUs": lambda: run(cpu, cpus=None),
         "gpu": lambda: run(cpu, device="cuda"), "no samples": lambda: run({k: [] for k in cpu}),
         "one rank per host": lambda: run(cpu, cpus=1, hosts={k: f"node-{k}" for k in cpu})}[case]()
    assert Floor.of(r) is None
    w = [WhatIf(0, 100 * MS, 10 * MS)]
    assert bound(w, joined(SAME), None, 0, 100 * MS) == w


def test_a_host_with_a_rank_missing_its_samples_is_left_out():
    f = Floor.of(run({0: [40, 40], 1: [20, 20], 2: [20, 20], 3: [20]}))  # rank 3 has no step 1
    assert f is not None and f.ns(1, 0, [1, 2, 3]) == 0.0 and f.ns(0, 0, [1, 2, 3]) == pytest.approx(40 * MS)
