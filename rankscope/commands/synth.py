"""Write a synthetic multi-rank NCCL run (Kineto traces per rank) with known ground truth."""
from __future__ import annotations

import argparse
from dataclasses import replace
import time

HELP = "generate a synthetic multi-rank Kineto run (stragglers, slow links, clock skew) with ground truth"

BYTES_PER_OP_STEP = 2_400  # raw JSON bytes per rank per op per step, measured on the generator

EPILOG = """\
what you get:
  OUT/run.json, OUT/ranks/<r>/{rank<r>.pt.trace.json.gz, meta.json, MANIFEST.json}
  OUT/synth_truth.json   the injected faults, each rank's clock offset, and true per-step
                         timings per rank (start, end, compute, comm, wait, host)

the model: a tensor x data parallel transformer step (tp groups are contiguous ranks,
dp groups stride by tp). Collectives of a group end at the same true time on every
member; a late rank makes the others wait inside their NCCL kernels.

examples:
  rankscope synth /tmp/run --ranks 8
  rankscope synth /tmp/run --ranks 64 --steps 5 --straggler 3:compute:1.3 \\
      --slow-link 0-1:3.0 --clock-skew 0.5 --seed 1 --jobs 2
  rankscope synth /tmp/big --ranks 8 --size-mb 50        # ~50 MB of JSON per rank
  rankscope synth /tmp/run --ranks 16 --tp 4 --slow-link pg:0:2 --skew 5:-0.25:20
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``rankscope synth``."""
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("out", metavar="OUT", help="directory to create (must be new or empty)")
    g = p.add_argument_group("shape")
    g.add_argument("--ranks", type=int, default=8, help="world size (default 8)")
    g.add_argument("--steps", type=int, default=5, help="profiled steps per rank (default 5)")
    g.add_argument("--ops-per-step", type=int, default=200,
                   help=f"compute ops per step, ~10 per layer; a rank's JSON is about "
                        f"{BYTES_PER_OP_STEP / 1000:.1f} KB x ops x steps (default 200 -> ~2.4 MB for 5 steps)")
    g.add_argument("--size-mb", type=float, default=None,
                   help="instead of --ops-per-step: target uncompressed trace size per rank in MB")
    g.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (default 2 if ranks is even)")
    g.add_argument("--gpus-per-host", type=int, default=8, help="ranks per host: node-<r // this> (default 8)")
    g.add_argument("--first-step", type=int, default=3, help="number of the first ProfilerStep#N (default 3)")
    f = p.add_argument_group("injected faults (recorded in synth_truth.json)")
    f.add_argument("--straggler", action="append", default=[], metavar="RANK:KIND:FACTOR",
                   help="slow rank; KIND is compute (GPU kernels), data (data loader), host (CPU ops) "
                        "or comm (its transfers); e.g. 3:compute:1.3. Repeatable")
    f.add_argument("--slow-link", action="append", default=[], metavar="A-B:FACTOR|pg:NAME:FACTOR",
                   help="inflate transfer time on groups holding ranks A and B, or on one process group "
                        "(names: 0 = world, then tp groups, then dp groups); e.g. 0-1:3.0. Repeatable")
    f.add_argument("--clock-skew", type=float, default=0.0, metavar="SECONDS",
                   help="give each rank but 0 a random clock offset within +-SECONDS (e.g. 0.5)")
    f.add_argument("--clock-drift", type=float, default=0.0, metavar="PPM",
                   help="give each rank but 0 a random clock drift within +-PPM")
    f.add_argument("--skew", action="append", default=[], metavar="RANK:OFFSET_S[:PPM]",
                   help="set one rank's clock offset (and drift) exactly, e.g. 3:-0.25:10. Repeatable")
    o = p.add_argument_group("output")
    o.add_argument("--format", choices=["kineto", "ascend"], default="kineto",
                   help="kineto (default): torch.profiler traces; ascend: torch_npu profiler folders "
                        "(*_ascend_pt, written by torch_npu's rules: TP x PP over nodes, pipeline receives, HCCL "
                        "task events), read by rankscope and by msprof-analyze alike; uses --ranks, --tp, "
                        "--gpus-per-host and the first --straggler / --slow-link")
    o.add_argument("--db", action="store_true",
                   help="with --format ascend: write torch_npu's DB export (export_type db: "
                        "ascend_pytorch_profiler_<rank>.db and analysis.db) instead of its text files")
    o.add_argument("--task-queue", action="store_true",
                   help="with --format ascend: torch_npu's task queue (TASK_QUEUE_ENABLE): each op enqueues its work, "
                        "a second thread dequeues it and launches its tasks (Enqueue / Dequeue events and flows)")
    o.add_argument("--slow-dispatch", default=None, metavar="RANK:US",
                   help="with --task-queue: that rank's queue thread takes US µs per operator (others 19 µs), so its "
                        "device waits for launches, e.g. 1:1500")
    o.add_argument("--seed", type=int, default=0, help="same seed and flags -> same bytes (default 0)")
    o.add_argument("--jobs", type=int, default=1, help="worker processes writing ranks (default 1)")
    o.add_argument("--gzip-level", type=int, default=1, choices=range(0, 10), metavar="0-9",
                   help="gzip level of trace files (default 1: fast)")
    o.add_argument("--overwrite", action="store_true", help="allow a non-empty OUT")


