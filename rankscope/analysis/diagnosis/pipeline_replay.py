"""A pipeline schedule replayed from its stages' work: the step time a schedule gives for given work per stage.

Pattern: torch.distributed.pipelining's single-stage schedules run a fixed program on each stage: post
receives and sends, wait for some of them, run one microbatch's forward or backward. gloo completes a send
only once its receiver has posted the matching receive, so a wait ends when both sides of every message in
it were posted (and the sender had computed it). Which messages a wait holds decides how much a slow stage
holds up the others: GPipe waits for each receive alone, 1F1B fuses a forward send with the next backward
receive (``Schedule1F1B._step_microbatches``), so a stage there also waits for its neighbour to be ready.

Algorithm: each stage's program, written from torch's ``ScheduleGPipe`` and ``Schedule1F1B``, runs as far as
it can; a wait whose messages lack a post stops its stage until the others post them. Each stage keeps its
own clock; a wait moves it to the latest post of its messages plus the latency of a message (measured on
the run: a receive's return after both sides were posted). The step is the latest clock.

>>> step({"schedule": "GPipe", "fwd": [1.0, 1.0], "bwd": [2.0, 2.0]}, 4)  # (m + p - 1)(F + B)
15.0
>>> step({"schedule": "1F1B", "fwd": [1.0, 1.0], "bwd": [2.0, 2.0]}, 4)
15.0
"""
from __future__ import annotations

from typing import Any

# An op: ("send" | "recv", message) posts a message's side; ("wait", messages); ("F" | "B", (microbatch,
# duration)) runs one microbatch's forward or backward; ("T", (step, duration)) the stage's work between two
# steps (its optimizer).
# A message: (kind F|B, microbatch, receiving stage).
Msg = tuple[str, int, int]
Op = tuple[str, Any]
SCHEDULES = ("GPipe", "1F1B")


def _gpipe(s: int, p: int, m: int, f: float, b: float) -> list[Op]:
    """``ScheduleGPipe``: all forwards (each receive waited alone, sends waited after the last forward),
    then all backwards the same way."""
    ops: list[Op] = []
    for kind, dur, src, dst in (("F", f, s - 1, s + 1), ("B", b, s + 1, s - 1)):
        sent: list[Msg] = []
        for i in range(m):
            if 0 <= src < p:
                ops += [("recv", (kind, i, s)), ("wait", [(kind, i, s)])]
            ops.append((kind, (i, dur)))
            if 0 <= dst < p:
                sent.append((kind, i, dst))
                ops.append(("send", sent[-1]))
        ops.append(("wait", sent))
    return ops


def _one_f_one_b(s: int, p: int, m: int, f: float, b: float) -> list[Op]:
    """``Schedule1F1B``: p - s warm-up forwards, then backward and forward in turn (a forward's send fused
    with the next backward's receive, a backward's send with the next forward's receive), then the
    remaining backwards."""
    first, last = s == 0, s == p - 1
    fwd_in = [] if first else [("F", i, s) for i in range(m)]
    fwd_out = [] if last else [("F", i, s + 1) for i in range(m)]
    bwd_in = [] if last else [("B", i, s) for i in range(m)]
    bwd_out = [] if first else [("B", i, s - 1) for i in range(m)]

    def post(side: str, msgs: list[Msg]) -> list[Op]:
        return [(side, x) for x in msgs]

    ops: list[Op] = []
    warm = min(m, p - s)
    pending: list[Msg] = []  # forward sends posted in the warm-up, waited after the next forward
    left: list[Msg] = []  # the last warm-up forward's send, fused with the first backward's receive
    fi = bi = 0
    for k in range(warm):
        rv = fwd_in[fi:fi + 1]
        ops += post("recv", rv) + [("wait", rv), ("F", (fi, f)), ("wait", pending)]
        out = fwd_out[fi:fi + 1]
        if k != warm - 1:
            ops += post("send", out)
            pending = out
        else:
            left = out
        fi += 1
    bsend: list[Msg] = []
    while True:
        rv = bwd_in[bi:bi + 1]
        ops += post("send", left) + post("recv", rv) + [("wait", left + rv), ("B", (bi, b))]
        bsend = bwd_out[bi:bi + 1]
        bi += 1
        if fi == m:
            break
        rv = fwd_in[fi:fi + 1]
        ops += post("send", bsend) + post("recv", rv) + [("wait", bsend + rv), ("F", (fi, f))]
        left = fwd_out[fi:fi + 1]
        fi += 1
    ops += post("send", bsend)
    work = bsend
    while bi < m:
        rv = bwd_in[bi:bi + 1]
        ops += post("recv", rv) + [("wait", rv), ("B", (bi, b)), ("wait", work)]
        work = bwd_out[bi:bi + 1]
        ops += post("send", work)
        bi += 1
    return ops + [("wait", work)]


def replay(progs: list[list[Op]], latency: float = 0.0) -> float | None:
    """The latest clock once every stage ran its program; None when the programs deadlock."""
    posted: dict[tuple[str, Msg], float] = {}
    pc, clock = [0] * len(progs), [0.0] * len(progs)
    moved = True
    while moved:
        moved = False
        for s, prog in enumerate(progs):
            while pc[s] < len(prog):
                what, arg = prog[pc[s]]
                if what in ("F", "B", "I", "W", "T"):
                    clock[s] += arg[1]
                elif what in ("send", "recv"):
                    posted[(what, arg)] = clock[s]
                else:
                    times = [posted.get((side, x)) for x in arg for side in ("send", "recv")]
                    if any(t is None for t in times):
                        break
                    clock[s] = max([clock[s], *[t + latency for t in times if t is not None]])
                pc[s] += 1
                moved = True
    if any(pc[s] < len(prog) for s, prog in enumerate(progs)):
        return None
    return max(clock, default=0.0)


