"""How long `rankscope hang` takes on many ranks' dumps: read every file, then diagnose.

    python bench/hang_scale.py --ranks 256 --entries 2000 [--code DIR]

Writes one Flight Recorder pickle per rank (torch's format, pg_config filled in, one group, every rank
``--entries`` all_reduce entries, rank 3 one short: a hang) to a temporary directory, then times
``frdump.read`` over the files and ``diagnose`` over the dumps, best of ``--repeat``. ``--code DIR``: import
rankscope from DIR instead (e.g. ``git archive <commit> rankscope | tar -x -C DIR``) to compare with older code
on the same files.
"""
from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path


def write(out: Path, ranks: int, entries: int) -> None:
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
    for r in range(ranks):
        ents = [{"record_id": i, "process_group": ("0", "default_pg"), "collective_seq_id": i + 1, "p2p_seq_id": 0,
                 "op_id": i + 1, "is_p2p": False, "profiling_name": "nccl:all_reduce", "input_sizes": [[1000]],
                 "output_sizes": [[1000]], "input_dtypes": ["Float"], "output_dtypes": ["Float"], "state": "completed",
                 "time_created_ns": 1_700_000_000_000_000_000 + i * 1000, "timeout_ms": 600_000,
                 "frames": [{"name": "train", "filename": "train.py", "line": 10}]}
                for i in range(entries - (r == 3))]
        (out / f"rank_{r}").write_bytes(pickle.dumps({"version": "2.10", "entries": ents, "pg_config": cfg}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--code", default=None)
    a = ap.parse_args()
    if a.code:
        sys.path.insert(0, a.code)
    from rankscope.analysis.hang import diagnose
    from rankscope.model.readers import frdump

    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp), a.ranks, a.entries)
        best_read = best_diag = float("inf")
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            dumps = [frdump.read(f) for f in frdump.find(tmp)]
            t1 = time.perf_counter()
            v = diagnose(dumps, a.ranks)
            t2 = time.perf_counter()
            best_read, best_diag = min(best_read, t1 - t0), min(best_diag, t2 - t1)
    print(f"{a.ranks} ranks x {a.entries} entries ({a.code or 'this checkout'}): read {best_read:.2f} s, "
          f"diagnose {best_diag:.2f} s; {v.headline[:90]}")


if __name__ == "__main__":
    main()
