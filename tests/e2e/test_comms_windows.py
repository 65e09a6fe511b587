"""Issue 14: collectives kept with the profiler window. With the recorder on, every window's trace gets
a sibling ``window-NNNN.collectives.json.gz`` (the recorder's entries of that window) and the model
gives each ``gloo:*`` span its process group and sequence number, so collectives are matched across
ranks by (group, sequence) instead of by order. Real 3-rank gloo job under torchrun, a sub-group
collective on two of the ranks; the same run read without the sibling files shows what order
matching does (the check that the test can fail)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module", params=["flight_recorder", "timed"])
def run_dir(request, tmp_path_factory) -> Path:
    """The job recorded by Flight Recorder, and by the timed backend (the unchanged script run under
    ``-m rankscope.collect.comms.run --timed``): the windows must come out the same."""
    run = tmp_path_factory.mktemp("win") / "run"
    (run.parent / "ENGINE").write_text(request.param)
    env = {**os.environ, "RANKSCOPE_COMMS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    if request.param == "timed":
        wrap = ["-m", "rankscope.collect.comms.run", "--timed", "--no-exit-dump", "--out", str(run.parent / "dumps")]
    else:
        wrap, env["TORCH_FR_BUFFER_SIZE"] = [], "2000"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                           *wrap, str(HERE / "comms_window_job.py"), str(run)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run


def _matched(run: Path) -> pl.DataFrame:
    from rankscope.analysis.comm.collectives import match_collectives
    from rankscope.model.run import load_run

    df = pl.from_arrow(match_collectives(load_run(run, jobs=1, cache_dir=run.parent / f"cache-{run.name}")))
    assert isinstance(df, pl.DataFrame)
    return df.filter(pl.col("op") == "all_reduce")


def test_each_window_keeps_its_collectives_beside_the_trace(run_dir):
    for r in range(3):
        files = sorted((run_dir / "ranks" / str(r)).glob("window-*.collectives.json.gz"))
        traces = sorted((run_dir / "ranks" / str(r)).glob("window-*.pt.trace.json.gz"))
        assert len(traces) == 2 and [f.name.split(".")[0] for f in files] == [t.name.split(".")[0] for t in traces]
        doc = json.loads(gzip.decompress(files[0].read_bytes()))
        assert doc["source"] == (run_dir.parent / "ENGINE").read_text()
        ops = [e[3] for e in doc["entries"]]
        # per captured step: DDP's bucket all-reduce, the world all_reduce, and the sub-group's on ranks 0, 1
        assert ops.count("gloo:all_reduce") == 2 * (3 if r < 2 else 2), ops
        assert doc["groups"]["0"]["ranks"] == "[0, 1, 2]"
        if r < 2:  # a rank outside the sub-group knows it only without a name
            assert doc["groups"]["1"]["ranks"] == "[0, 1]"
        meta = json.loads((run_dir / "ranks" / str(r) / "meta.json").read_text())
        assert [w.get("collectives_file") for w in meta["windows"]] == [f.name for f in files]


def test_gloo_collectives_matched_by_group_and_sequence(run_dir):
    df = _matched(run_dir)
    per = df.group_by(["pg_name", "instance"]).agg(pl.col("rank").sort(), pl.col("pg_ranks").first(),
                                                   pl.col("bytes").n_unique().alias("sizes"))
    world = per.filter(pl.col("pg_ranks") == "0,1,2")
    sub = per.filter(pl.col("pg_ranks") == "0,1")
    assert world.height == 8 and sub.height == 4, per  # 2 windows x 2 steps x (2 world, 1 sub-group)
    assert all(r == [0, 1, 2] for r in world["rank"].to_list())
    assert all(r == [0, 1] for r in sub["rank"].to_list())
    assert per["sizes"].max() == 1  # every instance: one size on all its ranks (the same call)
    # sequence numbers are Flight Recorder's, per group: the sub-group's count from 1 in its own group
    assert sorted(sub["instance"].to_list())[0] < sorted(world["instance"].to_list())[0]


def test_without_the_window_files_subgroup_calls_are_not_mixed_by_order(run_dir, tmp_path):
    """Without the recorder's files, ranks 0 and 1 (in the world and in a sub-group) cannot say which group
    each gloo call used: matched by order across the world they would mix the groups' calls (one "instance"
    holding calls of different sizes, before issue 25). They are matched with nothing, and said."""
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare)
    for f in bare.glob("ranks/*/window-*.collectives.json.gz"):
        f.unlink()
    for m in bare.glob("ranks/*/MANIFEST.json"):  # the files are gone on purpose: keep the manifest honest
        doc = json.loads(m.read_text())
        doc["files"] = {k: v for k, v in doc.get("files", {}).items() if not k.endswith(".collectives.json.gz")} \
            if isinstance(doc.get("files"), dict) else doc.get("files")
        m.write_text(json.dumps(doc))
    df = _matched(bare)
    assert set(df["rank"].to_list()) == {2}  # rank 2 is in no sub-group: its calls are the world's
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    res = run_all(load_run(bare, jobs=1, cache_dir=bare.parent / "cache-bare"), names=["collectives"])["collectives"]
    assert [(f.kind, f.ranks) for f in res.findings] == [("collectives_unattributed", (0, 1))]


def test_merged_timeline_names_group_sequence_and_size_and_links_the_same_call(run_dir, tmp_path):
    out = tmp_path / "t.json"
    done = subprocess.run([sys.executable, "-m", "rankscope.cli", "timeline", str(run_dir), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    coll = [e for e in ev if e.get("cat") == "collective"]
    sub = [e for e in coll if " · group 1 #" in e["name"]]
    assert {e["pid"] for e in sub} == {1, 2} and len(sub) == 8, sub[:2]  # ranks 0 and 1, 4 calls each
    assert all(e["name"].endswith("· 64 B") for e in sub)  # 16 float32
    flow = {}
    for e in coll:
        if e["args"].get("flow_id") is not None:
            flow.setdefault(e["args"]["flow_id"], set()).add((e["args"]["pg_name"], e["args"]["seq"], e["name"]))
    assert flow and all(len(v) == 1 for v in flow.values())  # a flow links the same (group, sequence) only
