"""A small timeline simulation of a Megatron-style job on Ascend NPUs (input of ``ascend_files``).

Shape: ``ranks`` NPUs, ``per_node`` per node, tensor parallel ``tp`` inside a node and pipeline
parallel ``pp = ranks // tp`` across nodes (data parallel 1), plus the default (world) group. Every
step, stage 0 computes the forward pass with two TP all-reduces, sends activations to stage 1
(``hcom_send``), waits for the gradients (``hcom_receive``: the pipeline bubble), runs the backward
pass with a third TP all-reduce and a world all-reduce (grad norm) overlapped with the optimizer.
Stage 1 mirrors it. Communication is rendezvous-like: an operation ends when its last member has
arrived plus the transfer time over the slowest link it uses.

Faults: ``slow_rank`` computes ``slow_factor`` times longer; links between ``slow_link`` ranks run at
``slow_link_factor`` of their bandwidth; with ``task_queue``, ``slow_dispatch`` gives one rank's queue thread a
longer Dequeue per op (a host that builds operators slowly), and a task cannot start before its Dequeue launched it.
The host enqueues the step's operations 60 µs apart from its start. Times are µs (floats), sizes MB (10^6 bytes).

Example::

    sim = simulate(AscendJob(slow_rank=3, slow_link=(0, 1)))
    sim.ops[0][0].name          # 'hcom_allReduce__...'
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rankscope.model.readers.ascend.torch_npu import double_hash

T0_US = 1_735_689_600_000_000.0  # 2025-01-01 00:00:00 UTC in µs
BANDWIDTH_GBPS = {"HCCS": 24.0, "RDMA": 12.0}  # GB/s = MB/ms


@dataclass(frozen=True)
class AscendJob:
    """What to simulate; the defaults give the realistic 4-rank fixture of the tests."""

    ranks: int = 4
    per_node: int = 2
    tp: int = 2
    steps: tuple[int, ...] = (10, 11, 12)
    slow_rank: int | None = 3
    slow_factor: float = 1.35
    slow_link: tuple[int, int] | None = (0, 1)
    slow_link_factor: float = 0.25
    node_skew_us: float = 120.0  # host clock of node n runs n * this ahead
    task_queue: bool = False  # torch_npu's TASK_QUEUE_ENABLE: ops enqueue, a second thread dequeues and launches
    dispatch_us: float = 19.0  # with the task queue: each Dequeue (the CANN call that builds and launches the op)
    slow_dispatch: tuple[int, float] | None = None  # (rank, µs per Dequeue): a rank whose queue thread is slow


@dataclass(frozen=True)
class Group:
    """One HCCL communicator: its comm name (the key of parallel_group_info) and members."""

    comm_name: str
    pg_name: str
    ranks: tuple[int, ...]

    @property
    def hash(self) -> str:
        return str(double_hash(self.comm_name))


@dataclass
class CommOp:
    """One rank's side of one HCCL operation."""

    name: str
    group: Group
    kind: str  # "collective" | "p2p"
    peer: int | None
    start: float
    end: float
    wait: float
    transports: dict[str, tuple[float, float]]  # transport -> (size MB, time ms)
    links: dict[int, tuple[str, float, float]]  # peer global rank -> (transport, size MB, time ms)


@dataclass
class Kernel:
    name: str
    start: float
    end: float
    enqueue: float | None = None  # with the task queue: when the host enqueued it, and when its Dequeue began
    dequeue: float | None = None


@dataclass
class Sim:
    job: AscendJob
    groups: list[Group]
    ops: dict[int, list[CommOp]] = field(default_factory=dict)
    kernels: dict[int, list[Kernel]] = field(default_factory=dict)
    steps: dict[int, list[tuple[int, float, float]]] = field(default_factory=dict)  # (id, host start, host end)


def groups_of(job: AscendJob) -> list[Group]:
    """TP groups, PP groups and the world group with HCCL-like comm names (documentation IPs)."""
    out, n = [], 0

    def comm(root: int) -> str:
        nonlocal n
        n += 1
        return f"192.0.2.{root // job.per_node + 1}%enp189s0f0_60000_{n}_1735689600{100000 + n}"
    stride = job.ranks // job.tp
    out += [Group(comm(s * job.tp), "tp", tuple(range(s * job.tp, (s + 1) * job.tp))) for s in range(stride)]
    out += [Group(comm(p), "pp", tuple(range(p, job.ranks, stride))) for p in range(stride)]
    out.append(Group(comm(0), "default_group", tuple(range(job.ranks))))
    return out


