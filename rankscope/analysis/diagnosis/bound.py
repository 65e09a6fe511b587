"""Which rank bounds the steps on the critical path across ranks, what it costs, and on what.

Pattern: the ``critical_path`` analysis gives, per step and rank, the what-if saving (how much shorter
the step would be if that rank ran at the other ranks' median: its cost) and the path's segments. The
candidate is the rank with the largest median saving over the steps; it bounds a step when its saving
there is the largest. Noise comes from dependencies too: the other ranks' savings (with identical work,
a rank's segments are longer than the others' median about half the time, so every rank saves a little)
are the floor a cost must stand out of. The candidate's own segments on the path say where its time
went (data loading, operators, host time between operators), and so which causes it can hold.

Thresholds are data (``BAR``); their history is in bench/RESULTS.md ("Verdict from the critical path").
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Result, frame

BAR = {
    # a verdict from dependencies alone (no own-time rule spoke): bounds this share of the steps ...
    "steps": 2 / 3,
    # ... costs at least this share of the step at 2 ranks (ranks doing identical work here differ steadily
    # by up to ~20 %: likely.TWIN_SPREAD; a slower vCPU is not an injected straggler, and at 2 ranks the other
    # rank's saving is 0 wherever this one bounds the step: no noise floor to stand out of) ...
    "share": 0.20,
    # ... or this share from 3 ranks up, where the other ranks' savings are the noise floor. Measured
    # (rankscope.demo.workloads.fsdp, 4 ranks on 2 loaded cores, 6 steps, the issue-25 job): rank 2's data
    # +44.6 ms per step (14.3 %, its own timers) bounded 5 of 6 steps by 41.8 ms (13.3 %), the others' savings
    # 9.1-13.0 ms; its healthy twin: at most 12.7 ms (4 %), bounding 2 of 6. The own-time rules named nothing.
    "share_many": 0.10,
    # ... and this many times the other ranks' savings (the noise floor of the what-if: median against median)
    "over_noise": 3.0,
    # ... or, at any rank count, this share where the rank's own data loading holds at least half the cost
    # twice over: on its segments of the path and in its own timers against the other ranks' (a slower vCPU
    # slows every part of a step alike, and data loading is a small part of it); two lines of evidence, so
    # most steps suffice (``BAR["steps"]``, not ``steady``). Measured (rankscope.demo.workloads.fsdp, 2 ranks,
    # 6 steps, bench/workloads.py seeds 2612-2615): data stragglers of 7.0-9.3 ms per step bounded 5-6 of 6
    # steps by 8.3-13.0 ms (8.7-14.2 %), 82-100 % of it data loading on the path, the other rank's saving
    # 1.2-2.5 ms. Healthy twins at 2 ranks (FSDP2, MoE, TP x FSDP2, DDP LM and decoding; 24 runs): where data
    # held half their cost on the path (DDP decoding), that cost was 0.5-4.6 % of the step.
    "share_data": 0.07,
    # ... and there, from 3 ranks up, this many times the other ranks' savings (not ``over_noise``): the data
    # loading in the rank's own timers already says whose the cost is; the what-if only has to rank it first,
    # clearly. Measured (bench/workloads.py seed 2622, fsdp-data at 4 ranks on 2 cores: 4 processes on 2 CPUs):
    # rank 3's 31 ms of tokenizing per step (its own timers; the others 0.4 ms) bounded 5 of 6 steps by 30.5 ms
    # (11.2 %), the other ranks' savings 21.1 and 11.6 ms (1.45x): "no straggler" under the 3x bar.
    "over_noise_data": 1.25,
    # ... and at 2 ranks this many (not ``over_noise``), for the same reason. Measured (bench/workloads.py seed
    # 2711, fsdp-data at 2 ranks): two data stragglers (+5.9 and +7.0 ms per step of tokenizing by their timers)
    # bounded 6 and 5 of 6 steps by 10.5 % and 11.2 % of the step, data loading on the path and in their timers,
    # at 2.96x and 2.98x the other rank's saving: "no straggler" under 3x. Healthy 2-rank twins where data held
    # half the cost on the path and in the timers: at most 4.6 % of the step (``share_data`` guards them).
    # Lowered from 2.0 (bench/workloads.py seed 2741, fsdp-data at 2 ranks, quiet): stragglers of 22.8-24.6 ms of
    # tokenizing per step (their timers' excess) bounded 4-5 of 6 steps by 13.7-16.1 % of the step at 1.53x and
    # 1.82x the other rank's saving (seed 2731: 31.5 % at 1.88x): "no straggler". No healthy 2-rank twin had its
    # data loading hold half its cost in its own timers above 4.6 % of the step (seeds 2731, 2741: 44 runs of
    # FSDP2, MoE, TP x FSDP2, DDP LM and decoding), so the share and the timers guard them, not this ratio.
    "over_noise_data_two": 1.25,
    # ... or, from 3 ranks up, this share where the rank's own host time between operators (Python, the
    # dispatcher: "host" on the path) holds at least half the cost twice over, on its path segments and in its
    # own breakdown against the other ranks', at ``over_noise`` over every other rank's saving in half the steps
    # (``steps_many``). A slower vCPU slows a rank's operators and its gaps alike; a loop of its own grows the
    # gaps alone. Measured (bench/workloads.py, tp_fsdp at 4 ranks on 2 cores, a 20-25 ms Python loop before
    # the optimizer step): seed 2623, 8.4 % (4.1x, 4 of 6 steps); seed 2651, 7.0 % (3.4x, 3 of 6) and 7.9 %
    # (5.0x, 4 of 6), host 32 ms of the 16 ms cost on the path: "no straggler" under ``share_many``. Healthy
    # 4-rank runs of seed 2623 (52) that bounded half the steps at 3x every other rank's saving did so at 1.4 %
    # and 4.4 % of the step; a same-work-slower rank (every operator 1.2x) stays under ``share_many``.
    "share_host": 0.06,
    # ... and there, this many times every other rank's saving (not ``over_noise``): as with data loading, the
    # rank's own breakdown already says whose the cost is. Measured (bench/workloads.py, tp_fsdp at 4 ranks on 2
    # cores): seed 2701, a 27 ms loop (32 ms by the job's timers) bounded 6 of 6 steps by 26.3 ms (10.4 %) at
    # 2.57x its dp peer's saving; seed 2702, 6.1 % at 2.09x in 4 of 6 steps: "no straggler" under 3x. Healthy
    # 4-rank runs of seed 2702 (36: FSDP2, MoE, TP x FSDP2, DDP LM and decoding, 1F1B): where host time held
    # half the bounding rank's cost on the path and in its breakdown, that cost was at most 1.9 % of the step
    # (DDP LM, 2.47x); the TP x FSDP2 twins' 3.1-6.5 % costs had 0.2-0.4x of it in their breakdowns.
    "over_noise_host": 2.0,
    # ... and at 2 ranks, at this share, at ``over_noise_data_two`` over the other rank's saving, in half the steps:
    # there healthy twins bound 10-18 % of the step (a 2-rank what-if has no noise floor) but none with host time
    # holding half the cost in its breakdown (at most 3.8 ms of a 12.9 ms cost; seeds 2731, 2741: 44 runs).
    # Measured (bench/workloads.py seed 2741, tp_fsdp at 2 ranks, quiet): loops of 22-28 ms (host excess 22.4 and
    # 27.4 ms) bounded 3 and 4 of 6 steps by 28.2 % and 24.2 % at 1.97x and 1.57x: "no straggler".
    "share_host_two": 0.15,
    # ... and at 2 ranks, data loading (``clears_bar_on_data``) in half the steps (``steps_many``, not ``steps``)
    # where the saving is this many times the other rank's: the data in the rank's own timers and on its path
    # already say whose the cost is, and a lead this large is not a coin's. Measured (bench/workloads.py seed
    # 3005, fsdp-data at 2 ranks, quiet): tokenizing of +11.8 and +6.2 ms per step (its timers) bounded 3 of 6
    # steps by 20.9 ms (21.5 %) and 10.5 ms (13.4 %), data loading on the path, at 2.6x and 2.9x the other rank's
    # saving: "no straggler". Seed 3006 (quiet, 2 ranks): the 4 fsdp-data runs bounded 4 of 6 steps each, at
    # 1.5-3.5x, so one step fewer would have lost them too. The guard is the timers, not the count: the healthy
    # twins of seed 3006 (20) whose path held data loading (DDP decoding: 5 of 8 steps, 17.7 % of the step, 5.3x)
    # had a data excess under 0 (``path_choice.data_excess``: -53 ms against the 27 ms it needed); the FSDP2
    # twins bounding 3 of 6 steps at 1.3-2.4x held under 5.1 ms of data on the path, excess 0.
    "lead_data_two": 1.5,
    # from 3 ranks up, half the steps suffice for ``clears_bar``, and the median saving at 3x every other rank's
    # stands for steadiness (the count of bounded steps against chance is not asked). On 2 loaded cores a rank's what-if spikes in the step where the host
    # preempted it, and so takes single steps from the rank that bounds the others. Measured (bench/workloads.py
    # seed 2623, tp_fsdp at 4 ranks, rank 3's 23 ms Python loop, +32.5 ms per step by its own timers): 29.5 ms
    # (17.2 %), 17.5x any other rank's, in 3 of 6 steps (the others: rank 0, rank 2 once at 40.9 ms, none):
    # "no straggler".
    "steps_many": 0.5,
}
# a cost said beside "no straggler" (bounds most steps, at least this share of the step) ...
STEADY_SHARE = 0.005
# ... and bounds more steps than chance would give it (each step bounded by any one of the ranks alike):
# P(any of the n ranks bounds >= that many of the steps) at most this. The rank is the one that bounds the most,
# so the chance is n times one rank's tail (the union bound), not one rank's. 6 steps: 2 ranks need 6 of 6, 4
# ranks 5 of 6, 8 ranks 4 of 6. Measured (bench/workloads.py seed 2711, fsdp-input at 4 ranks on 2 cores, every
# rank's what-if 5-10 ms in most steps): rank 1, with no more work than the others, bounded 4 of 6 steps (one
# rank's tail 0.038, any of four's 0.15), was taken as steady, and vetoed the rank with +35 % input work by count.
STEADY_P = 0.05
# path classes a cause may come from: the time of the rank's own segments on the path
_HOST_GAP = "host (between operators)"
NO_SAVING = "no rank's what-if shortens the critical path"
# a rank that bounds too few steps to be steady is still said when its what-if saving is this many times any
# other rank's. Measured (rankscope.demo.workloads, 4 ranks on 2 loaded cores, 6 steps): tp_fsdp, rank 3's
# 25 ms host loop: 13.7 ms against 7.2 ms (1.9x), 3 of 6 steps, said nowhere; healthy twins of fsdp and moe:
# 1.07x and 1.00x. At 2 ranks the other rank's saving is 0 wherever this one bounds: there only over a saving of its own.
LEADS = 1.5


@dataclass
class Bound:
    """The rank that bounds the steps, from the critical path (all times ns, medians over steps)."""

    rank: int
    cost_ns: float  # its what-if saving per step
    noise_ns: float  # the other ranks' largest saving per step, median over steps
    step_ns: float  # the measured step time
    steps: int  # steps it bounds (its saving the largest)
    of_steps: int
    description: str = ""  # the chain of its median bounded step
    own_span: str = ""  # the span of its own that the description names (``deps.report.own_span``)
    path: dict[str, float] = field(default_factory=dict)  # its own time on the path per class (data, compute, host)
    savings: dict[int, float] = field(default_factory=dict)  # every rank's median saving
    host_steps: int = 0  # steps left out: their bounding rank waited for a CPU longer than it saved
    bounded: list[int] = field(default_factory=list)  # the steps it bounds

    @property
    def share(self) -> float:
        return self.cost_ns / self.step_ns if self.step_ns > 0 else 0.0

    @property
    def steady(self) -> bool:
        """Bounds most steps, more of them than chance (``STEADY_P``), at a cost above the rounding of a step:
        said, whatever the bar."""
        from rankscope.analysis.diagnosis.likely import binom_tail

        n = max(len(self.savings), 2)
        return (self.steps >= max(2, (self.of_steps + 1) // 2) and self.share >= STEADY_SHARE
                and n * binom_tail(self.steps, self.of_steps, 1 / n) <= STEADY_P)

    def costs(self, saving_ns: float) -> bool:
        """A what-if saving above the rounding of a step (``STEADY_SHARE``): a cost to say."""
        return self.step_ns > 0 and saving_ns >= STEADY_SHARE * self.step_ns

    @property
    def others_best_ns(self) -> float:
        """The largest median saving of another rank."""
        return max((v for r, v in self.savings.items() if r != self.rank), default=0.0)

    @property
    def distinct(self) -> bool:
        """It, and no other rank, bounds the steps: more of them than chance (``steady``), or at a cost
        ``BAR["over_noise"]`` times what any other rank's what-if saves. Measured (tests/e2e/test_demo.py's
        healthy 2-rank run, 2 loaded cores): rank 1 bounded 4 of 8 steps, saving 2.26 ms per step against
        rank 0's 2.21 ms, while the own-time rules named it "cause unclear" (+32 % own time excluding CPU wait)."""
        return self.steady or self.cost_ns >= BAR["over_noise"] * max(self.noise_ns, self.others_best_ns)

    @property
    def clears_bar(self) -> bool:
        """A verdict from the dependencies alone (``BAR``): bounds most steps, more than chance (``steady``), at a
        good share of the step, well above any other rank's saving."""
        over = self.cost_ns >= BAR["over_noise"] * self.others_best_ns
        if len(self.savings) < 3:
            return self.steps >= BAR["steps"] * self.of_steps and self.steady and self.share >= BAR["share"] and over
        # the median saving 3x every other rank's is the steadiness (no count of bounded steps against chance)
        return self.steps >= BAR["steps_many"] * self.of_steps and self.share >= BAR["share_many"] and over

    def clears_bar_on_data(self, data_excess_ns: float) -> bool:
        """A verdict from the dependencies with its cause (``BAR["share_data"]``): ``clears_bar`` at a lower share
        where data loading holds at least half the cost both on the rank's own path segments and in
        ``data_excess_ns`` (its data wait over the other ranks' median, from its own timers), at
        ``BAR["over_noise_data_two"]`` over the other rank's saving (2 ranks) or ``BAR["over_noise_data"]``; at 2
        ranks in half the steps where it saves ``BAR["lead_data_two"]`` times the other rank's."""
        half = 0.5 * self.cost_ns
        two = len(self.savings) < 3
        over = BAR["over_noise_data_two"] if two else BAR["over_noise_data"]
        steps = (self.steps >= BAR["steps"] * self.of_steps
                 or (two and self.steps >= BAR["steps_many"] * self.of_steps
                     and self.cost_ns >= BAR["lead_data_two"] * self.others_best_ns))
        return (steps and self.share >= BAR["share_data"]
                and self.cost_ns >= over * self.others_best_ns
                and self.path.get("data", 0.0) >= half and data_excess_ns >= half)

    def clears_bar_on_host(self, host_excess_ns: float) -> bool:
        """A verdict from the dependencies where the rank's host time between operators holds at least half the
        cost on its own path segments and in ``host_excess_ns`` (its host time over the other ranks' median, from
        its breakdown), in half the steps: from 3 ranks up at ``BAR["share_host"]`` and ``BAR["over_noise_host"]``
        over every other rank's saving; at 2 ranks at ``BAR["share_host_two"]`` and ``BAR["over_noise_data_two"]``."""
        half = 0.5 * self.cost_ns
        share, over = ((BAR["share_host"], BAR["over_noise_host"]) if len(self.savings) >= 3
                       else (BAR["share_host_two"], BAR["over_noise_data_two"]))
        return (self.steps >= BAR["steps_many"] * self.of_steps and self.share >= share
                and self.cost_ns >= over * self.others_best_ns
                and self.path.get("host", 0.0) >= half and host_excess_ns >= half)

    def evidence(self) -> dict[str, Any]:
        return {"source": "critical path across ranks (what-if at the other ranks' median)", "rank": self.rank,
                "cost_per_step_ns": round(self.cost_ns), "others_saving_ns": round(self.noise_ns),
                "bounds_steps": self.steps, "of_steps": self.of_steps, "share_of_step": round(self.share, 4),
                "step_ns": round(self.step_ns), "path_ns": {k: round(v) for k, v in self.path.items()},
                "savings_ns": {str(r): round(v) for r, v in sorted(self.savings.items())},
                "description": self.description, "own_span": self.own_span, "host_steps_left_out": self.host_steps}

    def time_lost(self) -> dict[str, Any]:
        """The verdict's ``time_lost`` evidence: the what-if saving per step."""
        return {"lost_per_step_ns": round(self.cost_ns), "lost_total_ns": round(self.cost_ns * self.of_steps),
                "lost_share_of_step": round(self.share, 4), "steps": self.of_steps,
                "method": "critical path: the step if this rank ran at the other ranks' median"}

    def clause(self) -> str:
        """"; critical path: rank 3's backward (aten::mm [4096, 4096]) then all_reduce #42 of group 0 bounds
        5 of 6 steps; at the other ranks' median the step would take 41.0 ms instead of 48.1 ms"."""
        chain = f"{self.description} bounds" if self.description else f"rank {self.rank} bounds"
        left = (f" ({self.host_steps} more bounded by a rank's wait for a CPU, left out)" if self.host_steps else "")
        return (f"; critical path: {chain} {self.steps} of {self.of_steps} steps{left}; at the other ranks' median the "
                f"step would take {(self.step_ns - self.cost_ns) / 1e6:.1f} ms instead of {self.step_ns / 1e6:.1f} ms")

    def below_bar(self) -> str:
        """A steady cost under the bar, said beside "no straggler"; or a saving well above any other rank's
        (``LEADS``) in too few steps to be steady; else ""."""
        what = f" ({self.description})" if self.description else ""
        if self.steady:
            return (f"rank {self.rank} bounds {self.steps} of {self.of_steps} steps on the critical path{what}, by "
                    f"{self.cost_ns / 1e6:.1f} ms per step ({self.share:.1%}): below the bar for a verdict")
        # at 2 ranks only where the other rank's median saving is a cost too: it bounded steps of its own (bench/
        # workloads.py seed 3005, fsdp-data at 2 ranks: 20.9 ms per step against 7.9 ms, 3 of 6 steps, said nowhere)
        two = len(self.savings) < 3
        if (self.costs(self.cost_ns) and self.cost_ns >= LEADS * self.others_best_ns
                and (not two or self.costs(self.others_best_ns))):
            # no ratio over a baseline within a step's rounding (seed 2752, a healthy DDP twin: "176.4x" over 7 µs)
            than = (f"{self.cost_ns / self.others_best_ns:.1f}x "
                    f"{'the other' if two else 'any other'} rank's" if self.costs(self.others_best_ns)
                    else f"where no other rank's saves more than {max(self.others_best_ns, 0.0) / 1e6:.1f} ms")
            return (f"on the critical path rank {self.rank}'s what-if saves {self.cost_ns / 1e6:.1f} ms per step "
                    f"({self.share:.1%}), {than}, but it bounds only {self.steps} of {self.of_steps} steps: not named")
        return ""