def programs(schedule: str, fwd: list[float], bwd: list[float], m: int) -> list[list[Op]] | None:
    """Each stage's program under ``schedule`` (None: not replayed here)."""
    build = {"GPipe": _gpipe, "1F1B": _one_f_one_b}.get(schedule)
    if build is None or m < 1:
        return None
    return [build(s, len(fwd), m, fwd[s], bwd[s]) for s in range(len(fwd))]


def runtime_programs(orders: list[list[tuple[str, int, int]]], durs: dict[tuple[int, str], float]
                     ) -> list[list[Op]] | None:
    """Each rank's program under torch's runtime schedules (``ScheduleInterleaved1F1B``, ``ScheduleZBVZeroBubble``,
    ``_PipelineScheduleRuntime._step_microbatches``), from its actions in the order it ran them: ``orders[p]``
    lists (action F|B|I|W, stage, microbatch) of the ranks' p-th, ``durs`` each (stage, action)'s own time.

    The runtime posts a stage's receives ahead of the action that needs them and waits for a receive only in
    that action (its sends are waited at the step's end), so a receive is posted at the step's start here. An
    action waits for the one before it on another rank: a forward for the previous stage's forward of its
    microbatch, a backward (full, B, or of the input, I) for the next stage's; a neighbour on the same rank is
    ordered by the rank's own order (the V schedule's turn). None when a stage's place is unknown.

    >>> progs = runtime_programs([[("F", 0, 0), ("B", 0, 0)], [("F", 1, 0), ("B", 1, 0)]],
    ...                          {(0, "F"): 1.0, (0, "B"): 2.0, (1, "F"): 1.0, (1, "B"): 2.0})
    >>> replay(progs)  # F0, F1, B1, B0 one after another
    6.0
    """
    where = {stg: p for p, order in enumerate(orders) for _, stg, _ in order}
    last = max(where, default=-1)
    if not where or min(where) < 0 or any(d not in durs for o in orders for d in ((s, a) for a, s, _ in o)):
        return None
    progs = []
    for p, order in enumerate(orders):
        recv: list[Op] = []
        ops: list[Op] = []
        sent: list[Msg] = []
        for act, stg, mb in order:
            src = stg - 1 if act == "F" else stg + 1 if act in ("B", "I") else -1
            if 0 <= src <= last and act != "W" and where.get(src, p) != p:
                msg = ("F" if act == "F" else "B", mb, stg)
                recv.append(("recv", msg))
                ops.append(("wait", [msg]))
            ops.append((act, (mb, durs[(stg, act)])))
            dst = stg + 1 if act == "F" else stg - 1 if act in ("B", "I") else -1
            if 0 <= dst <= last and act != "W" and where.get(dst, p) != p:
                sent.append(("F" if act == "F" else "B", mb, dst))
                ops.append(("send", sent[-1]))
        progs.append(recv + ops + [("wait", sent)])
    return progs


def _shift(ops: list[Op], by: int) -> list[Op]:
    """``ops`` with every microbatch number moved by ``by`` (the same program, a later step's messages)."""
    def msg(x: Msg) -> Msg:
        return (x[0], x[1] + by, x[2])
    out: list[Op] = []
    for what, arg in ops:
        if what in ("send", "recv"):
            out.append((what, msg(arg)))
        elif what == "wait":
            out.append((what, [msg(x) for x in arg]))
        else:
            out.append((what, (arg[0] + by, arg[1])))
    return out


def steps(progs: list[list[Op]], tail: list[float], m: int, k: int) -> list[list[Op]]:
    """``k`` steps of each stage's program back to back, each followed by the stage's work between steps."""
    return [[op for j in range(k) for op in _shift(prog, j * m) + [("T", (j, tail[s]))]]
            for s, prog in enumerate(progs)]


def steady(progs: list[list[Op]], tail: list[float] | None, m: int, latency: float = 0.0) -> float | None:
    """The step of ``progs``: without a tail, one replay; with one, the steady state's (``step``)."""
    if not tail:
        return replay(progs, latency)
    ends = [replay(steps(progs, [float(t) for t in tail], m, k), latency) for k in (3, 4)]
    return None if ends[0] is None or ends[1] is None else ends[1] - ends[0]


def step(model: dict[str, Any], m: int) -> float | None:
    """The step of ``model`` ({"schedule", "fwd": per-stage forward per microbatch, "bwd": backward,
    optional "latency": per message, optional "tail": per-stage work between two steps, the optimizer}) with m
    microbatches; None for a schedule not replayed here (interleaved, zero bubble) or a deadlock.

    With a tail, the step is the steady state's: consecutive steps replayed back to back, the 4th step's end
    minus the 3rd's. A stage's optimizer then overlaps its neighbours' last and first microbatches: a slow last
    stage's optimizer runs while the first stage does its last backward and the next step's first forward,
    which the step of one isolated replay would add on top. Measured (bench/pipeline_twins.py seed 2801, 1F1B and
    GPipe at 2 stages, the heavy stage last): its optimizer took 14 ms after its last send, and one replay of the
    step with that work spread over the microbatches came out 7-10 ms over the measured step.

    >>> step({"schedule": "1F1B", "fwd": [1.0, 1.0], "bwd": [2.0, 2.0], "tail": [0.0, 0.0]}, 4)
    15.0
    >>> step({"schedule": "1F1B", "fwd": [1.0, 3.0], "bwd": [2.0, 6.0], "tail": [0.0, 3.0]}, 4)  # hidden
    39.0
    """
    progs = programs(model["schedule"], model["fwd"], model["bwd"], m)
    if progs is None:
        return None
    return steady(progs, model.get("tail"), m, float(model.get("latency") or 0.0))
