"""Judge the kept runs of ``bench/workloads.py --keep`` again with the current tree: the same truth, the same
criterion (bench/workloads.py ``verdict`` and ``one``: straggler families exactly one rank named with the truth's
rank and cause; healthy twins nothing named), today's rules.

    .venv/bin/python bench/workloads_rejudge.py /tmp/wl-sweep.json [--families fsdp-data,pp-1f1b-healthy]
        [--ranks 4] [--out NEW.json]
    .venv/bin/python bench/workloads_rejudge.py /tmp/wl-sweep.log --dir /tmp/wl-sweep    (a sweep stopped early)

Reads the sweep's results file (its rows name each run's directory and the verdict it got then; or its printed
log, one line per run, with the --out directory it wrote the runs to), drops each
run's analysis cache, analyzes it again, and prints per family and rank count: right then, right now, and every
run whose verdict changed. A rule change is checked on the very runs it was drawn from here; it still needs a
fresh seed to be measured.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import stage_named, verdict  # noqa: E402  (bench/workloads.py: the same verdict reading)


def from_log(log: Path, out: Path) -> list[dict]:
    """Rows from bench/workloads.py's printed lines ("12 fsdp-data@4 rank=3 amount=... ms: ok  <verdict>"); the
    run of line N is OUT/run(N-1). The verdict then is known as right or not, not its findings."""
    import re

    rows = []
    for m in re.finditer(r"^(\d+) ([\w-]+)@(\d+) rank=(-?\d+) .*?: (ok|MISS)", log.read_text(), re.M):
        n, fam, ranks, _, ok = m.groups()
        rows.append({"i": int(n), "family": fam, "ranks": int(ranks), "ok": ok == "ok", "found": None,
                     "run": str(out / f"run{int(n) - 1}")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="bench/workloads.py --json file of a run made with --keep")
    ap.add_argument("--families", default=None, help="comma list of families (default: all in the file)")
    ap.add_argument("--ranks", default=None, help="comma list of rank counts (default: all)")
    ap.add_argument("--out", default=None, help="write the new rows here (JSON)")
    ap.add_argument("--dir", default=None, help="with a log: the sweep's --out directory (runs OUT/runI)")
    ap.add_argument("--keep-cache", action="store_true",
                    help="keep each run's ingest cache (RUN/analysis/cache): for rule changes after ingest only")
    ap.add_argument("--workers", type=int, default=1, help="runs analyzed at once")
    args = ap.parse_args()
    rows = from_log(Path(args.results), Path(args.dir)) if args.dir else json.loads(Path(args.results).read_text())["rows"]
    fams = set(args.families.split(",")) if args.families else None
    ranks = {int(x) for x in args.ranks.split(",")} if args.ranks else None
    before: dict[tuple[str, int], list[bool]] = defaultdict(list)
    after: dict[tuple[str, int], list[bool]] = defaultdict(list)
    new_rows = []
    todo = []
    for r in rows:
        if (fams and r["family"] not in fams) or (ranks and r["ranks"] not in ranks):
            continue
        d = Path(r["run"])
        if not (d / "truth.json").exists():
            print(f"{r['i']} {r['family']}@{r['ranks']}: run not kept ({d})", flush=True)
            continue
        if not args.keep_cache:
            shutil.rmtree(d / "analysis", ignore_errors=True)
        todo.append(r)
    with ThreadPoolExecutor(max(1, args.workers)) as pool:  # each verdict is its own `rankscope analyze` process
        verdicts = list(pool.map(lambda r: verdict(Path(r["run"])), todo))
    for r, v in zip(todo, verdicts):
        d = Path(r["run"])
        truth = json.loads((d / "truth.json").read_text())
        want = [(truth["slow_rank"], truth["cause"])] if truth["straggler"] else []
        ok = v["found"] == want or stage_named(truth, v["found"])  # any rank of a bottleneck stage with replicas
        key = (r["family"], r["ranks"])
        before[key].append(bool(r["ok"]))
        after[key].append(bool(ok))
        if ok != r["ok"] or (r["found"] is not None and [list(x) for x in v["found"] or []] != r["found"]):
            print(f"{r['i']} {r['family']}@{r['ranks']} truth={want}: {'ok' if r['ok'] else 'MISS'} -> "
                  f"{'ok' if ok else 'MISS'}  {v['text'][:160]}", flush=True)
        new_rows.append({**r, "ok": ok, "found": v["found"], "verdict": v["text"], "was_ok": r["ok"],
                         "critical_path": v.get("critical_path"), "was_critical_path": r.get("critical_path"),
                         "bounding": v.get("bounding")})
    print("| family | ranks | runs | right then | right now |\n|---|---|---|---|---|")
    for key in sorted(after):
        print(f"| {key[0]} | {key[1]} | {len(after[key])} | {sum(before[key])} | {sum(after[key])} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": new_rows}, indent=1))


if __name__ == "__main__":
    main()
