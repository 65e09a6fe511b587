"""Print, per run, the critical path's bounding rank as the straggler verdict reads it (``bound.Bound``) beside the
data excess of its own timers (``path_choice.data_excess``) and whether the 2-rank / many-rank data bar
(``Bound.clears_bar_on_data``) holds: how near a healthy twin came to being named, and how far over the bar a
straggler stood.

    .venv/bin/python bench/bound_probe.py /tmp/wl-sweep.json [--families fsdp-data,fsdp-healthy]
    .venv/bin/python bench/bound_probe.py RUN [RUN ...]

Reads bench/workloads.py's results file (``--keep``: its rows name each run's directory) or run directories, and
analyzes each run in this process with the current tree (the ingest cache is kept).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def runs(paths: list[str], families: set[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for p in paths:
        if p.endswith(".json"):
            out += [(f"{r['i']} {r['family']}@{r['ranks']}", r["run"]) for r in json.loads(Path(p).read_text())["rows"]
                    if not families or r["family"] in families]
        else:
            out.append((Path(p).name, p))
    return out


def probe(run_dir: str) -> str:
    """The bounding rank's numbers, read where the verdict reads them (``straggler.choose``)."""
    from rankscope.analysis.diagnosis import straggler
    from rankscope.analysis.diagnosis.path_choice import data_excess
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    seen: list[str] = []
    choose = straggler.choose

    def spy(ctx: Any, b: Any) -> Any:
        if b is not None:
            de = data_excess(ctx.pr, b.rank)
            seen.append(f"rank {b.rank} bounds {b.steps}/{b.of_steps} steps, {b.share:.1%} of the step, cost "
                        f"{b.cost_ns / 1e6:.1f} ms at {b.cost_ns / b.others_best_ns if b.others_best_ns > 0 else 0:.2f}x "
                        f"the others' best; data on its path {b.path.get('data', 0.0) / 1e6:.1f} ms, data excess "
                        f"{de / 1e6:.1f} ms (needs {b.cost_ns / 2e6:.1f}); clears_bar_on_data {b.clears_bar_on_data(de)}")
        return choose(ctx, b)

    straggler.choose = spy
    try:
        run_all(load_run(run_dir))
    finally:
        straggler.choose = choose
    return seen[0] if seen else "no bounding rank (no critical path)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="bench/workloads.py results (.json) or run directories")
    ap.add_argument("--families", default="", help="comma-separated families to probe (results files only)")
    args = ap.parse_args()
    for name, run_dir in runs(args.paths, {f for f in args.families.split(",") if f}):
        print(f"{name}: {probe(run_dir)}", flush=True)


if __name__ == "__main__":
    main()
