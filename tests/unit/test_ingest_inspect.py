"""`rankscope inspect`: ranks, their source, steps, counts by kind, problems; second call from cache."""
from __future__ import annotations

import re
import json

from rankscope.cli import main
from rankscope.model.readers import kineto
from tests.helpers import write_trace, x


def _run(tmp_path):  # type: ignore[no-untyped-def]
    for r in (0, 1):
        write_trace(tmp_path / f"r{r}.json.gz", [
            x("ProfilerStep#7", 0, 100, cat="user_annotation"), x("ProfilerStep#8", 100, 0, cat="user_annotation"),
            x("aten::mm", 10, 50), x("sgemm", 20, 30, cat="kernel", stream=7, correlation=1)], rank=r, world=3,
            gz=True)
    return tmp_path


def test_inspect_json_summary(tmp_path, capsys):
    d = _run(tmp_path)
    assert main(["inspect", str(d), "-j", "1", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["world_size"] == 3 and s["missing"] == [2]
    r0 = s["ranks"][0]
    assert r0["rank"] == 0 and r0["source"] == "content" and r0["steps"] == [7, 8]
    assert r0["incomplete_steps"] == [8]  # zero-length last step kept and flagged, not dropped
    assert r0["events"] == {"user_annotation": 2, "cpu_op": 1, "kernel": 1}
    assert r0["time_range_ns"] == [0, 100_000]


def test_inspect_table_reads_cache_second_time(tmp_path, capsys, monkeypatch):
    d = _run(tmp_path)
    (d / "r2.json").write_text('{"traceEvents": [{"ph": "X", "na')  # damaged third rank
    assert main(["inspect", str(d), "-j", "1"]) == 0
    first = capsys.readouterr()
    assert "missing ranks: 2" in first.out and "Traceback" not in first.err
    assert "r2.json" in first.err and "not valid JSON" in first.err
    monkeypatch.setattr(kineto, "decode", lambda p: (_ for _ in ()).throw(AssertionError(f"decoded {p}")))
    monkeypatch.setattr(kineto, "decode_bytes", lambda *a: (_ for _ in ()).throw(AssertionError("decoded")))
    # the damaged file is not cached (nothing to cache), so only it is read again: make it unreadable too
    (d / "r2.json").unlink()
    assert main(["inspect", str(d), "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "content" in out and "missing ranks: 2" in out
    assert re.search(r"kernel\s*│\s*2\s*│\s*1\s*│\s*1\s*│", out)  # by kind: total 2, 1 per rank


def test_inspect_ascend_fixture(tmp_path, capsys):
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "fixtures" / "ascend" / "run2"
    shutil.copytree(src, tmp_path / "run2")
    assert main(["inspect", str(tmp_path / "run2"), "-j", "1", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in s["ranks"]] == [0, 1] and s["missing"] == []
    assert {r["source"] for r in s["ranks"]} == {"profiler_info.json"}
    assert s["ranks"][1]["events"]["kernel"] == 4 and s["ranks"][1]["counts"]["collectives"] == 2