def _program(stage: int, last: bool, tp: Group, pp: Group, world: Group) -> list[tuple]:
    fwd = [("k", "MatMulV2", 900.0), ("c", tp, "allReduce", 16.0), ("k", "FlashAttentionScore", 700.0),
           ("c", tp, "allReduce", 16.0)]
    bwd = [("k", "MatMulV3Grad", 1500.0), ("c", tp, "allReduce", 16.0)]
    tail = [("a", world, "allReduce", 0.004), ("k", "ApplyAdamW", 300.0)]
    if not last:
        return fwd + [("c", pp, "send", 8.0), ("c", pp, "receive", 8.0)] + bwd + tail
    return [("c", pp, "receive", 8.0)] + fwd + [("k", "SoftmaxCrossEntropy", 200.0)] + bwd[:1] + \
        [("c", pp, "send", 8.0)] + bwd[1:] + tail


def _link(job: AscendJob, a: int, b: int, seq: int = 0) -> tuple[str, float]:
    """(transport, bandwidth GB/s) between two global ranks on the ``seq``-th call of a group."""
    kind = "HCCS" if a // job.per_node == b // job.per_node else "RDMA"
    bw = BANDWIDTH_GBPS[kind] * (1.0 - 0.04 * (seq % 4))
    if job.slow_link and {a, b} == set(job.slow_link):
        bw *= job.slow_link_factor
    return kind, bw


def _transfer(job: AscendJob, rank: int, members: tuple[int, ...], op: str, size: float,
              peer: int | None, seq: int) -> tuple[dict[int, tuple[str, float, float]], float]:
    """Per-peer (transport, MB, ms) this rank sends and the transfer time (µs) of the whole op."""
    if op in ("send", "receive"):
        t, bw = _link(job, rank, peer, seq)  # type: ignore[arg-type]
        return ({peer: (t, size, size / bw)} if op == "send" else {}), size / bw * 1000 + 15.0  # type: ignore[dict-item]
    share = size / len(members)  # ring: 2(n-1) chunks of size/n, spread over the peers
    links = {}
    for p in members:
        if p != rank:
            t, bw = _link(job, rank, p, seq)
            mb = 2 * share
            links[p] = (t, mb, mb / bw)
    slowest = max(ms for _, _, ms in links.values()) if links else 0.0
    return links, slowest * 1000 + 20.0


