"""The latency of a run's point-to-point messages, per run: how it is spread, and its sum per step (issue 25).

A message's latency is a receive's return after both its side and its send were posted (the ``collectives``
analysis' p2p table, paired messages, as ``analysis.diagnosis.pipeline.hop_latency`` reads it; that function
takes the median). The pipeline what-if replays each message at the median; where the tail is long (both stages
computing on a shared host, gloo's threads waiting for a CPU), the sum per step says how much the replay leaves out.

    .venv/bin/python bench/p2p_latency.py RUN [RUN ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rankscope.analysis.base import frame  # noqa: E402
from rankscope.analysis.registry import run_all  # noqa: E402
from rankscope.model.run import load_run  # noqa: E402


def latency(run_dir: str) -> dict[str, float] | None:
    res = run_all(load_run(run_dir))
    col = res.get("collectives")
    if col is None or col.skipped or "p2p" not in col.tables:
        return None
    p2p = pl.from_arrow(col.tables["p2p"])
    assert isinstance(p2p, pl.DataFrame)
    p2p = p2p.filter(pl.col("paired"))
    lat = p2p.select(lat=(pl.col("recv_end") - pl.max_horizontal("send_start", "recv_start")) / 1e6)["lat"]
    lat = lat.filter(lat >= 0)
    steps = max(frame(res["breakdown"].tables["breakdown"])["step"].n_unique(), 1)  # the steps the messages span
    if lat.len() == 0:
        return None
    return {"messages": lat.len(), "median_ms": float(lat.median() or 0.0), "mean_ms": float(lat.mean() or 0.0),
            "p90_ms": float(lat.quantile(0.9) or 0.0), "max_ms": float(lat.max() or 0.0),  # type: ignore[arg-type]
            "sum_per_step_ms": float(lat.sum()) / steps, "steps": steps}


def main() -> None:
    print("| run | messages | median ms | mean ms | p90 ms | max ms | sum per step ms (steps) |")
    print("|---|---|---|---|---|---|---|")
    for d in sys.argv[1:]:
        got = latency(d)
        if got is None:
            print(f"| {Path(d).name} | no paired p2p messages | | | | | |")
            continue
        print(f"| {Path(d).name} | {got['messages']} | {got['median_ms']:.3f} | {got['mean_ms']:.3f} | "
              f"{got['p90_ms']:.3f} | {got['max_ms']:.1f} | {got['sum_per_step_ms']:.1f} ({got['steps']}) |")


if __name__ == "__main__":
    main()
