"""Tests of the synthetic run generator (rankscope.synth) and the `rankscope synth` verb.

Small runs (4 ranks = tp 2 x dp 2, 3 steps, ~40 ops/step) written to tmp dirs; every check
reads the files back the way a consumer would (gzip + JSON), nothing is mocked.
"""
from __future__ import annotations

import gzip
import hashlib
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest

from rankscope.cli import main
from rankscope.errors import RankscopeError
from rankscope.synth import generate

RANKS, STEPS, OPS = 4, 3, 40
SKEW_RANK, SKEW_S = 2, -0.25
COLL_KEYS = {"Collective name", "dtype", "In msg nelems", "Out msg nelems", "In split size", "Out split size",
             "Global rank start", "Global rank stride", "Group size", "Process Group Name",
             "Process Group Description", "Process Group Ranks", "Rank", "Seq"}


def _gen(path: Path, **kw: object) -> Path:
    args = dict(ranks=RANKS, steps=STEPS, ops_per_step=OPS, seed=1, stragglers=["3:compute:1.5"],
                slow_links=["0-1:3.0"], clock_skew_s=0.5, skews=[f"{SKEW_RANK}:{SKEW_S}"])
    args.update(kw)
    return generate(path, **args)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gen(tmp_path_factory.mktemp("synth") / "run")


def _trace(run: Path, rank: int) -> dict:
    return orjson.loads(gzip.decompress((run / "ranks" / str(rank) / f"rank{rank}.pt.trace.json.gz").read_bytes()))


def _truth(run: Path) -> dict:
    return orjson.loads((run / "synth_truth.json").read_bytes())


def _true_ns(doc: dict, truth: dict, rank: int, ts_us: float) -> int:
    """Rank-local Kineto ts -> true-clock ns using the recorded clock offset (drift is 0 here)."""
    return doc["baseTimeNanoseconds"] + round(ts_us * 1000) - truth["clocks"][rank]["offset_ns"] - truth["t0_epoch_ns"]


def _all_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_and_other_seed_differs(run: Path, tmp_path: Path) -> None:
    again = _all_bytes(_gen(tmp_path / "again", jobs=2))
    assert again == _all_bytes(run)
    other = _gen(tmp_path / "other", seed=2)
    assert (other / "ranks/0/rank0.pt.trace.json.gz").read_bytes() != again["ranks/0/rank0.pt.trace.json.gz"]


