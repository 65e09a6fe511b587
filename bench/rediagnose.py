"""Re-diagnose the kept runs of ``bench/stragglers.py --keep`` with the current rules.

The truth of each run comes from the benchmark's own log (its "real I: truth=KIND@RANK ..." lines); each
run directory OUT/realI is diagnosed again with the benchmark's ``diagnose``, so a rule change can be
checked on the very runs it was drawn from (and must be validated on a fresh seed as well).

    .venv/bin/python bench/rediagnose.py /tmp/st157.log /tmp/rs-st157
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.stragglers import diagnose  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="the output of bench/stragglers.py")
    ap.add_argument("out", help="its --out directory (run with --keep)")
    args = ap.parse_args()
    right = wrong = flagged = 0
    for m in re.finditer(r"^real (\d+): truth=(\w+)@(\w+) s=[\d.]+ -> (.*)$", Path(args.log).read_text(), re.M):
        i, kind, rank, old = m.groups()
        r = diagnose(Path(args.out) / f"real{i}")
        if kind == "None":
            ok = not r["found"]
            flagged += not ok
        else:
            ok = any(f[0] == int(rank) and f[1] == kind for f in r["found"])
            right, wrong = right + ok, wrong + (not ok)
        changed = "" if r["verdict"] == old else "   [changed]"
        print(f"real {i} {kind}@{rank}: {'ok ' if ok else 'MISS'} {r['verdict'][:150]}{changed}", flush=True)
    print(f"straggler runs, rank and cause right: {right}/{right + wrong}; healthy runs flagged: {flagged}")


if __name__ == "__main__":
    main()
