"""Edges between ranks on real gloo jobs (issue 25), each profiled with rankscope.profile as a new user
would: a 4-stage pipeline (torch.distributed.pipelining, GPipe and 1F1B), FSDP2 on 2 ranks, a 2 x 2
DeviceMesh with tensor parallel x FSDP2, and a mixture of experts whose all_to_all splits are uneven.

The truth comes from the jobs, not from rankscope: the pipeline's schedule (messages per step and their
size), torch's own names for the mesh's groups (``get_process_group_ranks``), Flight Recorder's entries
(torch's recorder) for the sequence numbers, and the split sizes the MoE job passed to ``all_to_all_single``.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.procs import kill_tree

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
NAMES = ["collectives", "clock", "comm_matrix", "links"]


def _torchrun(script: str, ranks: int, run: Path, *args: str, env: dict[str, str] | None = None) -> Path:
    """The job under torchrun with no recorder setting of its own (``import rankscope`` decides)."""
    base = {k: v for k, v in os.environ.items() if k not in ("TORCH_FR_BUFFER_SIZE", "RANKSCOPE_COMMS")}
    full = {**base, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1]), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc-per-node={ranks}", str(HERE / script), str(run), *args], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)  # a hang bound only
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert proc.returncode == 0, out[-4000:]
    return run


def _job(run: Path, rank: int) -> dict[str, Any]:
    return json.loads((run / f"job-{rank}.json").read_text())


def _load(run: Path) -> Any:
    return load_run(run, jobs=1, cache_dir=run.parent / f"cache-{run.name}")


def _kinds(res: dict[str, Any]) -> dict[str, list[str]]:
    return {k: sorted(f.kind for f in v.findings) for k, v in res.items()}


# ---- pipeline ----

@pytest.fixture(scope="module", params=["gpipe", "1f1b"])
def pipeline(request, tmp_path_factory) -> Path:
    return _torchrun("pipeline_job.py", 4, tmp_path_factory.mktemp("pp") / "run", request.param)


def test_pipeline_every_send_and_receive_counted_and_paired(pipeline):
    run = _load(pipeline)
    job = _job(pipeline, 0)
    per_step = job["microbatches"] * job["captured_steps"]
    for r in run.rank_ids:
        c = pl.from_arrow(run.table(r, "collectives")).group_by("op").len()
        counts = dict(c.iter_rows())
        ends = r in (0, 3)  # the first and last stage talk to one neighbour, the others to two
        assert counts == {"send": per_step * (1 if ends else 2), "recv": per_step * (1 if ends else 2)}, (r, counts)
    res = run_all(run, names=NAMES)
    assert "collective_count_mismatch" not in _kinds(res)["collectives"]
    assert "collective_op_mismatch" not in _kinds(res)["collectives"]
    p = pl.from_arrow(res["collectives"].tables["p2p"])
    assert p.height == 6 * per_step and p["paired"].all()
    assert (p["bytes"] == job["message_bytes"]).all() and (p["recv_bytes"] == job["message_bytes"]).all()
    m = {(s, d): (b, n) for s, d, b, n in pl.from_arrow(res["comm_matrix"].tables["matrix"])
         .select("src", "dst", "bytes", "count").iter_rows()}
    hops = [(0, 1), (1, 2), (2, 3), (1, 0), (2, 1), (3, 2)]  # activations forward, gradients back
    assert m == {h: (float(per_step * job["message_bytes"]), per_step) for h in hops}


def test_pipeline_on_one_host_keeps_its_clock_anchors(pipeline):
    """No false matches, so nothing pulls the clocks: every rank ran on this host (meta.json), and its
    offset stays within its anchors' error; no drift; no clock warning."""
    run = _load(pipeline)
    res = run_all(run, names=["collectives", "clock"])
    clock = res["clock"]
    assert {run.ranks[r].host for r in run.rank_ids} == {"node-0"}
    for r in run.rank_ids[1:]:
        info = run.ranks[r]
        assert abs(clock.summary["offsets_ns"][str(r)] - info.clock_offset_ns) <= abs(info.clock_error_ns), r
        assert clock.summary["source"][str(r)].startswith("anchors (same host)")
    assert clock.summary["drift_applied_ppm"] == {}
    assert [f for f in clock.findings if f.severity.value != "info"] == []