def without_host_steps(wi: pl.DataFrame, runq: pl.DataFrame | None) -> pl.DataFrame:
    """The what-if rows less the steps the host bounded (``host_steps``). All steps are kept where that leaves none.
    Measured (tests/e2e/test_demo.py's host straggler beside the other pytest worker's jobs): rank 1's loop, +17
    ms of CPU per step, bounded 3 of 6 steps by 29-31 ms; rank 0 "bounded" the other 3, its operators stretched
    (aten::mm [512, 256] 74-80 ms) by 58-65 ms of run-queue wait against rank 1's 21-44 ms: "no straggler"."""
    if runq is None or runq.height == 0:
        return wi
    host = host_steps(wi, runq)
    kept = wi.filter(~pl.col("step").cast(pl.Int64).is_in(host))
    return kept if kept.height else wi


def host_steps(wi: pl.DataFrame, runq: pl.DataFrame | None) -> list[int]:
    """The steps the host bounded: where the rank whose saving is the largest waited on the run queue, over the
    other ranks' median in that step, at least as long as that saving (``runq``: rank, step, runq_wait_ns, from
    ``rankscope.profile``'s scheduler samples; none without them)."""
    if runq is None or runq.height == 0 or "runq_wait_ns" not in runq.columns:
        return []
    q = runq.select(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64),
                    pl.col("runq_wait_ns").cast(pl.Float64)).drop_nulls()
    top = (wi.sort("saving_ns", descending=True).group_by("step", maintain_order=True)
           .agg(pl.col("rank").first(), best=pl.col("saving_ns").first()).filter(pl.col("best") > 0))
    host = []
    for step, rank, best in top.select(pl.col("step").cast(pl.Int64), pl.col("rank").cast(pl.Int64),
                                       "best").iter_rows():
        here = q.filter(pl.col("step") == step)
        mine = here.filter(pl.col("rank") == rank)["runq_wait_ns"]
        rest = here.filter(pl.col("rank") != rank)["runq_wait_ns"]
        if mine.len() and rest.len() and float(mine[0]) - float(rest.median()) >= float(best):  # type: ignore[arg-type]
            host.append(int(step))
    return host


