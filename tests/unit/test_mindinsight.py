"""The MindInsight-era MindSpore cluster layout (cluster_profiler/<host id>/profiler/, host_ips_mapping.txt,
hccl.json), read with host ids mapped and host IPs kept out.

The fixture follows the writers and readers of that layout: the directory tree and the rank-table join
from MindInsight's ClusterAnalyser (mindinsight/profiler/analyser/cluster_analyser.py) and MindSpore's
docs/sample_code/transform_cluster_profiler_data.py; step_trace_raw_<device>_detail_time.csv as MindSpore's
profiler/parser/step_trace_parser.py writes it (header, 10 ns device counts, per-op
stream_<s>_<i>_<op> triples, a last "-" row of rounded averages). IPs are documentation addresses
(RFC 5737); the test fails if any of them reaches an output, a problem line or the cache.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rankscope.cli import main

IPS = {"host-1": "192.0.2.17", "host-2": "198.51.100.42"}
DEVICE_IPS = ["203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"]
# (host id, device id) -> rank: the rank table lists host 2 first and numbers devices out of order
RANKS = {("2", 0): 0, ("2", 1): 1, ("1", 0): 3, ("1", 1): 2}
SLOW = 2  # this rank's forward/backward takes 30 % longer


def _step_trace(path: Path, rank: int) -> list[list[int]]:
    ops = ["AllReduce-op4542", "Send-op610"]
    head = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval",
            "fp_and_bp", "tail"]
    for i, op in enumerate(ops):
        name = f"stream_{36 + i}_0_{op}"
        head += [name, f"{name}_start_point", f"{name}_end_point"]
    rows, t = [], 1162412079349
    for step in range(1, 4):
        fp, bp = t + 8000, t + 8000 + int(1_700_000 * (1.3 if rank == SLOW else 1.0))
        end = bp + 100_000
        row = [step, t, end, end - t, fp, bp, fp - t, bp - fp, end - bp]
        for i in range(len(ops)):
            s0 = bp + 1000 + 30_000 * i
            row += [20_000, s0, s0 + 20_000]
        rows.append(row)
        t = end
    avg = [round(sum(r[i] for r in rows) / len(rows)) for i in range(len(head))]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows + [["-"] + avg[1:]])
    return rows


@pytest.fixture
def cluster(tmp_path) -> tuple[Path, dict[int, list[list[int]]]]:
    root = tmp_path / "run"
    servers = []
    written = {}
    for host, hid in (("host-2", "2"), ("host-1", "1")):
        devs = []
        for dev in (1, 0):
            rank = RANKS[(hid, dev)]
            devs.append({"device_id": str(dev), "device_ip": DEVICE_IPS[rank], "rank_id": str(rank)})
            d = root / "cluster_profiler" / hid / "profiler"
            d.mkdir(parents=True, exist_ok=True)
            written[rank] = _step_trace(d / f"step_trace_raw_{dev}_detail_time.csv", rank)
        servers.append({"server_id": IPS[host], "device": devs, "host_nic_ip": "reserve"})
    (root / "hccl.json").write_text(json.dumps({"version": "1.0", "server_count": "2", "server_list": servers,
                                                "status": "completed"}))
    (root / "host_ips_mapping.txt").write_text(f"{IPS['host-1']} 1\n{IPS['host-2']} 2\n")
    return root, written


def _no_ip(text: str) -> None:
    for ip in list(IPS.values()) + DEVICE_IPS:
        assert ip not in text


def test_ranks_hosts_steps_and_collectives(cluster, tmp_path):
    from rankscope.model.run import load_run

    root, written = cluster
    run = load_run(root, jobs=1, cache_dir=tmp_path / "cache")
    assert run.rank_ids == [0, 1, 2, 3]
    hosts = {r: run.ranks[r].host for r in run.rank_ids}
    assert hosts == {0: "host-2", 1: "host-2", 2: "host-1", 3: "host-1"}
    for r in run.rank_ids:
        assert run.ranks[r].rank_source == "hccl.json rank table"
        steps = run.table(r, "steps").to_pylist()
        assert [s["step"] for s in steps] == [1, 2, 3]  # the "-" average row is not a step
        assert [s["end"] - s["ts"] for s in steps] == [row[3] * 10 for row in written[r]]
        coll = run.table(r, "collectives").to_pylist()
        assert sorted({c["op"] for c in coll}) == ["all_reduce", "send"] and len(coll) == 6
        assert all(c["dur"] == 200_000 for c in coll)
    _no_ip(json.dumps({r: str(run.ranks[r]) for r in run.rank_ids}))
    from rankscope.analysis.registry import run_all

    st = run_all(run, ["breakdown", "straggler"])["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((SLOW,), "compute")], st.summary


def test_no_host_ip_reaches_any_output(cluster, tmp_path, capsys):
    root, _ = cluster
    out = tmp_path / "export"
    assert main(["analyze", str(root), "-j", "1", "--json", "--export", "json", "--export-dir", str(out)]) == 0
    got = capsys.readouterr()
    _no_ip(got.out + got.err)
    doc = json.loads(got.out)
    assert sorted(r["rank"] for r in doc["run"]["ranks"]) == [0, 1, 2, 3]
    files = [p for p in list(out.rglob("*")) + list((root / "analysis").rglob("*")) if p.is_file()]
    assert files
    for p in files:
        _no_ip(p.read_bytes().decode("utf-8", errors="replace"))


def test_unlisted_server_and_missing_rank_table(cluster, tmp_path, capsys):
    root, _ = cluster
    (root / "host_ips_mapping.txt").write_text(f"{IPS['host-2']} 2\n")  # host 1 unlisted
    assert main(["analyze", str(root), "-j", "1", "--json"]) == 0
    got = capsys.readouterr()
    _no_ip(got.out + got.err)
    assert "server 1 of the rank table has no line" in got.err
    assert sorted(r["rank"] for r in json.loads(got.out)["run"]["ranks"]) == [0, 1]
    (root / "host_ips_mapping.txt").write_text(f"{IPS['host-1']} 1\n{IPS['host-2']} 2\n")
    (root / "hccl.json").unlink()
    import shutil

    shutil.rmtree(root / "analysis", ignore_errors=True)
    assert main(["analyze", str(root), "-j", "1", "--json"]) == 0
    got = capsys.readouterr()
    assert "no rank table (hccl.json)" in got.err
    assert len(json.loads(got.out)["run"]["ranks"]) == 4


HOSTILE = [  # name, damage, line on stderr, ranks analyzed
    ("step_trace_garbage", lambda root: (root / "cluster_profiler/1/profiler/step_trace_raw_0_detail_time.csv")
     .write_bytes(b"\x00\xff garbage\n1,2"), "not a MindSpore step trace", [0, 1, 2]),
    ("step_trace_missing", lambda root: (root / "cluster_profiler/1/profiler/step_trace_raw_1_detail_time.csv")
     .unlink(), "no step_trace_raw_1_detail_time.csv under host-1", [0, 1, 3]),
    ("rank_table_wrong_types", lambda root: (root / "hccl.json").write_text(json.dumps(
        {"server_list": [{"server_id": IPS["host-2"], "device": {"device_id": "0"}}, "x", {"server_id": 7}]})),
     "the rank table lists no device of a mapped host", [0, 1, 2, 3]),
    ("rank_table_not_json", lambda root: (root / "hccl.json").write_text("{"), "not a rank table", [0, 1, 2, 3]),
    ("mapping_garbage", lambda root: (root / "host_ips_mapping.txt").write_bytes(b"\xff\xfe\x00 ../../x\n"),
     "has no line", None),
]


@pytest.mark.parametrize("name,damage,line,ranks", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_mindinsight(cluster, capsys, name, damage, line, ranks):
    """One line each, never a traceback, no IP; ranks the damage leaves readable are analyzed."""
    root, _ = cluster
    damage(root)
    code = main(["analyze", str(root), "-j", "1", "--json"])
    got = capsys.readouterr()
    assert "Traceback" not in got.err and line in got.err, got.err
    _no_ip(got.out + got.err)
    if ranks is None or not ranks:
        assert code != 0 or not json.loads(got.out)["run"]["ranks"]
    else:
        assert code == 0
        assert sorted(r["rank"] for r in json.loads(got.out)["run"]["ranks"]) == ranks


def test_rows_written_before_the_header_grew(tmp_path):
    """step_trace_parser.py extends the header when a later step brings a new op and writes each row with
    the columns known then (missing ones as 0): short rows and zero points are read, not dropped."""
    from rankscope.model.readers.ascend.mindinsight import step_tables

    head = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval",
            "fp_and_bp", "tail"]
    late = "stream_5_0_AllGather-op9"
    p = tmp_path / "step_trace_raw_0_detail_time.csv"
    p.write_text(",".join(head + [late, late + "_start_point", late + "_end_point"]) + "\n"
                 "1,100,200,100,110,190,10,80,10\n"
                 "2,200,300,100,210,290,10,80,10,0,0,0\n"
                 "3,300,400,100,310,390,10,80,10,20,391,395\n"
                 "-,200,300,100,210,290,10,80,10,7,130,132\n")
    t = step_tables(p, device=0)
    assert t["steps"].column("step").to_pylist() == [1, 2, 3]
    assert t["collectives"].to_pylist()[0]["ts"] == 3910 and t["collectives"].num_rows == 1
    assert t["collectives"].to_pylist()[0]["op"] == "all_gather"
