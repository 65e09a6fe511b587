"""Run a training script with the collective recorder on, no code change:

    torchrun --nproc-per-node 4 -m rankscope.collect.comms.run --out /shared/job1/fr --watchdog 300 train.py ARGS

Sizes Flight Recorder's ring before the script creates its process group, starts a ``comms.Recorder``
on every rank (dump at exit, on SIGUSR1, and when a collective stays pending longer than --watchdog
seconds), then runs the script as ``__main__``. Read the dumps with ``rankscope hang OUT``. Jobs that
use ``rankscope.profile`` get the same with ``comms=True`` or ``RANKSCOPE_COMMS=1``, the dumps going to
the run directory.

``--timed`` (or ``RANKSCOPE_COMMS_TIMED=1``, options "sample=16,ring=5000,stack=1,poll=1") makes the script's
``init_process_group`` / ``new_group`` use rankscope's timed wrapper of gloo / nccl instead
(:mod:`rankscope.collect.comms.timed_pg`): completion times and states, sampling (``--sample N``: time one
in N collectives, count all), the ring size (``--buffer``), Python stacks (``--stack``) and completion found
by polling instead of a callback (``--poll``).
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rankscope.collect.comms.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("RANKSCOPE_COMMS_DIR", "rankscope-comms"),
                   help="directory for the per-rank dumps fr_rank_<rank> (default $RANKSCOPE_COMMS_DIR or ./rankscope-comms)")
    p.add_argument("--watchdog", type=float, default=None, help="dump when a collective is pending this many seconds")
    p.add_argument("--buffer", type=int, default=2000, help="Flight Recorder ring size (entries per rank)")
    p.add_argument("--no-exit-dump", action="store_true", help="no dump when the script ends")
    p.add_argument("--timed", action="store_true",
                   help="record with rankscope's timed backend wrapper (completion times; see --sample, --stack)")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="with --timed: time one collective in N, count all (default 1: time every one)")
    p.add_argument("--stack", action="store_true", help="with --timed: keep each entry's Python stack")
    p.add_argument("--poll", action="store_true",
                   help="with --timed: find completion when the next collective is issued, not by a callback on "
                        "gloo's thread (2.5x cheaper on small steps; completion times to the next call)")
    p.add_argument("script", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = p.parse_args(argv)
    from rankscope.collect import comms
    from rankscope.collect.comms import timed_setup

    timed = timed_setup.from_env() or {}
    if a.timed or timed:
        timed = {"ring": a.buffer if a.timed else timed.get("ring", a.buffer),
                 "sample_every": a.sample or timed.get("sample_every", 1), "stack": a.stack or timed.get("stack", False),
                 "poll": a.poll or timed.get("poll", False)}
        timed_setup.install(**timed)
    else:
        comms.enable(a.buffer)
    rec = comms.Recorder(a.out, watchdog_s=a.watchdog, at_exit=not a.no_exit_dump).start()
    sys.argv = [a.script, *a.args]
    try:
        runpy.run_path(a.script, run_name="__main__")
    finally:
        rec.at_exit = False
        rec.stop()  # the watchdog thread first: no dump of its own in flight
        if not a.no_exit_dump:
            rec.dump("exit")


if __name__ == "__main__":
    main()