def host_bounded(results: dict[str, Result], b: Bound, runq: pl.DataFrame | None,
                 excluded: list[int] | tuple[int, ...] = ()) -> int:
    """How many of the steps ``b`` bounds the host bounded (``host_steps``): the rank waited on the run queue,
    over the other ranks in that step, at least as long as its what-if saving there."""
    cp = results.get("critical_path")
    if cp is None or cp.skipped or not b.bounded:
        return 0
    wi = frame(cp.tables["what_if"]).filter(~pl.col("rank").is_in(list(excluded)))
    return len(set(host_steps(wi, runq)) & set(b.bounded))


def bound(results: dict[str, Result], excluded: list[int] | tuple[int, ...] = (),
          runq: pl.DataFrame | None = None) -> tuple[Bound | None, str]:
    """The candidate from the ``critical_path`` result, or (None, why not); steps the host bounded (a rank preempted
    longer than its saving: ``without_host_steps``) left out where ``runq`` has the scheduler samples."""
    cp = results.get("critical_path")
    if cp is None:
        return None, "the critical path did not run"
    if cp.skipped:
        return None, f"no critical path ({cp.skipped})"
    wi = frame(cp.tables["what_if"]).filter(~pl.col("rank").is_in(list(excluded)))
    if wi.height == 0 or wi["step_if_median_ns"].is_null().all():
        return None, "no critical path what-if: no two ranks run the same calls to compare (a pipeline's stages)"
    if not (wi["saving_ns"] > 0).any():
        return None, NO_SAVING
    every = wi["step"].n_unique()
    wi = without_host_steps(wi, runq)
    per = wi.group_by("rank").agg(med=pl.col("saving_ns").median(), n=pl.len())
    # a rank bounds a step where its saving is the largest (ties: none)
    top = wi.sort("saving_ns", descending=True).group_by("step", maintain_order=True).agg(
        first=pl.col("rank").first(), best=pl.col("saving_ns").first(), second=pl.col("saving_ns").slice(1, 1).first())
    top = top.with_columns(pl.col("second").fill_null(0))
    wins = top.filter((pl.col("best") > pl.col("second")) & (pl.col("best") > 0)).group_by("first").agg(k=pl.len())
    won = dict(zip(wins["first"].to_list(), wins["k"].to_list()))
    per = per.with_columns(k=pl.col("rank").replace_strict(won, default=0)).sort(["med", "k"], descending=True)
    rank = int(per["rank"][0])
    mine = wi.filter(pl.col("rank") == rank).select("step", "saving_ns")
    others = wi.filter(pl.col("rank") != rank).group_by("step").agg(o=pl.col("saving_ns").max())
    noise = float(others["o"].median() or 0.0) if others.height else 0.0  # type: ignore[arg-type]
    steps = frame(cp.tables["steps"])
    b = Bound(rank=rank, cost_ns=float(per["med"][0]), noise_ns=noise, step_ns=float(steps["step_ns"].median() or 0),  # type: ignore[arg-type]
              steps=int(won.get(rank, 0)), of_steps=int(mine.height),
              savings={int(r): float(m) for r, m in zip(per["rank"], per["med"])},
              host_steps=every - wi["step"].n_unique())
    # the steps it bounds, as counted in ``won`` (a tie bounds nothing)
    b.bounded = [int(x) for x in top.filter((pl.col("first") == rank) & (pl.col("best") > pl.col("second"))
                                            & (pl.col("best") > 0))["step"].to_list()]
    bounded = top.filter(pl.col("first") == rank)["step"].to_list()
    b.description, b.own_span = _description(cp, rank, bounded)
    b.path = path_classes(frame(cp.tables["segments"]), rank, bounded)
    return b, ""


