"""Flush storm: N ranks flush an S MB trace at the same step to slow shared storage.

Shared storage is a throttled FUSE mount (bench/throttlefs.py): one pipe of ``--mbps`` MB/s
shared by all writers plus ``--latency-ms`` per open/create/rename/mkdir. One run has two
phases, each with its own N fresh rank processes profiling the same workload: torch's
``tensorboard_trace_handler`` writing straight to the mount, and ``rankscope.trace_handler``
(local spool, background export and upload to the mount; its phase ends when the uploads do).
Blocked time = duration of the ``prof.step()`` call that flushes.
Afterwards every file is verified (direct: parses and has every event; rankscope: MANIFEST
sha256 of every file, then parse).

    .venv/bin/python bench/flush_storm.py                    # the issue's sizes: 8 ranks x 50 MB
    .venv/bin/python bench/flush_storm.py --ranks 4 --mb 8   # ~40 s on 2 cores

Blocked time is split into torch's own ``stop_trace`` (the profiler's post-processing when a
window ends; every ``on_trace_ready`` handler pays it, it runs before the handler is called)
and the handler's own time (the rest of the step).
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "rsbench_op"


def workload(n_events: int) -> None:
    import torch

    for _ in range(n_events):
        with torch.profiler.record_function(MARK):
            pass


TIMES = {"stop": 0.0}


def instrument() -> None:
    """Time torch's own stop_trace (paid by every handler) apart from the handler itself."""
    import torch.profiler.profiler as P

    orig = P._KinetoProfile.stop_trace

    def stop_trace(self) -> None:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        orig(self)
        TIMES["stop"] = time.perf_counter() - t0

    P._KinetoProfile.stop_trace = stop_trace


def one_flush(handler, n_events: int, barrier) -> tuple[float, float]:
    """(blocked s, of which torch's stop_trace s) for the flushing ``prof.step()``."""
    import torch

    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=handler) as prof:
        prof.step()  # warm-up step
        workload(n_events)
        barrier.wait()  # every rank flushes at the same moment
        t0 = time.perf_counter()
        prof.step()  # RECORD_AND_SAVE -> on_trace_ready
        return time.perf_counter() - t0, TIMES["stop"]


def rank_main(rank: int, args: argparse.Namespace, which: str, barrier, out) -> None:
    """One rank process, one flush with one handler (a fresh process per handler: torch's
    stop_trace in a process's second profiling session ran ~3x slower here, whichever handler
    came second)."""
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(args.ranks)
    sys.path.insert(0, ROOT)
    import torch

    import rankscope
    from rankscope.store.uploader import UploadConfig

    torch.set_num_threads(1)
    instrument()
    res: dict = {"rank": rank}
    if which == "direct":
        h = torch.profiler.tensorboard_trace_handler(os.path.join(args.mnt, "direct"), worker_name=f"rank{rank}")
        res["direct"], res["direct_stop"] = one_flush(h, args.events, barrier)
    else:
        h = rankscope.trace_handler(os.path.join(args.mnt, "rs"), run_id="storm",
                                    spool_dir=os.path.join(args.spool, f"rank-{rank}"),
                                    upload=UploadConfig(concurrency=1, jitter_s=args.jitter, exit_timeout_s=600,
                                                        nice=args.nice))
        res["rankscope"], res["rankscope_stop"] = one_flush(h, args.events, barrier)
        t0 = time.perf_counter()
        res["left"] = h.close(600)
        res["upload_s"] = time.perf_counter() - t0
    out.put(res)


def count_marks(doc: dict) -> int:
    return sum(1 for e in doc["traceEvents"] if e.get("name") == MARK)