# ---- FSDP2 ----

@pytest.fixture(scope="module")
def fsdp(tmp_path_factory) -> Path:
    return _torchrun("fsdp_job.py", 2, tmp_path_factory.mktemp("fsdp") / "run")


def test_fsdp2_collectives_carry_group_and_sequence_by_default(fsdp):
    """No comms=True, no TORCH_FR_BUFFER_SIZE: the recorder's window files are there, and every gloo
    collective gets Flight Recorder's sequence number (reduce_scatter, which gloo runs as an all_reduce
    and the recorder names so, included)."""
    run = _load(fsdp)
    for r in run.rank_ids:
        meta = json.loads((fsdp / "ranks" / str(r) / "meta.json").read_text())
        assert meta["collectives_recorder"] == "flight_recorder"
        (win,) = sorted((fsdp / "ranks" / str(r)).glob("window-*.collectives.json.gz"))
        recorded = sorted(e[1] for e in json.loads(gzip.decompress(win.read_bytes()))["entries"] if not e[2])
        c = pl.from_arrow(run.table(r, "collectives"))
        assert sorted(c["seq"].to_list()) == recorded  # each call got one of torch's own sequence numbers
        assert dict(c.group_by("op").len().iter_rows()) == {"all_gather": 8 * 2, "reduce_scatter": 4 * 2}
    res = run_all(run, names=NAMES)
    assert res["collectives"].findings == [] and res["collectives"].summary["matched_by"] == {"seq": 24}


def test_fsdp2_wait_inside_its_spans_is_communication(fsdp):
    """Rank 1 loads data 20 ms longer per step; rank 0 waits for it inside FSDP's all-gather span, in
    Work.wait(), which no event records. FSDP's gather / reduce spans are communication; pre_forward is not."""
    run = _load(fsdp)
    wait = {}
    for r in run.rank_ids:
        ev = pl.from_arrow(run.table(r, "events", columns=["name", "dur", "is_comm"])).with_columns(
            pl.col("name").cast(pl.Utf8))
        flags = dict(ev.group_by(pl.col("name").str.replace(r" \(\d+\)$", "")).agg(pl.col("is_comm").all()).iter_rows())
        assert flags["FSDP::all_gather"] and flags["FSDP::post_backward_reduce"] and flags["c10d::_allgather_base_"]
        assert not flags["FSDP::pre_forward"] and not flags["fsdp::all_gather_copy_in"]
        gathers = ev.filter(pl.col("name").str.starts_with("FSDP::all_gather ("))
        wait[r] = gathers["dur"].sum() / 2  # per captured step
    assert wait[0] - wait[1] > 10_000_000, wait  # at least half of rank 1's extra 20 ms, waited in FSDP's span


def test_without_the_recorder_it_says_so_and_one_group_is_matched_by_order(tmp_path):
    """Flight Recorder's ring switched off (TORCH_FR_BUFFER_SIZE=0, which import rankscope leaves alone):
    meta.json says why nothing was recorded; FSDP2 on one group is still matched, by order."""
    run = _torchrun("fsdp_job.py", 2, tmp_path / "run", env={"TORCH_FR_BUFFER_SIZE": "0"})
    meta = json.loads((run / "ranks" / "0" / "meta.json").read_text())
    assert meta["collectives_recorder"].startswith("off: ") and "TORCH_FR_BUFFER_SIZE" in meta["collectives_recorder"]
    assert not list((run / "ranks" / "0").glob("window-*.collectives.json.gz"))
    res = run_all(_load(run), names=["collectives"])["collectives"]
    assert res.summary["matched_by"] == {"order": 24} and res.findings == []


# ---- 2-D: tensor parallel x FSDP2 ----

@pytest.fixture(scope="module")
def tp_fsdp(tmp_path_factory) -> Path:
    return _torchrun("tp_fsdp_job.py", 4, tmp_path_factory.mktemp("tp") / "run")