def without_what_if(results: dict[str, Result]) -> set[int]:
    """Ranks the critical path has no what-if for in any step: no other rank runs their calls (a pipeline's first
    or last stage). The path can neither confirm nor deny that such a rank bounds the steps."""
    cp = results.get("critical_path")
    if cp is None or cp.skipped:
        return set()
    wi = frame(cp.tables["what_if"])
    if wi.height == 0:
        return set()
    per = wi.group_by("rank").agg(none=pl.col("step_if_median_ns").is_null().all())
    return {int(r) for r, none in per.iter_rows() if none}


def savings(results: dict[str, Result], excluded: list[int] | tuple[int, ...] = ()) -> dict[int, float] | None:
    """Per rank that has others to compare with: its median what-if saving per step (ns); None without a path."""
    cp = results.get("critical_path")
    if cp is None or cp.skipped:
        return None
    wi = frame(cp.tables["what_if"]).filter(~pl.col("rank").is_in(list(excluded)) & pl.col("step_if_median_ns").is_not_null())
    if wi.height == 0:
        return None
    per = wi.group_by("rank").agg(pl.col("saving_ns").median())
    return {int(r): float(v) for r, v in per.iter_rows()}


def _description(cp: Result, rank: int, bounded: list[int]) -> tuple[str, str]:
    """The chain of the median-cost step this rank bounds (the critical path's own words), and the span of its own
    that it names."""
    mine = [s for s in cp.summary.get("per_step", []) if s.get("bounding_rank") == rank and s["step"] in bounded]
    if not mine:
        return "", ""
    rep = sorted(mine, key=lambda s: s["cost_ms"])[len(mine) // 2]
    return str(rep.get("description") or ""), str(rep.get("own_span") or "")


def path_classes(seg: pl.DataFrame, rank: int, steps: list[int]) -> dict[str, float]:
    """The rank's own time on the path per class, median over the steps it bounds: data (inside a data-loading
    span), host (between operators), compute (operators, launches, device work)."""
    from rankscope.analysis.steps.breakdown import data_spans_pattern

    if seg.height == 0 or not steps:
        return {}
    mine = seg.filter((pl.col("rank") == rank) & pl.col("step").is_in(steps)
                      & ~pl.col("kind").is_in(["collective", "p2p", "wait"]))
    if mine.height == 0:
        return {}
    rx = re.compile(data_spans_pattern(), re.IGNORECASE)
    is_data = [bool(rx.search(c or "") or rx.search(n or "")) for c, n in zip(mine["context"], mine["name"])]
    mine = mine.with_columns(cls=pl.Series(is_data).cast(pl.Utf8)).with_columns(
        cls=pl.when(pl.col("cls") == "true").then(pl.lit("data"))
        .when(pl.col("name") == _HOST_GAP).then(pl.lit("host")).otherwise(pl.lit("compute")))
    per = mine.group_by("step", "cls").agg(pl.col("dur").sum())
    out = {}
    for cls in ("data", "compute", "host"):
        v = per.filter(pl.col("cls") == cls).select("step", "dur")
        vals = {int(s): float(d) for s, d in v.iter_rows()}
        out[cls] = float(np.median([vals.get(s, 0.0) for s in steps]))
    return out


def holds(b: Bound | None, cls: str, excess_ns: float) -> bool:
    """Whether the bounding rank's own segments on the path can hold ``excess_ns`` of class ``cls``
    (half of it, at least: the path crosses the rank only where it is the late one); True without a path."""
    if b is None or not b.path:
        return True
    return b.path.get(cls, 0.0) >= 0.5 * max(excess_ns, 0.0)