def simulate(job: AscendJob = AscendJob()) -> Sim:
    """Run every rank's program for every step; rendezvous on each communication op."""
    groups = groups_of(job)
    sim = Sim(job, groups, {r: [] for r in range(job.ranks)}, {r: [] for r in range(job.ranks)},
              {r: [] for r in range(job.ranks)})
    stride = job.ranks // job.tp
    mine = {r: {g.pg_name: g for g in groups if r in g.ranks} for r in range(job.ranks)}
    counter: dict[tuple[int, str], int] = {}
    clock = {r: T0_US + 300.0 for r in range(job.ranks)}
    for step in job.steps:
        host_start = dict(clock)
        progs = {r: _program(r // job.tp, r // job.tp == stride - 1, mine[r]["tp"], mine[r]["pp"],
                             mine[r]["default_group"]) for r in range(job.ranks)}
        t = {r: clock[r] + 180.0 for r in range(job.ranks)}  # launch latency: host step start -> first task
        queue = {r: (clock[r] + 100.0, 0, clock[r]) for r in range(job.ranks)}  # (next enqueue, items, thread free)
        pending: dict[tuple[str, int], dict[int, tuple]] = {}
        cur: dict[int, tuple[str, int]] = {}  # rank -> the operation it is blocked in
        done_at: dict[int, float] = {r: t[r] for r in range(job.ranks)}
        while any(progs.values()):
            progressed = False
            for r in range(job.ranks):
                while progs[r]:
                    item = progs[r][0]
                    if item[0] == "k":
                        jitter = 1.0 + 0.02 * ((step * 7 + len(sim.kernels[r]) * 3 + r) % 5)  # deterministic
                        dur = item[2] * jitter * (job.slow_factor if r == job.slow_rank else 1.0)
                        enq = deq = None
                        if job.task_queue:
                            enq, deq, queue[r] = _dispatch(job, r, queue[r])
                            t[r] = max(t[r], deq + dispatch_time(job, r) + 2.0)  # 3 µs after its Dequeue returned
                        sim.kernels[r].append(Kernel(item[1], t[r], t[r] + dur, enq, deq))
                        t[r] += dur + 5.0
                        progs[r].pop(0)
                        progressed = True
                        continue
                    g, op, size = item[1], item[2], item[3]
                    if job.task_queue and r not in cur:  # enqueued too (60 µs of the host), not dequeued here
                        queue[r] = (queue[r][0] + 60.0, queue[r][1] + 1, queue[r][2])
                    if r not in cur:
                        cur[r] = (g.hash, counter.get((r, g.hash), 0))
                        counter[(r, g.hash)] = cur[r][1] + 1
                        pending.setdefault(cur[r], {})[r] = (t[r], op, size, item[0] == "a")
                    key = cur[r]
                    slot = pending[key]
                    if len(slot) < len(g.ranks):
                        break  # blocked until the others arrive
                    _finish(sim, job, g, key[1], slot, t, done_at)
                    for m in g.ranks:
                        progs[m].pop(0)
                        del cur[m]
                    del pending[key]
                    progressed = True
            if not progressed:
                raise RuntimeError(f"deadlock in the simulated program at step {step}: {pending}")
        for r in range(job.ranks):
            dev_end = max(t[r], done_at[r])
            sim.steps[r].append((step, host_start[r], dev_end + 50.0))
            clock[r] = dev_end + 50.0 + 350.0  # host: sync, then the next batch
    return sim


def dispatch_time(job: AscendJob, rank: int) -> float:
    return job.slow_dispatch[1] if job.slow_dispatch and job.slow_dispatch[0] == rank else job.dispatch_us


def _dispatch(job: AscendJob, rank: int, q: tuple[float, int, float]) -> tuple[float, float, tuple[float, int, float]]:
    """(enqueue, Dequeue start, the queue's next state) of a kernel: the host enqueues 60 µs after the previous
    operation; the queue thread takes it 10 µs after its Enqueue or when it is free, and is busy for its Dequeue."""
    nxt, n, free = q
    enq = nxt + 4.0  # the Enqueue, 4 µs into the op
    deq = max(enq + 6.0, free)
    return enq, deq, (nxt + 60.0, n + 1, deq + dispatch_time(job, rank) + 1.0)


def _finish(sim: Sim, job: AscendJob, g: Group, seq: int, slot: dict[int, tuple], t: dict[int, float],
            done_at: dict[int, float]) -> None:
    last = max(a[0] for a in slot.values())
    p2p = len(g.ranks) == 2 and slot[g.ranks[0]][1] in ("send", "receive")
    xfer = {}
    for r, (arr, op, size, _) in slot.items():
        peer = next((p for p in g.ranks if p != r), None) if p2p else None
        xfer[r] = _transfer(job, r, g.ranks, op, size, peer, seq)
    total = max(x[1] for x in xfer.values())
    for r, (arr, op, size, is_async) in slot.items():
        links, _ = xfer[r]
        trans: dict[str, tuple[float, float]] = {}
        for tr, mb, ms in links.values():
            s0, t0 = trans.get(tr, (0.0, 0.0))
            trans[tr] = (s0 + mb, t0 + ms)
        name = f"hcom_{op}__{g.hash[-3:]}_{seq}_1@{g.hash}"
        end = last + total
        peer = next((p for p in g.ranks if p != r), None) if p2p else None
        sim.ops[r].append(CommOp(name, g, "p2p" if p2p else "collective", peer, arr, end, last - arr, trans, links))
        done_at[r] = max(done_at[r], end)
        if not is_async:
            t[r] = end + 5.0
