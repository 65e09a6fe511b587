"""The Ascend reader and diagnosis on the realistic 4-rank torch_npu run (rankscope/synth/ascend_run.py).

Expected values come from the generator: TP groups (0,1), (2,3) over HCCS, PP groups (0,2), (1,3)
over RDMA, the world group; per step three 16 MB TP all-reduces (16 MB sent per rank: HCCS 16,
SDMA 16 = HCCS + PCIE), one send and one receive of 8 MB; rank 3 computes 1.35x longer; the
HCCS link 0-1 runs at a quarter of its bandwidth.
"""
from __future__ import annotations

import numpy as np
import pytest

from rankscope.analysis.clock import alignment as clock
from rankscope.analysis.registry import run_all
from rankscope.model.readers.ascend.torch_npu import double_hash, parse_name, transit_bytes
from rankscope.model.run import load_run
from rankscope.synth.ascend_run import write_run
from tests.helpers import require


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("npu")
    write_run(root / "run")
    return load_run(root / "run", jobs=1)


def test_op_name_counter_is_the_sequence():
    assert parse_name("hcom_allReduce__844_2_1@12345678901234567844") == ("all_reduce", 2, "12345678901234567844")
    assert parse_name("hcom_broadcast__501_1@6297232067196334501") == ("broadcast", 1, "6297232067196334501")
    assert parse_name("hcom_receive__693_4_1@11724792838429530693")[:2] == ("recv", 4)


def test_double_hash_matches_msprof_analyze():
    assert double_hash("a") == (97 << 32) | 97  # by hand: primes 29 and 131, two 32-bit halves
    assert double_hash("ab") == ((97 * 29 + 98) << 32) | (97 * 131 + 98)
    utils = require("msprof_analyze.cluster_analyse.common_func.utils", "msprof-analyze>=26.2")
    name = "192.0.2.1%enp189s0f0_60000_1_1735689600100001"
    assert double_hash(name) == utils.double_hash(name)


def test_sdma_is_not_counted_twice():
    bw = {"HCCS": {"Transit Size(MB)": 24.0}, "PCIE": {"Transit Size(MB)": 8.0},
          "SDMA": {"Transit Size(MB)": 32.0}, "RDMA": {"Transit Size(MB)": 0}}
    assert transit_bytes(bw) == 32_000_000
    assert transit_bytes({"SDMA": {"Transit Size(MB)": 5.0}}) == 5_000_000


def test_collectives_table(run):
    c = run.table(0, "collectives").to_pydict()
    tp = [i for i, n in enumerate(c["name"]) if "allReduce" in n and c["pg_ranks"][i] == "0,1"]
    assert [c["seq"][i] for i in tp] == list(range(9))  # 3 steps x 3 calls, one counter per group
    assert {c["bytes_in"][i] for i in tp} == {16_000_000}
    assert set(c["op"]) == {"all_reduce", "send", "recv"}
    assert set(c["pg_ranks"]) == {"0,1", "0,2", "0,1,2,3"}
    assert run.ranks[0].meta["distributed_args"]["tensor_model_parallel_size"] == 2
    assert {g["desc"] for g in run.ranks[0].process_groups} == {"tp", "pp", "default_group"}


def test_hccl_task_events_are_not_compute(run):
    ev = run.table(2, "events").to_pydict()
    names = set(ev["name"])
    assert "Notify_Wait" not in names and "Memcpy" not in names and "RDMASend" not in names
    assert not any(n in ("Computing", "Free") for n in names)  # Overlap Analysis left out
    comm = {n for n, c in zip(ev["name"], ev["is_comm"]) if c}
    assert any(n.startswith("hcom_receive") for n in comm)


def test_analyze_names_the_slow_rank_and_the_slow_link(run):
    res = run_all(run)
    st = res["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((3,), "compute")], st.summary["verdict"]
    assert st.findings[0].evidence["relative_excess"] > 0.3  # computes 1.35x longer (its own time +41 %)
    links = res["links"].findings
    assert [(f.kind, f.ranks) for f in links] == [("slow_link", (0, 1))], [f.title for f in links]  # HCCS 0-1
    assert not res["collectives"].findings  # send/receive pairs are not "different ops"


def test_clock_alignment_falls_back_on_linalg_error(run, monkeypatch):
    def boom(*a, **k):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(clock, "refine", boom)
    al = clock.align(run)
    assert "LinAlgError" in al.note and set(al.offset_ns) == {0, 1, 2, 3}
    assert clock.fit_drift(np.zeros(3), np.zeros(3)) == (0.0, False)
    monkeypatch.setattr(np, "polyfit", boom)
    assert clock.fit_drift(np.arange(20.0), np.arange(20.0)) == (0.0, False)


def test_the_hardware_and_hccl_layers_are_one_npu(run):
    """torch_npu writes a rank's NPU as two layers (Ascend Hardware, HCCL), both labelled "NPU <n>": one device in
    the tables, so the device's idle time is never counted twice (it read "the GPU idles 101% of the steps")."""
    ev = run.table(0, "events").to_pydict()
    pids = {p for p, k in zip(ev["pid"], ev["kind"]) if k == "kernel"}
    assert len(pids) == 1, pids
    gaps = run_all(run, ["gpu_gaps"])["gpu_gaps"]
    rows = gaps.tables["per_step"].to_dicts()
    assert rows and all(0 <= r["device_idle"] <= r["step_ns"] for r in rows)
    assert not gaps.findings  # the NPU is busy: kernels, then HCCL operations
