"""Scoring one training step across ranks while the job runs: who the others waited for, and why.

Pattern: NVRx's straggler detection (nvidia-resiliency-ext ``straggler/reporting.py``) scores each rank as
reference time / own time, 1.0 for the best rank, and names ranks under a threshold. Its own times are
CUDA kernel and code-section timings; here a rank's own time in a step is what is left of the step once the
waits for other ranks are taken out, and the waits come from the collectives' arrival order:

- per collective (process group, sequence number) of the step, a rank's *gap* is how long before the
  last rank it arrived (``time_created_ns``, on rank 0's clock); its wait in the step is its mean gap;
- own time = step time - wait; score = the smallest own time of the step / this rank's own time;
- the step's *late* rank: the lowest score, arriving last at >= ``LAST_SHARE`` of the step's collectives, its
  own time >= ``EXCESS`` above the other ranks' median; without collectives, own time is the training
  thread's CPU time plus run-queue wait (``rankscope.collect.sched``);
- its likely cause, from the per-step CPU samples: more CPU work, waiting for a CPU (run-queue wait), or
  neither (blocked outside the collectives: I/O, sleep, a lock, a data loader's queue).

:class:`Streaks` turns the steps into the lines of ``RUN/live.jsonl``: a rank late in ``n`` of the last
``n + 2`` scored steps, with a median score there of at most ``SCORE_BAR`` (own time >= 1.25x the fastest),
is named with its cause. On this project's VM a healthy rank on the slower vCPU scored 0.8-0.9 for steps on
end; the workloads' stragglers (1.3-1.7x the work) 0.4-0.75. Pure: plain data in, plain data out, no torch.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

LAST_SHARE = 0.6
EXCESS = 0.10  # own time at least 10 % above the other ranks' median
CAUSE_SHARE = 0.5  # a CPU sample's excess explains the own-time excess when it is at least half of it
CPU_MORE = 0.10  # or when the rank's CPU time is at least 10 % above the others'
CPU_MUCH_MORE = 0.30  # CPU time 30 % above the others': more work even when the host also made it wait
STRONG_SHARE = 0.25  # ... when that extra CPU time is at least a quarter of the extra own time
SCORE_BAR = 0.8  # named only when its median score over those steps is at most this (NVRx's default bar: 0.75)


@dataclass
class StepReport:
    """One rank's step: wall times on rank 0's clock, CPU samples and the collectives it issued."""

    step: int
    t0: int  # ns, when the step began
    t1: int  # ns, when it ended (the step() call)
    cpu: int | None = None  # ns of CPU time of the training thread
    runq: int | None = None  # ns runnable but waiting for a CPU
    arrivals: dict[tuple[str, int], int] = field(default_factory=dict)  # (group, seq) -> created ns

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepReport:
        base = int(d["t0"])
        return cls(int(d["s"]), base, int(d["t1"]), d.get("cpu"), d.get("rq"),
                   {(str(g), int(q)): base + int(dt) for g, q, dt in d.get("c", [])})

    def to_json(self) -> dict[str, Any]:
        return {"s": self.step, "t0": self.t0, "t1": self.t1, "cpu": self.cpu, "rq": self.runq,
                "c": [[g, q, t - self.t0] for (g, q), t in self.arrivals.items()]}


@dataclass
class StepScore:
    step: int
    scores: dict[int, float]
    late: int | None  # the rank the others waited for in this step, if one stands out
    basis: str  # "arrivals" or "cpu"
    last: dict[int, int]  # rank -> collectives where it arrived last
    collectives: int
    own_ms: dict[int, float]
    cpu_ms: dict[int, float | None]
    runq_ms: dict[int, float | None]
    step_ms: float


def _median_others(values: dict[int, float], r: int) -> float:
    rest = [v for k, v in values.items() if k != r]
    return statistics.median(rest) if rest else 0.0


def _ms(ns: int | None) -> float | None:
    return ns / 1e6 if ns is not None else None


def score_step(reports: dict[int, StepReport]) -> StepScore:
    """Scores of one step reported by every rank (see the module docstring)."""
    ranks = sorted(reports)
    step_ms = {r: (reports[r].t1 - reports[r].t0) / 1e6 for r in ranks}
    keys = set().union(*(rep.arrivals for rep in reports.values())) if reports else set()
    gaps: dict[int, list[float]] = {r: [] for r in ranks}
    last = {r: 0 for r in ranks}
    n = 0
    for k in keys:
        got = {r: reports[r].arrivals[k] for r in ranks if k in reports[r].arrivals}
        if len(got) < 2:
            continue
        n += 1
        latest = max(got.values())
        last[max(got, key=lambda r: got[r])] += 1
        for r, t in got.items():
            gaps[r].append((latest - t) / 1e6)
    cpu, rq = {r: _ms(reports[r].cpu) for r in ranks}, {r: _ms(reports[r].runq) for r in ranks}
    if n:
        own = {r: max(step_ms[r] - (statistics.fmean(gaps[r]) if gaps[r] else 0.0), 1e-3) for r in ranks}
        basis = "arrivals"
    else:
        own = {r: max((cpu[r] or 0.0) + (rq[r] or 0.0), 1e-3) for r in ranks}
        basis = "cpu"
    best = min(own.values()) if own else 1.0
    scores = {r: round(best / own[r], 3) for r in ranks}
    late = None
    if len(ranks) > 1:
        r = min(ranks, key=lambda x: (scores[x], -own[x]))
        ok_last = not n or last[r] >= LAST_SHARE * n
        if ok_last and own[r] >= (1 + EXCESS) * _median_others(own, r):
            late = r
    return StepScore(max(rep.step for rep in reports.values()) if reports else -1, scores, late, basis, last, n,
                     own, cpu, rq, statistics.median(step_ms.values()) if step_ms else 0.0)


def cause(scores: list[StepScore], r: int) -> tuple[str, str]:
    """(kind, words) of rank ``r``'s likely cause over ``scores``: cpu (more CPU work: its extra CPU time
    explains half its extra own time, or it is up by ``CPU_MORE`` and explains it with its run-queue wait), cpu_wait (the extra is run-queue wait: its host gave it
    no CPU) or blocked (neither)."""
    own_x = statistics.fmean(s.own_ms[r] - _median_others(s.own_ms, r) for s in scores)

    def excess(name: str) -> tuple[float, float] | None:
        vals = [(getattr(s, name)[r], _median_others({k: v for k, v in getattr(s, name).items() if v is not None}, r))
                for s in scores if getattr(s, name).get(r) is not None]
        return (statistics.fmean(a - b for a, b in vals), statistics.fmean(b for _, b in vals)) if vals else None

    cpu, rq = excess("cpu_ms"), excess("runq_ms")
    # more work explains the excess, or more work (CPU time up by CPU_MORE) and its wait for a CPU together do;
    # but a run-queue wait larger than the extra CPU time is the host's (under contention both rise)
    queued = cpu[0] + max(rq[0], 0.0) if cpu is not None and rq is not None else 0.0
    # far more work, whatever the wait, where that work is a real part of the extra time (a rank asleep 40 ms per
    # step with a few ms more CPU on a busy host, +56 %, is blocked, not busy: seen in a loaded suite run)
    strong = (cpu is not None and cpu[1] > 0 and cpu[0] >= CPU_MUCH_MORE * cpu[1]
              and cpu[0] >= STRONG_SHARE * own_x)
    if not strong and rq is not None and rq[0] > 0 and rq[0] >= CAUSE_SHARE * own_x and (cpu is None or rq[0] >= cpu[0]):
        return "cpu_wait", f"waits for a CPU (+{rq[0]:.1f} ms run-queue wait per step, more than its extra CPU time)"
    if cpu is not None and cpu[0] > 0 and (strong or cpu[0] >= CAUSE_SHARE * own_x
                                            or (cpu[0] >= CPU_MORE * cpu[1] and queued >= CAUSE_SHARE * own_x)):
        pct = f"+{100 * cpu[0] / cpu[1]:.0f} % CPU time" if cpu[1] > 0 else f"+{cpu[0]:.1f} ms CPU time"
        return "cpu", f"more CPU work ({pct} per step)"
    if rq is not None and rq[0] > 0 and rq[0] >= CAUSE_SHARE * own_x:
        return "cpu_wait", f"waits for a CPU (+{rq[0]:.1f} ms run-queue wait per step, no more CPU work)"
    return "blocked", f"blocked outside collectives (I/O, sleep, a lock or a queue: +{own_x:.1f} ms per step)"


@dataclass
class Streaks:
    """A rank late in ``n`` of the last ``n + slack`` scored steps (the latest included) is the straggler,
    named in every line of its episode; the alarm is said once, and again for that rank only after
    ``quiet`` scored steps without it (a rank that comes and goes over a few steps is one alarm). A rank late
    only because its host gave it no CPU (cause ``cpu_wait``) is shown as ``contention``, not named: it is
    the host's doing, not the job's."""

    n: int = 5
    slack: int = 2  # 5 of 6 missed more stragglers under load; healthy runs stay unnamed by the cause rule
    window: list[tuple[StepScore, str | None]] = field(default_factory=list)  # (step, its late rank's cause)
    episode: dict[int, int] = field(default_factory=dict)  # rank -> late steps since it became the candidate
    quiet: int = 50
    alarmed: dict[int, int] = field(default_factory=dict)  # rank -> the last step it was named at

    def add(self, s: StepScore) -> tuple[dict[str, Any], str | None]:
        """The live.jsonl line of step ``s`` and, when it is said, the alarm's words. Each late step gets its own
        cause; steps where the late rank only waited for a CPU (``cpu_wait``) count for nobody."""
        r = s.late
        kind = cause([s], r)[0] if r is not None else None
        self.window = (self.window + [(s, kind)])[-(self.n + self.slack):]
        line: dict[str, Any] = {"step": s.step, "straggler": None, "cause": None,
                                "scores": {str(k): v for k, v in sorted(s.scores.items())},
                                "late": r, "basis": s.basis, "step_ms": round(s.step_ms, 3),
                                "own_ms": {str(k): round(v, 3) for k, v in sorted(s.own_ms.items())},
                                "cpu_ms": {str(k): round(v, 3) for k, v in sorted(s.cpu_ms.items()) if v is not None},
                                "runq_ms": {str(k): round(v, 3) for k, v in sorted(s.runq_ms.items()) if v is not None},
                                "last": {str(k): v for k, v in sorted(s.last.items()) if v}, "collectives": s.collectives}
        if kind == "cpu_wait":
            line["contention"] = r
        late = [w for w, k in self.window if r is not None and w.late == r and k in ("cpu", "blocked")]
        for k in list(self.episode):  # an episode ends when its rank is no longer late often enough
            if k != r and sum(w.late == k and c in ("cpu", "blocked") for w, c in self.window) < self.n:
                del self.episode[k]
        if r is None or kind == "cpu_wait" or len(late) < self.n or statistics.median(w.scores[r] for w in late) > SCORE_BAR:
            return line, None
        self.episode[r] = self.episode.get(r, len(late) - 1) + 1
        kind, words = cause(late, r)
        line.update(straggler=r, cause=words, cause_kind=kind, evidence=self.evidence(late, r),
                    slow_steps=self.episode[r])
        said, self.alarmed[r] = self.alarmed.get(r), s.step
        if said is not None and s.step - said <= self.quiet:
            return line, None
        return line, f"rankscope: rank {r} slow for {self.episode[r]} steps ({line['evidence']}; {words})"

    @staticmethod
    def evidence(sc: list[StepScore], r: int) -> str:
        own = statistics.fmean(s.own_ms[r] for s in sc)
        rest = statistics.fmean(_median_others(s.own_ms, r) for s in sc)
        pct = f"+{100 * (own / rest - 1):.0f} % own time" if rest > 0 else "longest own time"
        total = sum(s.collectives for s in sc)
        if not total:
            return pct
        return f"arrives last at {sum(s.last[r] for s in sc)}/{total} collectives, {pct}"
