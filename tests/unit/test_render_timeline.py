"""Merged timeline: Perfetto protobuf and Chrome JSON, parsed back and checked (ranks, offsets, flows).

The protobuf is decoded here with a tiny wire-format reader; test_render_pftrace.py decodes it again with
Perfetto's own generated protobuf classes (the `perfetto` package) and Google's `protobuf` runtime.
"""
from __future__ import annotations

import json

import pytest

from rankscope.model.run import load_run
from rankscope.render.timeline import write_timeline
from tests.helpers import OFFSET_NS, tiny_run


# ---- a protobuf wire reader (test-side, independent of the encoder) ----

def _varint(b: bytes, i: int) -> tuple[int, int]:
    n = s = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return n, i


def fields(b: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = int.from_bytes(b[i:i + 8], "little"), i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        out.setdefault(f, []).append(v)
    return out


def parse_pftrace(data: bytes) -> dict:
    names, tracks, events = {}, {}, []
    for p in fields(data)[1]:
        pk = fields(p)
        if 12 in pk:
            for en in fields(pk[12][0]).get(2, []):
                e = fields(en)
                names[e[1][0]] = e[2][0].decode()
        if 60 in pk:
            td = fields(pk[60][0])
            tracks[td[1][0]] = td
        if 11 in pk:
            te = fields(pk[11][0])
            events.append({"ts": pk[8][0], "type": te[9][0], "track": te[11][0],
                           "name": names.get(te.get(10, [0])[0]), "flow": te.get(47, []),
                           "flow_end": te.get(48, []), "value": te.get(30, [None])[0]})
    return {"names": names, "tracks": tracks, "events": events}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(tiny_run(tmp_path_factory.mktemp("tl") / "tiny"), jobs=1)


def _proc_names(tl: dict) -> dict[int, str]:
    out = {}
    for td in tl["tracks"].values():
        if 3 in td:
            proc = fields(td[3][0])
            out[proc[1][0]] = proc[6][0].decode()
    return out


def test_perfetto_ranks_offsets_and_flows(run, tmp_path):
    tl = parse_pftrace(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    procs = _proc_names(tl)
    assert set(procs) == {1, 2} and procs[1].startswith("rank 0 · node-0") and procs[2].startswith("rank 1 · node-1")
    begins = [e for e in tl["events"] if e["type"] == 1]
    mm = sorted(e["ts"] for e in begins if e["name"] == "aten::mm")
    # rank 1 wrote its events 5 ms late on its own clock; after alignment both ranks coincide.
    assert mm == [1_020_000, 1_020_000, 2_120_000, 2_120_000]
    assert len([e for e in tl["events"] if e["type"] == 2]) == len(begins)
    flows = [e for e in begins if e["flow"] or e["flow_end"]]
    assert len(flows) == 4 and all(e["name"] == "gloo:all_reduce" for e in flows)
    assert sorted(f for e in flows for f in e["flow"]) == sorted(f for e in flows for f in e["flow_end"])
    assert [e["value"] for e in tl["events"] if e["type"] == 4][:3] == [1024, 2048, 3072]


def test_perfetto_filters(run, tmp_path):
    tl = parse_pftrace(write_timeline(run, tmp_path / "m.pftrace", ranks=[1], steps=[2]).read_bytes())
    assert set(_proc_names(tl)) == {2}
    steps = {e["name"] for e in tl["events"] if e["type"] == 1 and (e["name"] or "").startswith("ProfilerStep")}
    assert steps == {"ProfilerStep#2"}


def test_chrome_json(run, tmp_path):
    doc = json.loads(write_timeline(run, tmp_path / "m.json").read_text())
    assert doc["metadata"]["rankscope"]["clock_offsets_ns"] == {"0": 0, "1": OFFSET_NS}
    evs = doc["traceEvents"]
    pnames = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert pnames[1].startswith("rank 0 · node-0") and pnames[2].startswith("rank 1 · node-1")
    mm = sorted((e["pid"], e["ts"]) for e in evs if e["ph"] == "X" and e["name"] == "aten::mm")
    assert [t for _, t in mm if _ == 1] == [t for _, t in mm if _ == 2]
    flows = [e for e in evs if e["ph"] in "stf"]
    assert sorted(e["ph"] for e in flows) == ["f", "f", "s", "s"]
    assert {e["id"] for e in flows if e["ph"] == "s"} == {e["id"] for e in flows if e["ph"] == "f"}
    assert any(e["ph"] == "C" and e["args"]["allocated_MiB"] > 0 for e in evs)


def test_cli_timeline_bad_ranks(run, tmp_path):
    from rankscope.cli import main

    assert main(["timeline", run.path, "-o", str(tmp_path / "x.pftrace"), "--ranks", "7", "-j", "1"]) == 1
    assert main(["timeline", run.path, "-o", str(tmp_path / "x.json"), "--steps", "2", "-j", "1"]) == 0
    assert json.loads((tmp_path / "x.json").read_text())["traceEvents"]


def test_cli_aligns_with_clock_analysis(run, tmp_path):
    """The CLI refines offsets from matched collectives: the all_reduce ends coincide after alignment."""
    from rankscope.cli import main

    assert main(["timeline", run.path, "-o", str(tmp_path / "a.json"), "-j", "1"]) == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert abs(doc["metadata"]["rankscope"]["clock_offsets_ns"]["1"] - OFFSET_NS) < 10_000
    ar = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "gloo:all_reduce" and e["tid"] != "collectives"]
    ends = sorted((e["ts"] + e["dur"], e["pid"]) for e in ar)
    assert abs(ends[0][0] - ends[1][0]) < 10  # µs
