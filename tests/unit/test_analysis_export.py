"""`rankscope analyze --export` through the real CLI on a tiny hand-made 2-rank gloo run."""
import json
import subprocess
import sys

import pyarrow.parquet as pq

from tests.helpers import write_trace, x


def _rank(extra: float):
    ev = []
    for k, t0 in ((1, 0.0), (2, 100.0 + extra)):
        ev += [x(f"ProfilerStep#{k}", t0, 100.0 + extra, "user_annotation"), x("aten::mm", t0 + 10, 40 + extra),
               x("gloo:all_reduce", t0 + 50 + extra, 40, "user_annotation", tid=2,
                 **{"Input Dims": [[1000]], "Input type": ["float"]})]
    return ev


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", *args], capture_output=True,
                          text=True, timeout=120)


def test_export_parquet_and_json_summary(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "r0.json", _rank(0), rank=0)
    write_trace(run / "r1.json", _rank(20), rank=1)
    out = tmp_path / "out"
    p = _cli(str(run), "-j", "1", "--export", "parquet", "--export-dir", str(out), "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert "CPU-only" in summary["analyses"]["kernels"]["skipped"]
    bd = pq.read_table(out / "breakdown.breakdown.parquet").to_pylist()
    assert len(bd) == 4 and {r["source"] for r in bd} == {"host"}
    # the slow rank's extra 20 µs per step shows up as compute, not as communication or idle
    by = {(r["rank"], r["step"]): r for r in bd}
    for s in (1, 2):
        assert by[(1, s)]["computing"] - by[(0, s)]["computing"] == 20_000
        assert by[(1, s)]["wall"] - by[(0, s)]["wall"] == 20_000
    inst = pq.read_table(out / "collectives.instances.parquet").to_pylist()
    assert [i["n_ranks"] for i in inst] == [2, 2] and all(i["bytes"] == 4000 for i in inst)
    csv = (out / "cluster_step_trace_time.csv").read_text().splitlines()
    assert csv[0].startswith("Step,Type,Index,Computing") and len(csv) == 5
    assert json.loads((out / "summary.json").read_text())["memory"]["skipped"]


def test_export_csv_every_table(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "r0.json", _rank(0), rank=0)
    write_trace(run / "r1.json", _rank(0), rank=1)
    p = _cli(str(run), "-j", "1", "--export", "csv", "--export-dir", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    files = {f.name for f in (tmp_path / "o").iterdir()}
    assert {"breakdown.step_trace_time.csv", "opstats.operators.csv", "comm_matrix.matrix.csv",
            "trajectory.trajectory.csv", "cluster_communication.json"} <= files
