"""Which straggler verdicts does the own-CPU-work test of ``cpu.is_contention`` change? (issue 23)

Re-analyzes every kept run under ROOT that has scheduler samples (``runq_wait_ns`` in a rank's meta.json) and
prints the findings whose run-queue share alone (``share_of_excess`` >= CONTENTION_SHARE) would have said
"contention" but whose own CPU time grew by its extra work, so the verdict now names that work; with the truth
where the run has one (bench/workloads.py's truth.json, or the demo's / LM job's metadata).

usage: .venv/bin/python bench/contention_rescan.py [ROOT ...]   (default: /tmp)
"""
from __future__ import annotations

import glob
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rankscope.analysis.diagnosis.cpu import CONTENTION_SHARE, is_contention  # noqa: E402
from rankscope.analysis.registry import run_all  # noqa: E402
from rankscope.model.run import load_run  # noqa: E402


def runs(root: str) -> list[Path]:
    out: set[Path] = set()
    for meta in glob.glob(f"{root}/**/ranks/*/meta.json", recursive=True):
        try:
            if '"runq_wait_ns"' not in Path(meta).read_text()[:200_000]:
                continue
        except OSError:
            continue
        p = Path(meta)
        while p.name != "ranks":
            p = p.parent
        out.add(p.parent)
    return sorted(out)


def truth(run: Path) -> tuple[Any, Any]:
    t = run / "truth.json"
    if t.exists():
        doc = json.loads(t.read_text())
        return doc.get("slow_rank"), doc.get("cause")
    metas = sorted(run.glob("ranks/*/meta.json"))
    md = (json.loads(metas[0].read_text()).get("metadata") or {}) if metas else {}
    if "demo" in md:
        return md["demo"].get("slow_rank"), md["demo"].get("slow_kind")
    if "workload" in md:
        return md["workload"].get("slow_rank"), "imbalance" if md["workload"].get("imbalance") else None
    return None, None


def main() -> int:
    n = changed = 0
    for root in sys.argv[1:] or ["/tmp"]:
        for run in runs(root):
            try:
                st = run_all(load_run(str(run), jobs=1))["straggler"]
            except Exception as exc:  # noqa: BLE001 - a broken kept run is skipped and said
                print(f"skipped {run}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            n += 1
            for f in st.findings:
                w = f.evidence.get("cpu_wait")
                if f.kind == "straggler" and w and w["share_of_excess"] >= CONTENTION_SHARE and not is_contention(w):
                    changed += 1
                    print(f"{run}: rank {f.ranks[0]} {f.evidence['cause']} (was contention); CPU +"
                          f"{w['cpu_excess_ns'] / 1e6:.1f} ms of own +{w['own_excess_ns'] / 1e6:.1f} ms per step, "
                          f"others' CPU {w['others_cpu_ns'] / 1e6:.1f} ms; truth: rank {truth(run)[0]}, {truth(run)[1]}")
    print(f"{n} runs analyzed, {changed} findings changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
