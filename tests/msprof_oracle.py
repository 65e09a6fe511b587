"""Run msprof-analyze (the owner of the Ascend cluster formats) and compare its files with rankscope's.

``python -m tests.msprof_oracle RUN_DIR`` prints "N of M values agree" per file and the first
differences. A value is one leaf of the JSON files (path of keys) or one cell of the CSV (keyed by
Step, Type, Index and column); numbers agree within 1e-9 relative, strings exactly. A value only
one side has counts as a disagreement.
"""
from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FILES = ("cluster_step_trace_time.csv", "cluster_communication.json", "cluster_communication_matrix.json",
         "communication_group.json")


def msprof_bin() -> Path:
    return Path(sys.executable).parent / "msprof-analyze"


def run_msprof(run_dir: Path, out: Path) -> Path:
    """``msprof-analyze cluster -d RUN -m all -o OUT`` on a copy (it writes next to its input)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "run"
        shutil.copytree(run_dir, src)
        p = subprocess.run([str(msprof_bin()), "cluster", "-d", str(src), "-m", "all", "-o", str(out)],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"msprof-analyze failed: {p.stderr[-2000:]}")
    return out / "cluster_analysis_output"


def run_rankscope(run_dir: Path, out: Path) -> Path:
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", str(run_dir), "-j", "1", "--export",
                        "json", "--export-dir", str(out)], capture_output=True, text=True, timeout=300)
    if p.returncode not in (0, 1, 2):
        raise RuntimeError(f"rankscope failed: {p.stderr[-2000:]}")
    return out


def _leaves(x: Any, path: tuple = ()) -> dict[tuple, Any]:
    if isinstance(x, dict):
        out: dict[tuple, Any] = {}
        for k, v in x.items():
            out.update(_leaves(v, path + (str(k),)))
        return out or {path: {}}
    if isinstance(x, list) and x and all(isinstance(v, list) for v in x):  # lists of groups: order-free
        return {path: sorted(sorted(v) for v in x)}
    return {path: x}


def _csv(path: Path) -> dict[tuple, Any]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {(r["Step"], r["Type"], r["Index"], k): v for r in rows for k, v in r.items()
            if k not in ("Step", "Type", "Index")}


def _same(a: Any, b: Any) -> bool:
    try:
        fa, fb = float(a), float(b)
        return math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return a == b


def values(path: Path) -> dict[tuple, Any]:
    if not path.is_file():
        return {}
    if path.suffix == ".csv":
        return _csv(path)
    doc = json.loads(path.read_text())
    if path.name == "communication_group.json":  # records: keyed by group name, rank set order-free
        doc = {**{k: v for k, v in doc.items() if k != "comm_group_parallel_info"},
               "info": {r["group_name"]: {**r, "rank_set": sorted(r["rank_set"])}
                        for r in doc.get("comm_group_parallel_info", [])}}
    return _leaves(doc)


def compare(ref_dir: Path, got_dir: Path) -> dict[str, tuple[int, int, list[str]]]:
    """Per file: (values that agree, values in either file, first differences)."""
    out = {}
    for name in FILES:
        ref, got = values(ref_dir / name), values(got_dir / name)
        keys = list(ref) + [k for k in got if k not in ref]
        ok = [k for k in keys if k in ref and k in got and _same(ref[k], got[k])]
        bad = [f"{'/'.join(map(str, k))}: msprof {ref.get(k, '<absent>')!r} rankscope {got.get(k, '<absent>')!r}"
               for k in keys if k not in set(ok)]
        out[name] = (len(ok), len(keys), bad[:10])
    return out


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    with tempfile.TemporaryDirectory() as tmp:
        ref = run_msprof(run_dir, Path(tmp) / "msprof")
        got = run_rankscope(run_dir, Path(tmp) / "rankscope")
        res = compare(ref, got)
    total = [0, 0]
    for name, (ok, n, bad) in res.items():
        total[0] += ok
        total[1] += n
        print(f"{name}: {ok} of {n} values agree")
        for b in bad[:5]:
            print("   ", b)
    print(f"all: {total[0]} of {total[1]} values agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