def verify(args: argparse.Namespace) -> dict[str, int]:
    from rankscope.store.fs import open_target
    from rankscope.store.uploader import verify_rank

    ok = {"direct": 0, "rankscope": 0}
    for f in glob.glob(os.path.join(args.backing, "direct", "*.pt.trace.json")):
        ok["direct"] += count_marks(json.load(open(f))) == args.events
    target = open_target(os.path.join(args.backing, "rs"))
    for r in range(args.ranks):
        n, bad = verify_rank(target, r)
        doc = json.load(gzip.open(os.path.join(args.backing, "rs", f"ranks/{r}/window-0000.pt.trace.json.gz")))
        ok["rankscope"] += (not bad and n == 2 and count_marks(doc) == args.events)
    return ok


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=50.0, help="approximate trace size per rank (MB of JSON)")
    ap.add_argument("--mbps", type=float, default=20.0, help="shared storage bandwidth, MB/s")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--jitter", type=float, default=2.0, help="rankscope upload start jitter, s")
    ap.add_argument("--order", choices=["direct-first", "rankscope-first"], default="direct-first",
                    help="which handler's phase runs first (each phase has its own rank processes)")
    ap.add_argument("--nice", type=int, default=0, help="nice value of rankscope's background threads")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    args = ap.parse_args()
    args.events = int(args.mb * 1e6 / 260)  # ~260 bytes of Kineto JSON per record_function event
    work = tempfile.mkdtemp(prefix="rs-storm-")
    args.backing, args.mnt, args.spool = (os.path.join(work, d) for d in ("backing", "mnt", "spool"))
    for d in (args.backing, args.mnt):
        os.makedirs(d)
    fuse = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "throttlefs.py"), args.backing, args.mnt,
                             str(args.mbps), str(args.latency_ms)])
    try:
        for _ in range(100):
            if os.path.ismount(args.mnt):
                break
            time.sleep(0.1)
        ctx = mp.get_context("spawn")
        merged: dict[int, dict] = {}
        for which in (["direct", "rankscope"] if args.order == "direct-first" else ["rankscope", "direct"]):
            barrier, out = ctx.Barrier(args.ranks), ctx.Queue()
            procs = [ctx.Process(target=rank_main, args=(r, args, which, barrier, out)) for r in range(args.ranks)]
            for p in procs:
                p.start()
            for res in (out.get(timeout=900) for _ in procs):
                merged.setdefault(res["rank"], {}).update(res)
            for p in procs:
                p.join()
            os.sync()  # the next phase starts with the page cache written back
            time.sleep(2.0)
        rows = list(merged.values())
        ok = verify(args)
    finally:
        subprocess.run(["fusermount", "-u", args.mnt], check=False)
        fuse.wait(10)
    for r in sorted(rows, key=lambda r: r["rank"]):
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}))
    report(args, rows, ok, work)
    shutil.rmtree(work, ignore_errors=True)


def report(args: argparse.Namespace, rows: list[dict], ok: dict[str, int], work: str) -> None:
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(work, "backing", "direct", "*"))) / args.ranks / 1e6
    d = [r["direct"] for r in rows]
    s = [r["rankscope"] for r in rows]
    dh = [r["direct"] - r["direct_stop"] for r in rows]
    sh = [r["rankscope"] - r["rankscope_stop"] for r in rows]
    ds, ss = [r["direct_stop"] for r in rows], [r["rankscope_stop"] for r in rows]
    lines = [
        "## flush_storm", "",
        f"Command: `.venv/bin/python bench/flush_storm.py --ranks {args.ranks} --mb {args.mb:g} --mbps {args.mbps:g} "
        f"--latency-ms {args.latency_ms:g} --jitter {args.jitter:g} --nice {args.nice} --order {args.order}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}  ",
        f"Storage: FUSE passthrough (bench/throttlefs.py), {args.mbps:g} MB/s shared by all writers, "
        f"{args.latency_ms:g} ms per open/create/rename/mkdir. Trace: {size:.1f} MB JSON per rank "
        f"({args.events} events), {args.ranks} rank processes flushing at the same step.", "",
        "| handler | blocked median (s) | blocked p99 (s) | of which torch stop_trace, median / p99 (s) "
        "| handler's own, median / p99 (s) | files verified |", "|---|---|---|---|---|---|",
        f"| torch tensorboard_trace_handler (direct) | {statistics.median(d):.3f} | {pct(d, .99):.3f} | "
        f"{statistics.median(ds):.3f} / {pct(ds, .99):.3f} | {statistics.median(dh):.3f} / {pct(dh, .99):.3f} | "
        f"{ok['direct']}/{args.ranks} |",
        f"| rankscope.trace_handler (spool + background export + upload) | {statistics.median(s):.3f} | "
        f"{pct(s, .99):.3f} | {statistics.median(ss):.3f} / {pct(ss, .99):.3f} | "
        f"{statistics.median(sh):.4f} / {pct(sh, .99):.4f} | {ok['rankscope']}/{args.ranks} (sha256 via MANIFEST) |",
        "",
        f"rankscope p99 / direct p99 = {pct(s, .99) / pct(d, .99) * 100:.1f}% of the whole step (target <= 5%); "
        f"handler's own time: {pct(sh, .99) / pct(dh, .99) * 100:.2f}%. Background upload "
        f"finished {max(r['upload_s'] for r in rows):.1f} s after the flush at most; files left in spools: "
        f"{sum(r['left'] for r in rows)}.", ""]
    text = "\n".join(lines)
    print(text)
    old = open(args.results).read() if os.path.exists(args.results) else "# Benchmark results\n\n"
    if "## flush_storm" in old:
        head, _, rest = old.partition("## flush_storm")
        nxt = rest.find("\n## ")
        old = head + (rest[nxt + 1:] if nxt >= 0 else "")
    with open(args.results, "w") as f:
        f.write(old.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    main()
