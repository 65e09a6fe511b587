"""The what-if's floor on a host with more ranks than CPUs.

A rank's what-if replaces its own segments with the other ranks' median and holds everything else
fixed. On a host whose ranks outnumber its CPUs that is not all a slow rank changes: its extra CPU time
is taken from the ranks that share its CPUs, and in a run without it those ranks compete among
themselves. No step is then shorter than the host's ranks' CPU time over its CPUs. So a rank's step at
the median is at least, per such host, the ranks' training-thread CPU time of that step with the rank's
own replaced by the median of its peers' (the ranks that run the same calls), over the host's CPUs.

It is a lower bound (gloo's own threads are not counted) and binds only where the training threads keep
the CPUs busy: it raised 1 step of 6 in two pipeline x data-parallel runs at 4 ranks on 2 CPUs, and no
what-if of 32 DDP / FSDP2 / TP x FSDP2 pairs there (bench/RESULTS.md, 2026-11-30), whose threads used
50-75 ms of CPU in a ~190 ms step.

Inputs: meta.json's ``host`` and ``host_cpus`` (``os.cpu_count()`` at collect), and the scheduler's CPU
time per step (``rankscope.collect.sched``); CPU-only runs (a GPU rank's work is not its thread's CPU time).
Nothing changes where a host's CPUs are unknown or none runs more ranks than it has CPUs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rankscope.analysis.deps.join import Joined
from rankscope.analysis.deps.whatif import WhatIf

if TYPE_CHECKING:
    from rankscope.model.run import Run


def hosts(run: "Run") -> tuple[dict[int, str], dict[str, int]]:
    """Each rank's host, and each host's CPUs (those whose meta.json says)."""
    host = {r: str(i.meta.get("host")) for r, i in run.ranks.items()}
    cpus = {str(i.meta.get("host")): int(i.meta["host_cpus"]) for i in run.ranks.values()
            if isinstance(i.meta.get("host_cpus"), int) and i.meta["host_cpus"] > 0}
    return host, cpus


class Floor:
    """Per step, each rank's CPU time on the oversubscribed hosts (ns)."""

    def __init__(self, host: dict[int, str], cpus: dict[str, int], cpu: dict[int, dict[int, int]]) -> None:
        self.host, self.cpus, self.cpu = host, cpus, cpu
        self.floored: dict[int, int] = {}  # per rank: the steps whose what-if the floor raised

    def note(self) -> dict[str, object]:
        """The summary's ``cpu_floor``: the hosts with more ranks than CPUs, and the steps floored per rank."""
        ranks = {h: sum(1 for x in self.host.values() if x == h) for h in self.cpus}
        return {"hosts": {h: {"ranks": ranks[h], "cpus": n} for h, n in sorted(self.cpus.items())},
                "floored_steps": {str(r): k for r, k in sorted(self.floored.items())}}

    @classmethod
    def of(cls, run: "Run") -> Floor | None:
        """None where no host is known to run more ranks than its CPUs, or CPU times are missing."""
        from rankscope.analysis.diagnosis.cpu import cpu_run, sched_frame

        host, cpus = hosts(run)
        counts: dict[str, int] = {}
        for h in host.values():
            counts[h] = counts.get(h, 0) + 1
        over = {h: n for h, n in cpus.items() if counts.get(h, 0) > n}
        if not over or not cpu_run(run):  # CPU ranks whose training thread's CPU time is their work
            return None
        cpu: dict[int, dict[int, int]] = {}
        for rank, step, ns in sched_frame(run).drop_nulls("cpu_ns").select("rank", "step", "cpu_ns").iter_rows():
            cpu.setdefault(int(step), {})[int(rank)] = int(ns)
        return cls(host, over, cpu) if cpu else None

    def ns(self, step: int, rank: int, peers: list[int]) -> float:
        """The shortest step if ``rank`` took its peers' median CPU time: per oversubscribed host whose ranks all
        have this step's CPU time, their sum (``rank``'s replaced) over the host's CPUs; the largest. 0: none."""
        got = self.cpu.get(step, {})
        theirs = [got[p] for p in peers if p in got]
        if rank not in got or not theirs:
            return 0.0
        mine = {r: (float(np.median(theirs)) if r == rank else float(v)) for r, v in got.items()}
        best = 0.0
        for h, n in self.cpus.items():
            members = [r for r, hh in self.host.items() if hh == h]
            if all(r in mine for r in members):
                best = max(best, sum(mine[r] for r in members) / n)
        return best


def bound(wis: list[WhatIf], j: Joined, floor: Floor | None, step: int, wall_ns: float) -> list[WhatIf]:
    """The what-ifs with each step at the median no shorter than the floor (the step's measured time, ``wall_ns``,
    less the saving, is what the summary reports)."""
    if floor is None:
        return wis
    sig = {r.rank: r.sig for r in j.ranks}
    out = []
    for w in wis:
        f = floor.ns(step, w.rank, [r for r, s in sig.items() if r != w.rank and s == sig.get(w.rank)])
        if w.path_if_median_ns is not None and f > 0 and w.saving_ns > 0 and wall_ns - w.saving_ns < f:
            saving = max(0.0, wall_ns - f)  # a measured step under the floor: no saving
            w = WhatIf(w.rank, w.path_ns, int(round(w.path_ns - saving)))
            floor.floored[w.rank] = floor.floored.get(w.rank, 0) + 1
        out.append(w)
    return out
