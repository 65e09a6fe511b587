"""The Perfetto timeline decoded with Perfetto's own definitions, independently of our encoder.

``rankscope.render.pftrace`` writes the protobuf by hand. Here the bytes are parsed by Google's
``protobuf`` runtime with the classes Perfetto generates from ``protos/perfetto/trace/perfetto_trace.proto``
(shipped in the ``perfetto`` package, Apache-2.0), so a wrong field number or wire type shows up as an
unknown field or a parse error, and the decoded messages are checked for what Perfetto's UI relies
on: ranks as processes, clock-aligned timestamps, balanced and nested slices per track, interned names,
flows that start and end, memory counters on byte-unit counter tracks.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from rankscope.model.run import load_run
from rankscope.render import pftrace as pf
from rankscope.render.timeline import write_timeline
from tests.helpers import tiny_run

TE = pb.TrackEvent


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(tiny_run(tmp_path_factory.mktemp("pf") / "tiny"), jobs=1)


def unknown_fields(msg: Any, where: str = "Trace") -> list[str]:
    """Paths of every message (recursively) holding fields its official definition does not know."""
    out = [where] if len(UnknownFieldSet(msg)) else []
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        items = [(f"[{i}]", m) for i, m in enumerate(value)] if fd.is_repeated else [("", value)]
        for index, m in items:
            out += unknown_fields(m, f"{where}.{fd.name}{index}")
    return out


def decode(data: bytes) -> dict[str, Any]:
    """The trace as Perfetto reads it: tracks by uuid, interned names, events in packet order."""
    trace = pb.Trace.FromString(data)
    assert unknown_fields(trace) == []
    tracks, names, events = {}, {}, []
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("interned_data"):
            assert p.sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            names.update({en.iid: en.name for en in p.interned_data.event_names})
        if p.HasField("track_event"):
            assert p.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE and p.trusted_packet_sequence_id
            events.append((p.timestamp, p.track_event))
    return {"tracks": tracks, "names": names, "events": events}


def processes(tl: dict[str, Any]) -> dict[int, tuple[int, str]]:
    """pid -> (track uuid, process name)."""
    return {t.process.pid: (u, t.process.process_name) for u, t in tl["tracks"].items() if t.HasField("process")}


def slices(tl: dict[str, Any]) -> Counter[tuple[int, str, int, int]]:
    """(pid, name, begin ns, duration ns) of every slice, pairing each end with the innermost open begin
    of its track, as Perfetto does: if our slices crossed on a track, the durations would come out wrong."""
    stacks: dict[int, list[tuple[str, int]]] = defaultdict(list)
    out: Counter[tuple[int, str, int, int]] = Counter()
    for ts, ev in tl["events"]:
        if ev.type == TE.TYPE_SLICE_BEGIN:
            stacks[ev.track_uuid].append((tl["names"][ev.name_iid], ts))
        elif ev.type == TE.TYPE_SLICE_END:
            name, begin = stacks[ev.track_uuid].pop()
            out[(ev.track_uuid >> 32, name, begin, ts - begin)] += 1
    return out


def test_decodes_with_official_definitions(run, tmp_path):
    tl = decode(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    procs = processes(tl)
    assert sorted(procs) == [1, 2]
    assert procs[1][1].startswith("rank 0 · node-0") and procs[2][1].startswith("rank 1 · node-1")
    proc_of = {u: pid for pid, (u, _) in procs.items()}
    tids: dict[int, list[int]] = defaultdict(list)
    for u, t in tl["tracks"].items():
        if t.HasField("thread"):  # thread tracks hang under their rank's process, with its pid
            assert proc_of[t.parent_uuid] == t.thread.pid
            tids[t.thread.pid].append(t.thread.tid)
        if t.HasField("counter"):
            assert t.counter.unit == pb.CounterDescriptor.UNIT_SIZE_BYTES and t.parent_uuid in proc_of
    # int32 tids that Perfetto keeps apart: no two thread tracks of a rank would merge into one thread
    assert all(0 < t < 2**31 for ts in tids.values() for t in ts) and all(len(set(t)) == len(t) for t in tids.values())
    assert all(len(tids[pid]) >= 2 for pid in procs)  # a host thread and the collectives track
    for _, ev in tl["events"]:
        assert ev.track_uuid in tl["tracks"]
        assert ev.type != TE.TYPE_SLICE_BEGIN or ev.name_iid in tl["names"]


def test_slices_nest_and_align_across_ranks(run, tmp_path):
    tl = decode(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    last_ts: dict[int, int] = {}
    for ts, ev in tl["events"]:
        assert ts >= last_ts.get(ev.track_uuid, 0)  # per-track order as the sorter keeps it
        last_ts[ev.track_uuid] = ts
    got = slices(tl)  # fails on an end without a begin
    assert sum(got.values()) == sum(ev.type == TE.TYPE_SLICE_BEGIN for _, ev in tl["events"])  # none left open
    # rank 1 wrote its events 5 ms late on its own clock; after alignment both ranks coincide (ns).
    mm = sorted(k for k in got.elements() if k[1] == "aten::mm")
    assert mm == [(1, "aten::mm", 1_020_000, 300_000), (1, "aten::mm", 2_120_000, 300_000),
                  (2, "aten::mm", 1_020_000, 300_000), (2, "aten::mm", 2_120_000, 300_000)]
    steps = sorted(k for k in got.elements() if k[1].startswith("ProfilerStep"))
    assert steps == [(p, f"ProfilerStep#{i}", t, 1_000_000)
                     for p in (1, 2) for i, t in ((1, 1_000_000), (2, 2_100_000))]


def test_flows_link_matched_collectives_across_ranks(run, tmp_path):
    tl = decode(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    starts, ends = {}, {}
    for ts, ev in tl["events"]:
        for f in ev.flow_ids:
            starts[f] = (ev.track_uuid >> 32, tl["names"][ev.name_iid], ts)
        for f in ev.terminating_flow_ids:
            ends[f] = (ev.track_uuid >> 32, tl["names"][ev.name_iid], ts)
    assert len(starts) == 2 and set(starts) == set(ends)  # one flow per step's all_reduce
    for f in starts:
        assert starts[f][1] == ends[f][1] == "gloo:all_reduce"
        assert starts[f][0] != ends[f][0]  # from one rank's call to the other's
        assert tl["tracks"][(starts[f][0] << 32) | 1].thread.thread_name == "collectives"


def test_memory_counters(run, tmp_path):
    tl = decode(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    per_rank: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ts, ev in tl["events"]:
        if ev.type == TE.TYPE_COUNTER:
            assert tl["tracks"][ev.track_uuid].HasField("counter")
            per_rank[ev.track_uuid >> 32].append((ts, ev.counter_value))
    assert per_rank[1] == per_rank[2]  # same values at the same aligned times on both ranks
    assert per_rank[1][:3] == [(1_030_000, 1024), (1_031_000, 2048), (1_032_000, 3072)]


def test_filters(run, tmp_path):
    tl = decode(write_timeline(run, tmp_path / "m.pftrace", ranks=[1], steps=[2]).read_bytes())
    assert sorted(processes(tl)) == [2]
    steps = {tl["names"][ev.name_iid] for _, ev in tl["events"]
             if ev.type == TE.TYPE_SLICE_BEGIN and tl["names"][ev.name_iid].startswith("ProfilerStep")}
    assert steps == {"ProfilerStep#2"}
    assert not any(ev.flow_ids or ev.terminating_flow_ids for _, ev in tl["events"])  # no partner rank


def test_the_checks_catch_a_wrong_encoding():
    """The official decoding is strict enough: a field the definition lacks, or a wrong wire type, is caught."""
    ok = pf.packet(pf.f_bytes(11, pf.f_varint(9, TE.TYPE_SLICE_BEGIN) + pf.f_varint(11, 7)))
    assert unknown_fields(pb.Trace.FromString(ok)) == []
    wrong_number = pf.packet(pf.f_bytes(11, pf.f_varint(9, TE.TYPE_SLICE_BEGIN) + pf.f_varint(4095, 7)))
    assert unknown_fields(pb.Trace.FromString(wrong_number)) == ["Trace.packet[0].track_event"]
    wrong_type = pf.packet(pf.f_bytes(11, pf.f_bytes(9, b"x")))  # type is a varint, not bytes
    assert unknown_fields(pb.Trace.FromString(wrong_type)) == ["Trace.packet[0].track_event"]
    with pytest.raises(DecodeError):
        pb.Trace.FromString(pf.packet(b"\x0a\xff"))  # a truncated nested message


def test_real_trace_slices_survive_encoding(shared_data, tmp_path):
    """Two ranks of HTA's 128-rank NCCL job (GPU streams, nested CPU ops): every slice Perfetto rebuilds from
    our begin/end packets is exactly a complete event of the Chrome JSON made from the same selection."""
    for r in (0, 1):
        shutil.copy(shared_data / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz", tmp_path)
    real = load_run(tmp_path, jobs=1, allow_missing_ranks=True)  # ranks 2-127 of the job are not here
    got = slices(decode(write_timeline(real, tmp_path / "m.pftrace").read_bytes()))
    doc = json.loads(write_timeline(real, tmp_path / "m.json").read_text())
    base = doc["metadata"]["rankscope"]["base_ns"]
    want = Counter((e["pid"], e["name"], base + round(e["ts"] * 1e3), max(1, round(e["dur"] * 1e3)))
                   for e in doc["traceEvents"] if e["ph"] == "X")
    assert sum(got.values()) > 5000 and {k[0] for k in got} == {1, 2}
    assert got == want


def _ddp_buckets_run(root):
    """2 ranks, 2 steps, three gradient buckets per step whose all_reduces are in flight together (as
    DDP's buckets are, each on a gloo worker thread): 175 ms, 60 ms and 20 ms, each started before the
    previous one ended."""
    from tests.helpers import write_trace, x

    for r in (0, 1):
        evs = []
        for s in (1, 2):
            t = s * 400_000.0
            evs.append(x(f"ProfilerStep#{s}", t, 350_000, cat="user_annotation"))
            for k, (start, dur) in enumerate(((10_000, 175_000), (30_000, 60_000), (50_000, 20_000))):
                evs.append(x("gloo:all_reduce", t + start + r * 100, dur, cat="user_annotation", tid=10 + k,
                             **{"Input Dims": [[1000 * (k + 1)]], "Input type": ["float"]}))
        write_trace(root / "ranks" / str(r) / f"rank{r}.pt.trace.json", evs, rank=r, world=2)
    return load_run(root, jobs=1)


def test_overlapping_collectives_are_kept_whole_on_stacked_lanes(tmp_path):
    """Regression (issue 17): overlapping DDP buckets were cut short on one collectives track (a 175 ms
    all_reduce drawn as 28 ms). Now each keeps its duration; overlapping ones go to further lanes."""
    run = _ddp_buckets_run(tmp_path / "ddp")
    tl = decode(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    open_at: dict[int, list[int]] = defaultdict(list)
    durs: list[int] = []
    lanes: dict[int, set[str]] = defaultdict(set)
    for ts, ev in tl["events"]:
        name = tl["tracks"][ev.track_uuid].thread.thread_name if ev.track_uuid in tl["tracks"] else ""
        if not name.startswith("collectives"):
            continue
        lanes[ev.track_uuid >> 32].add(name)
        if ev.type == TE.TYPE_SLICE_BEGIN:
            assert not open_at[ev.track_uuid], "two slices open at once on one lane"
            open_at[ev.track_uuid].append(ts)
        elif ev.type == TE.TYPE_SLICE_END:
            durs.append(ts - open_at[ev.track_uuid].pop())
    assert sorted(durs) == sorted([175_000_000, 60_000_000, 20_000_000] * 4)
    assert all(v == {"collectives", "collectives 2", "collectives 3"} for v in lanes.values()) and len(lanes) == 2
    doc = json.loads(write_timeline(run, tmp_path / "m.json").read_text())
    coll = [e for e in doc["traceEvents"] if e.get("cat") == "collective"]
    assert sorted(e["dur"] for e in coll) == sorted([175_000.0, 60_000.0, 20_000.0] * 4)
    for pid in (1, 2):
        by_tid = defaultdict(list)
        for e in coll:
            if e["pid"] == pid:
                by_tid[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
        assert len(by_tid) == 3
        for spans in by_tid.values():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    named = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert (1, "collectives 3") in named and (2, "collectives 2") in named
