"""A slow task-queue thread on one rank of a simulated torch_npu run: is it named, and is its what-if right?

For each rank of a 4-rank (TP 2 x PP 2) and an 8-rank (TP 2 x PP 4) job (``rankscope.synth.ascend_run`` with
torch_npu's task queue), that rank's queue thread takes 600, 1500 or 3000 µs per Dequeue (the others 19 µs). Each run
is compared with the same job without the slow thread (its twin): the step's change, whether the straggler verdict
names the rank, which rank bounds the critical path, and the slow rank's what-if against the twin's step. Deterministic
(a simulation): one pass, no repeats.

    PYTHONPATH=. .venv/bin/python bench/ascend_dispatch.py
"""
from __future__ import annotations

import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from rankscope.synth.ascend_run import write_run
from rankscope.synth.ascend_sim import AscendJob


def step_ms(run) -> float:
    return statistics.median((e - s) / 1e6 for r in run.rank_ids
                             for s, e in zip(run.table(r, "steps").column("ts").to_pylist(),
                                             run.table(r, "steps").column("end").to_pylist()))


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="rankscope-dispatch-"))
    print("| ranks | slow rank | µs per Dequeue | step vs twin | named | bounding rank | what-if vs twin |")
    print("|---|---|---|---|---|---|---|")
    for ranks, per_node in ((4, 2), (8, 4)):
        base = AscendJob(ranks=ranks, per_node=per_node, tp=2, task_queue=True, slow_rank=None, slow_link=None)
        write_run(root / f"twin{ranks}", base)
        twin = load_run(root / f"twin{ranks}", jobs=1)
        truth = step_ms(twin)
        named = [f.ranks for f in run_all(twin)["straggler"].findings]
        print(f"| {ranks} | twin | 19 | {truth:.2f} ms | {named or '-'} | | |")
        for rank in range(ranks):
            for us in (600.0, 1500.0, 3000.0):
                name = f"r{ranks}_{rank}_{int(us)}"
                write_run(root / name, replace(base, slow_dispatch=(rank, us)))
                run = load_run(root / name, jobs=1)
                res = run_all(run)
                cp = res["critical_path"].summary
                wi = {w["rank"]: w for w in cp["what_if"]}[rank]["step_ms_if_median"]
                named = [f.ranks for f in res["straggler"].findings]
                print(f"| {ranks} | {rank} | {us:.0f} | {(step_ms(run) / truth - 1) * 100:+.1f} % | {named or '-'} | "
                      f"{cp['bounding_rank']} | {(wi / truth - 1) * 100:+.1f} % |")


if __name__ == "__main__":
    main()