def run(args: argparse.Namespace) -> int:
    """Generate the run and print a short summary."""
    from rich.console import Console

    from rankscope.errors import RankscopeError
    from rankscope.synth import generate

    if args.format == "ascend":
        return _ascend(args)
    if args.db or args.task_queue or args.slow_dispatch:
        raise RankscopeError(f"synth: {'--db' if args.db else '--task-queue'} is for --format ascend (torch_npu's "
                             f"{'DB export' if args.db else 'task queue'})")
    ops = args.ops_per_step
    if args.size_mb is not None:
        if args.size_mb <= 0:
            raise RankscopeError("synth: --size-mb must be > 0")
        ops = max(1, round(args.size_mb * 1e6 / (BYTES_PER_OP_STEP * args.steps)))
    t0 = time.perf_counter()
    out = generate(args.out, ranks=args.ranks, steps=args.steps, ops_per_step=ops, tp=args.tp, seed=args.seed,
                   stragglers=args.straggler, slow_links=args.slow_link, clock_skew_s=args.clock_skew,
                   clock_drift_ppm=args.clock_drift, skews=args.skew, gpus_per_host=args.gpus_per_host,
                   first_step=args.first_step, gzip_level=args.gzip_level, jobs=args.jobs,
                   overwrite=args.overwrite)
    secs = time.perf_counter() - t0
    import orjson

    truth = orjson.loads((out / "synth_truth.json").read_bytes())
    raw = sum(f["raw_size"] for f in truth["files"]) / len(truth["files"]) / 1e6
    gz = sum(f["size"] for f in truth["files"]) / 1e6
    Console().print(f"[bold]{out}[/]: {args.ranks} ranks x {args.steps} steps, {ops} ops/step, "
                    f"~{raw:.1f} MB JSON per rank, {gz:.1f} MB on disk, {secs:.1f} s\n"
                    f"ground truth: {out / 'synth_truth.json'}")
    return 0


def _ascend(args: argparse.Namespace) -> int:
    """A realistic torch_npu run (``rankscope.synth.ascend_run``) under OUT."""
    from pathlib import Path

    from rich.console import Console

    from rankscope.errors import RankscopeError
    from rankscope.synth.ascend_run import write_run
    from rankscope.synth.ascend_sim import AscendJob

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise RankscopeError(f"synth: {out} is not empty (--overwrite to write into it)")
    tp = args.tp or 2
    per_node = min(args.gpus_per_host, args.ranks)
    if args.ranks % tp or args.ranks % per_node:
        raise RankscopeError(f"synth --format ascend: --ranks {args.ranks} must be a multiple of --tp {tp} and of "
                             f"--gpus-per-host {per_node}")
    job = AscendJob(ranks=args.ranks, per_node=per_node, tp=tp, task_queue=args.task_queue)
    if args.slow_dispatch:
        rank, _, us = args.slow_dispatch.partition(":")
        if not args.task_queue or not rank.isdigit() or int(rank) >= args.ranks:
            raise RankscopeError(f"synth: --slow-dispatch {args.slow_dispatch}: needs --task-queue and RANK:US with "
                                 f"RANK below --ranks {args.ranks}")
        try:
            job = replace(job, slow_dispatch=(int(rank), float(us or 1500)))
        except ValueError:
            raise RankscopeError(f"synth: --slow-dispatch {args.slow_dispatch}: US must be a number of µs") from None
    if args.straggler:
        rank, _, factor = (args.straggler[0].split(":") + ["", ""])[:3]
        job = replace(job, slow_rank=int(rank), slow_factor=float(factor or 1.35))
    if args.slow_link:
        pair, _, factor = args.slow_link[0].partition(":")
        a, _, b = pair.partition("-")
        job = replace(job, slow_link=(int(a), int(b)), slow_link_factor=float(factor or 0.25))
    dirs = write_run(out, job, form="db" if args.db else "text")
    Console().print(f"[bold]{out}[/]: {len(dirs)} torch_npu profiler folders (*_ascend_pt, "
                    f"{'DB' if args.db else 'text'} export); slow rank "
                    f"{job.slow_rank} x{job.slow_factor:g}, slow link {job.slow_link} x{job.slow_link_factor:g}"
                    f"{'; task queue' if job.task_queue else ''}"
                    f"{f', rank {job.slow_dispatch[0]} dispatches in {job.slow_dispatch[1]:g} µs' if job.slow_dispatch else ''}; "
                    f"compare: msprof-analyze cluster -d {out} -m all")
    return 0