def test_run_layout_manifest_and_schema(run: Path) -> None:
    run_json = orjson.loads((run / "run.json").read_bytes())
    assert run_json["format"] == "rankscope.run/1" and run_json["world_size"] == RANKS
    assert run_json["layout"] == {"dp": 2, "tp": 2, "pp": 1}
    for r in range(RANKS):
        rd = run / "ranks" / str(r)
        manifest = orjson.loads((rd / "MANIFEST.json").read_bytes())
        for f in manifest["files"]:
            data = (rd / f["path"]).read_bytes()
            assert len(data) == f["size"] and hashlib.sha256(data).hexdigest() == f["sha256"]
        meta = orjson.loads((rd / "meta.json").read_bytes())
        assert (meta["format"], meta["rank"], meta["backend"]) == ("rankscope.meta/1", r, "nccl")
        assert meta["windows"][0]["steps"] == [3, 4, 5]
        doc = _trace(run, r)
        assert doc["schemaVersion"] == 1 and doc["deviceProperties"] and doc["baseTimeNanoseconds"] > 0
        info = doc["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("nccl", r, RANKS)
        pgs = {g["pg_desc"]: g["ranks"] for g in info["pg_config"]}
        assert pgs == {"default_pg": [0, 1, 2, 3], "mesh_tp": [r - r % 2, r - r % 2 + 1], "mesh_dp": [r % 2, r % 2 + 2]}
        cats = Counter(e.get("cat") for e in doc["traceEvents"])
        for cat in ("cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset",
                    "gpu_user_annotation", "ac2g", "cpu_instant_event"):
            assert cats[cat] > 0, cat
        steps = [e["name"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
        assert steps == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
        mem = [e for e in doc["traceEvents"] if e["name"] == "[memory]"]
        assert all(e["ph"] == "i" and {"Total Allocated", "Total Reserved", "Bytes", "Device Id", "Addr"}
                   <= e["args"].keys() for e in mem)


def test_links_between_cpu_and_gpu(run: Path) -> None:
    ev = _trace(run, 1)["traceEvents"]
    dev = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    launches = [e for e in ev if e.get("cat") == "cuda_runtime"]
    assert launches and all(e["args"]["correlation"] in dev for e in launches)
    flows = defaultdict(set)
    for e in ev:
        if e.get("cat") == "ac2g":
            flows[e["id"]].add(e["ph"])
    assert set(dev) == set(flows) and all(v == {"s", "f"} for v in flows.values())
    comms = {e["args"]["External id"]: e for e in ev if e["name"] == "record_param_comms"}
    nccl = [e for e in ev if e["name"].startswith("ncclDevKernel_")]
    assert nccl and all(k["args"]["External id"] in comms for k in nccl)
    assert all(COLL_KEYS <= c["args"].keys() for c in comms.values())


def _collectives(run: Path, truth: dict) -> dict[tuple[str, int], dict[int, int]]:
    """(pg name, seq) -> {rank: true-clock end ns of its NCCL kernel}."""
    out: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
    for r in range(RANKS):
        doc = _trace(run, r)
        ev = doc["traceEvents"]
        comms = {e["args"]["External id"]: e["args"] for e in ev if e["name"] == "record_param_comms"}
        for k in (e for e in ev if e["name"].startswith("ncclDevKernel_")):
            a = comms[k["args"]["External id"]]
            out[(a["Process Group Name"], a["Seq"])][r] = _true_ns(doc, truth, r, k["ts"] + k["dur"])
    return out


def test_collectives_match_across_members_and_end_together(run: Path) -> None:
    truth = _truth(run)
    colls = _collectives(run, truth)
    groups = {g["name"]: g["ranks"] for g in truth["process_groups"]}
    per_rank_pg = Counter()
    for (pg, _seq), ends in colls.items():
        assert sorted(ends) == groups[pg], (pg, _seq)  # every member has it, nobody else
        assert max(ends.values()) - min(ends.values()) <= 3_000  # ns; 2 us jitter + rounding
        for r in ends:
            per_rank_pg[(pg, r)] += 1
    for pg, members in groups.items():
        counts = {per_rank_pg[(pg, r)] for r in members}
        assert counts == {truth["collectives_per_step"][pg] * STEPS}


def _step_sums(run: Path, rank: int) -> tuple[float, float]:
    """Per rank: (compute kernel us, NCCL kernel us) summed over the trace."""
    ev = _trace(run, rank)["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    nccl = sum(e["dur"] for e in kernels if e["name"].startswith("nccl"))
    return sum(e["dur"] for e in kernels) - nccl, nccl


def test_compute_straggler_is_slower_and_others_wait_for_it(run: Path) -> None:
    sums = {r: _step_sums(run, r) for r in range(RANKS)}
    others = [sums[r] for r in range(RANKS) if r != 3]
    assert sums[3][0] > 1.4 * max(c for c, _ in others)  # injected 1.5x compute
    assert sums[3][1] < min(n for _, n in others)  # it waits least inside NCCL kernels
    truth = _truth(run)
    assert truth["stragglers"] == [{"rank": 3, "kind": "compute", "factor": 1.5}]
    # per step on the true clock, its tp partner (rank 2) waits for it inside NCCL kernels
    assert all(row[3] * 2 < row[2] for row in truth["steps"]["wait_ns"])
    assert all(row[3] > 1.4 * row[2] for row in truth["steps"]["compute_ns"])


def test_clock_skew_recorded_and_visible(run: Path) -> None:
    truth = _truth(run)
    offsets = {c["rank"]: c["offset_ns"] for c in truth["clocks"]}
    assert offsets[0] == 0 and offsets[SKEW_RANK] == round(SKEW_S * 1e9)
    assert all(abs(o) <= 0.5e9 for o in offsets.values()) and len(set(offsets.values())) == RANKS
    for r in (0, SKEW_RANK):
        doc = _trace(run, r)
        first = next(e for e in doc["traceEvents"] if e["name"] == "ProfilerStep#3")
        local = doc["baseTimeNanoseconds"] + round(first["ts"] * 1000) - truth["t0_epoch_ns"]
        assert abs(local - offsets[r] - truth["steps"]["start_ns"][0][r]) <= 1  # ns


def test_slow_link_inflates_its_group_transfers(run: Path) -> None:
    truth = _truth(run)
    assert truth["slow_links"][0]["affected_groups"] == ["0", "1"]  # world and tp group {0, 1}
    xfer: dict[str, list[float]] = defaultdict(list)
    for r in range(RANKS):
        ev = _trace(run, r)["traceEvents"]
        for e in ev:
            if e["name"].startswith("ncclDevKernel_AllReduce") and e["args"]["dtype"] == "BFloat16":
                xfer[e["args"]["Process Group Name"]].append(e["dur"])
    # the shortest kernel of a group is the last arriver's: pure transfer time
    assert min(xfer["1"]) > 2.5 * min(xfer["2"])


def test_cli_generates_and_reports_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert main(["synth", str(out), "--ranks", "2", "--steps", "2", "--size-mb", "0.5", "--seed", "3"]) == 0
    raw = len(gzip.decompress((out / "ranks/1/rank1.pt.trace.json.gz").read_bytes()))
    assert 0.3e6 < raw < 0.8e6
    assert main(["synth", str(out), "--ranks", "2"]) == 1  # not empty
    assert main(["synth", str(tmp_path / "b"), "--ranks", "2", "--straggler", "1:gpu:2"]) == 1
    assert "RANK:KIND:FACTOR" in capsys.readouterr().err


@pytest.mark.parametrize("kw", [dict(ranks=6, tp=4), dict(stragglers=["9:compute:2"]),
                                dict(slow_links=["pg:nope:2"]), dict(skews=["1:abc"])])
def test_bad_configs_raise_one_line(tmp_path: Path, kw: dict) -> None:
    with pytest.raises(RankscopeError) as err:
        _gen(tmp_path / "bad", **kw)
    assert "\n" not in str(err.value)


def test_clock_drift_applies_to_timestamps(tmp_path: Path) -> None:
    out = generate(tmp_path / "drift", ranks=2, steps=3, ops_per_step=20, skews=["1:0.1:2000"])
    truth = _truth(out)
    assert truth["clocks"][1]["drift_ppm"] == 2000.0 and truth["clocks"][1]["offset_ns"] == 100_000_000
    doc = _trace(out, 1)
    steps = [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    for i, e in enumerate(steps):
        true = truth["steps"]["start_ns"][i][1]
        local = doc["baseTimeNanoseconds"] + round(e["ts"] * 1000) - truth["t0_epoch_ns"]
        assert abs(local - (true + 100_000_000 + round(true * 2000e-6))) <= 1
    assert round(truth["steps"]["start_ns"][-1][1] * 2000e-6) > 10_000  # drift is large enough to matter here