def test_2d_groups_in_run_json_and_collectives_matched_in_their_groups(tp_fsdp):
    run = _load(tp_fsdp)
    truth = {tuple(g) for r in range(4) for g in _job(tp_fsdp, r)["groups"].values()} | {(0, 1, 2, 3)}
    written = json.loads((tp_fsdp / "run.json").read_text())["process_groups"]
    assert {tuple(g["ranks"]) for g in written} == truth  # every rank's groups, not only rank 0's
    res = run_all(run, names=NAMES)
    inst = pl.from_arrow(res["collectives"].tables["instances"])
    assert inst.height and set(inst["matched_by"]) == {"seq"}
    assert {tuple(int(x) for x in g.split(",")) for g in inst["pg_ranks"]} == truth - {(0, 1, 2, 3)}
    assert (inst["n_ranks"] == 2).all()  # every call found on both members of its group
    assert _kinds(res)["collectives"] == []  # no "fewer collectives", no "different ops"
    for f in res["links"].findings:  # a slow group may show on a busy host; never a ratio over nothing
        ev = f.evidence
        assert ev["peers_median_ns"] >= 1_000 and ev["ratio"] == pytest.approx(ev["transfer_ns"] / ev["peers_median_ns"])
    pairs = {(s, d) for s, d in pl.from_arrow(res["comm_matrix"].tables["matrix"]).select("src", "dst").iter_rows()}
    assert (0, 3) not in pairs and (3, 0) not in pairs and (1, 2) not in pairs and (0, 1) in pairs and (0, 2) in pairs
    ev = pl.from_arrow(run.table(0, "events", columns=["name", "is_comm"])).with_columns(pl.col("name").cast(pl.Utf8))
    funct = ev.filter(pl.col("name").str.starts_with("_c10d_functional::"))
    assert funct.height and funct["is_comm"].all()  # TP's all_reduce and wait_tensor are communication


def test_2d_without_the_recorder_matches_nothing_across_the_world_and_says_why(tp_fsdp, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tp_fsdp, bare, ignore=shutil.ignore_patterns("analysis", "*.collectives.json.gz"))
    for m in bare.glob("ranks/*/MANIFEST.json"):
        doc = json.loads(m.read_text())
        doc["files"] = [f for f in doc["files"] if not f["path"].endswith(".collectives.json.gz")]
        m.write_text(json.dumps(doc))
    res = run_all(_load(bare), names=NAMES)
    (f,) = res["collectives"].findings
    assert f.kind == "collectives_unattributed" and f.severity.value == "warning" and f.ranks == (0, 1, 2, 3)
    assert res["collectives"].summary["instances"] == 0 and res["comm_matrix"].skipped


# ---- mixture of experts ----

@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    return _torchrun("moe_job.py", 4, tmp_path_factory.mktemp("moe") / "run")


def test_moe_matrix_is_the_split_sizes_the_job_passed(moe):
    truth: dict[tuple[int, int], int] = {}
    for r in range(4):
        j = _job(moe, r)
        for step in j["captured"]:
            for call in j["splits"][step]:
                for d, rows in enumerate(call):
                    if d != r:
                        truth[(r, d)] = truth.get((r, d), 0) + rows * j["row_bytes"]
            for d in range(4):  # the split sizes' own exchange: one int64 to each rank
                if d != r:
                    truth[(r, d)] = truth.get((r, d), 0) + j["count_exchange_bytes"]
    res = run_all(_load(moe), names=NAMES)["comm_matrix"]
    m = pl.from_arrow(res.tables["matrix"]).filter(pl.col("op") == "all_to_all")
    assert {(s, d): b for s, d, b in m.select("src", "dst", "bytes").iter_rows()} == truth
    assert m["exact"].all()
    into = m.group_by("dst").agg(pl.col("bytes").sum()).sort("bytes", descending=True)
    assert into["dst"][0] == 1  # the skewed router sends most to expert 1: drawn as traffic *to* rank 1
