"""Device memory size comes from Kineto's deviceProperties and feeds the memory-peak advice."""
import json

from rankscope.analysis.registry import run_all
from rankscope.model.identity import device_memory
from rankscope.model.run import load_run
from tests.helpers import x


def test_device_memory_picks_the_ranks_device():
    props = [{"id": 0, "totalGlobalMem": 100}, {"id": 1, "totalGlobalMem": 200}]
    assert device_memory(props, "cuda:1") == 200
    assert device_memory(props, None) == 100
    assert device_memory([], "cuda:0") is None
    assert device_memory([{"id": 0}], "cuda:0") is None


def test_memory_peak_advice_fires_near_device_capacity(tmp_path):
    mem = [{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": t,
            "args": {"Total Allocated": a, "Total Reserved": a, "Bytes": 10, "Device Id": 0, "Addr": 1}}
           for t, a in ((5, 500), (20, 980), (60, 400))]
    events = [x("ProfilerStep#1", 0, 50, "user_annotation"), x("aten::mm", 10, 30),
              x("ProfilerStep#2", 50, 50, "user_annotation"), x("aten::mm", 60, 30)] + mem
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "gpu", "totalGlobalMem": 1000}],
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": events}
    (tmp_path / "r0.json").write_text(json.dumps(doc))
    run = load_run(tmp_path, jobs=1)
    assert run.ranks[0].meta["device_memory_bytes"] == 1000
    advice = run_all(run)["advice"]
    kinds = [f.kind for f in advice.findings]
    assert "advice.memory_peak" in kinds, kinds
