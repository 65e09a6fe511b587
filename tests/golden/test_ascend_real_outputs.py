"""Real Ascend output (../shared/data/ascend_msprof, from msprof-analyze's own test resources) as ground truth.

- trace_view.json of a real single-NPU torch_npu run: read with every layer in its place (no unknown
  categories, the Overlap Analysis layer kept out of the events), and its step_trace_time rows, which
  rankscope derives from the Overlap Analysis layer when step_trace_time.csv is absent, equal to the
  ones torch_npu's own writer computes from the same trace (tests/torch_npu_oracle.py runs
  torch_npu 2.14.0's parser from the wheel `make test` caches), to the last digit;
- the same comparison on a realistic multi-rank pipeline run (receives, i.e. Bubble) from
  ``rankscope synth --format ascend``, with its step_trace_time.csv files removed;
- cluster_communication.json of a real 2-rank run: its per-rank entries, written back as each rank's
  communication.json (msprof-analyze only regroups them), read as collectives: real op names
  (``hcom_broadcast__501_0@<group hash>``: the per-group counter is the sequence), bytes with
  SDMA = HCCS + PCIE counted once.
"""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from rankscope.model.readers.ascend import overlap as ascend_overlap
from rankscope.model.run import load_run
from tests import torch_npu_oracle

COLUMNS = ascend_overlap.COLUMNS


@pytest.fixture(scope="module")
def oracle_ok() -> None:
    try:
        torch_npu_oracle.unpacked()
    except RuntimeError as exc:  # never a skip: a green run means the oracle ran
        pytest.fail(f"torch_npu's writer (the oracle) is unavailable: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def real_run(shared_data: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("real") / "run"
    out = root / "node0_12345_20240102_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_bytes(gzip.decompress((shared_data / "ascend_msprof" / "trace_view.json.gz").read_bytes()))
    return root


def _rows(run, rank: int) -> list[dict[str, str]]:
    t = run.table(rank, "step_times").to_pylist()
    return [{"Step": r["step"], **json.loads(r["row"])} for r in t]


def test_real_trace_layers_are_read_without_unknowns(real_run):
    run = load_run(real_run, jobs=1, allow_missing_ranks=True)
    info = run.ranks[0]
    assert info.backend == "hccl" and not any("unknown" in p for p in info.problems), info.problems
    ev = run.table(0, "events", ["name", "kind"]).to_pydict()
    kinds = {k: ev["kind"].count(k) for k in set(ev["kind"])}
    # from the file: 276 tasks on "Ascend Hardware", 711 cpu_op on "Python", 382 on "CANN",
    # 148 enqueue + 148 dequeue (torch_npu's task queue); the 547 Overlap Analysis events are derived
    assert kinds == {"kernel": 276, "cpu_op": 711, "runtime": 382 + 296}, kinds
    assert "Computing" not in ev["name"] and "Free" not in ev["name"]
    assert run.table(0, "steps").num_rows == 1


def test_real_trace_step_rows_equal_torch_npus_own(real_run, oracle_ok, tmp_path):
    run = load_run(real_run, jobs=1, allow_missing_ranks=True)
    trace = next(real_run.rglob("trace_view.json"))
    ref = torch_npu_oracle.step_trace_time(trace, tmp_path / "torch_npu")
    assert [r["Step"] for r in ref] == ["1"]
    got = _rows(run, 0)
    assert got == [{k: r[k] for k in ["Step"] + COLUMNS} for r in ref]
    # and the figures that say this is the real run: 1.79 ms of compute in an 11.27 ms device span
    assert float(got[0]["Computing"]) == pytest.approx(1788.2505) and float(got[0]["Stage"]) == 11270.0


def test_real_trace_cluster_step_trace_time_carries_torch_npus_rows(real_run, oracle_ok, tmp_path):
    from rankscope.analysis.registry import run_all
    from rankscope.render.export import ascend_files

    run = load_run(real_run, jobs=1, allow_missing_ranks=True)
    ref = torch_npu_oracle.step_trace_time(next(real_run.rglob("trace_view.json")), tmp_path / "torch_npu")
    paths = ascend_files(run_all(run, names=["breakdown", "ascend_cluster"]), tmp_path)
    with open(next(p for p in paths if p.name == "cluster_step_trace_time.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and rows[0]["Type"] == "rank" and rows[0]["Index"] == "0"
    for c in COLUMNS:
        assert float(rows[0][c]) == pytest.approx(float(ref[0][c]), abs=1e-9), c


def test_synth_pipeline_run_step_rows_equal_torch_npus_own(oracle_ok, tmp_path):
    from rankscope.synth.ascend_run import write_run

    write_run(tmp_path / "run")
    for f in (tmp_path / "run").rglob("step_trace_time.csv"):
        f.unlink()  # rankscope must derive them from the trace
    run = load_run(tmp_path / "run", jobs=1)
    bubbles = 0.0
    for rank in run.rank_ids:
        trace = next(Path(p) for p in run.ranks[rank].files if p.endswith("trace_view.json"))
        ref = torch_npu_oracle.step_trace_time(trace, tmp_path / f"ref{rank}")
        got = _rows(run, rank)
        assert len(got) >= 2, rank
        assert got == [{k: r[k] for k in ["Step"] + COLUMNS} for r in ref], rank
        bubbles += sum(float(r["Bubble"]) for r in got)
    assert bubbles > 0  # the pipeline's receives were counted


def test_real_cluster_communication_entries_read_as_collectives(shared_data, tmp_path):
    doc = json.loads((shared_data / "ascend_msprof" / "cluster_communication.json").read_text())
    (group, steps), = doc.items()
    assert group == "(0, 1)"
    per_rank: dict[str, dict] = {}
    for step, ops in steps.items():
        for op, ranks in ops.items():
            for rank, info in ranks.items():
                per_rank.setdefault(rank, {}).setdefault(step, {"collective": {}, "p2p": {}})["collective"][op] = info
    for rank, content in per_rank.items():
        out = tmp_path / "run" / f"node0_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        (out / "communication.json").write_text(json.dumps(content))
        (out / "trace_view.json").write_text("[]")
        (out.parent / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": int(rank)}))
    run = load_run(tmp_path / "run", jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [0, 1]
    sized = 0
    for rank in (0, 1):
        c = run.table(rank, "collectives").to_pylist()
        entries = steps["step"]
        assert len(c) == len(entries)
        for row in c:
            name = next(n for n in entries if n.startswith(f"hcom_{'broadcast' if row['op'] == 'broadcast' else ''}")
                        and n.split("@")[0].endswith(f"_{row['seq']}"))
            info = entries[name][str(rank)]
            bw = info["Communication Bandwidth Info"]
            # the real file: SDMA is HCCS + PCIE, so it is not counted again
            assert bw["SDMA"]["Transit Size(MB)"] == pytest.approx(bw["HCCS"]["Transit Size(MB)"] + bw["PCIE"]["Transit Size(MB)"])
            mb = sum(v["Transit Size(MB)"] for k, v in bw.items() if k != "SDMA")
            assert row["bytes_in"] == (round(mb * 1e6) if mb else -1), name
            t = info["Communication Time Info"]
            assert row["ts"] == pytest.approx(t["Start Timestamp(us)"] * 1000, abs=1)
            assert row["dur"] == round(t["Elapse Time(ms)"] * 1e6)
            sized += mb > 0
    assert sized >= 2  # some entries carry bytes
    seqs = sorted(r["seq"] for r in run.table(0, "collectives").to_pylist())
    assert seqs == list(range(len(seqs)))  # hcom_broadcast__501_<n>: n is the per-group counter
