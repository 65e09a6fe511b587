"""Critical path of one rank against HTA 0.5.0 (the oracle) on HTA's own fixtures (../shared/data/hta, MIT).

HTA (``holistictraceanalysis==0.5.0``) runs in a child process: ``$RANKSCOPE_HTA_PYTHON``, else
``.bench/hta-venv/bin/python`` (made by bench/ingest.py; HTA 0.5.0 needs pandas < 3, which the
project's venv does not have), else this interpreter if it imports HTA with pandas < 3. The graph
(nodes, every edge with its weight, type and attributed event), the path and the overlaid trace
must be equal. Rules cited: hta/analyzers/critical_path_analysis.py of HTA 0.5.0 —
``_construct_graph_from_call_stack`` (lines 465-560: nesting, DEPENDENCY between top-level ops,
zero weight for blocking calls), ``_construct_graph_from_kernels`` (lines 840-1180: launch vs
kernel-kernel delay, Stream / Context / Event Sync, Stream Wait Event), ``_validate_graph``
(negative weights to 0), ``overlay_critical_path_analysis`` (lines 1640-1783).

Without the oracle the HTA-derived expectations below still hold: they are the assertions of HTA's
own tests (tests/test_critical_path_analysis.py at HTA commit 040e799, which ships these fixtures)
and counts measured with HTA 0.5.0 on these inputs.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from rankscope.analysis.deps import events as E
from rankscope.analysis.deps import graph as G
from rankscope.analysis.deps import overlay as O
from rankscope.analysis.deps import path as P
from rankscope.analysis.deps.cudasync import read_syncs
from rankscope.analysis.deps.gpu import E as T
from rankscope.model.run import load_run

ROOT = Path(__file__).resolve().parents[2]
# (fixture folder, annotation, instance): as HTA's tests call critical_path_analysis on them
CASES = {"simple_add": ("end_to_end/simple_add/input", "", 0),
         "event_sync": ("cuda_event_sync", "ProfilerStep", 0),
         "multi_stream": ("cuda_event_sync_multi_stream", "", None)}
# Measured with HTA 0.5.0 on these inputs: (path nodes, critical events).
HTA_COUNTS = {"simple_add": (1160, 600), "event_sync": (40, 22), "multi_stream": (59, 31)}

ORACLE = r"""
import json, sys, warnings, logging
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
d, ann, inst, out_dir = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
ta = TraceAnalysis(trace_dir=d)
g, ok = ta.critical_path_analysis(rank=0, annotation=ann, instance_id=inst)
nl = g.node_list
key = lambda n: [int(nl[n].ev_idx), bool(nl[n].is_start)]
edges = [key(u) + key(v) + [int(g.edges[u, v]["object"].weight), g.edges[u, v]["object"].type.value,
         g.edge_to_event_map.get((u, v))] for u, v in g.edges]
overlay = ta.overlay_critical_path_analysis(0, g, output_dir=out_dir, only_show_critical_events=False)
json.dump({"ok": bool(ok), "nodes": [key(n.idx) for n in nl], "edges": edges,
           "path": [key(n) for n in g.critical_path_nodes], "overlay": overlay}, sys.stdout)
"""


def _hta_python() -> str | None:
    cands = [os.environ.get("RANKSCOPE_HTA_PYTHON"), str(ROOT / ".bench" / "hta-venv" / "bin" / "python"), sys.executable]
    check = "import hta, pandas, sys; sys.exit(int(pandas.__version__.split('.')[0]) >= 3)"
    for c in cands:
        if c and Path(c).exists() and subprocess.run([c, "-c", check], capture_output=True).returncode == 0:
            return c
    return None


@pytest.fixture(scope="module")
def hta_python() -> str:
    py = _hta_python()
    if py is None:  # never a skip: a green run means the oracle ran
        pytest.fail("HTA 0.5.0 (the oracle) is not installed with pandas < 3: `make hta-venv` (`make test` runs it), "
                    "or python3 -m venv .bench/hta-venv && .bench/hta-venv/bin/pip install holistictraceanalysis==0.5.0 "
                    "'pandas<3'", pytrace=False)
    return py


class Ours:
    """Our graph and path of one fixture, with every node and edge keyed by raw event index."""

    def __init__(self, folder: Path, ann: str, inst: int | None, tmp: Path) -> None:
        os.environ.setdefault("RANKSCOPE_CACHE", str(tmp / "cache"))
        trace = next(folder.glob("*.json.gz"))
        with gzip.open(trace) as fh:
            self.doc = json.load(fh)
        self.rows = O.x_index(self.doc["traceEvents"])
        run = load_run(folder, jobs=1, allow_missing_ranks=True)
        # the events table lacks the two wait args of cuda_sync events: read them from the same file
        self.ev = E.from_table(run.table(run.rank_ids[0], "events"), read_syncs(str(trace)))
        t0 = t1 = None
        if ann:  # HTA: the instance-th event whose name contains the annotation
            hit = np.flatnonzero(np.array([ann in str(s) for s in self.ev.names] + [False])[self.ev.name_idx])
            t0, t1 = int(self.ev.ts[hit[inst]]), int(self.ev.end[hit[inst]])
        self.g = G.build(self.ev, G.window(self.ev, t0, t1))
        self.p = P.longest_path(self.g)

    def key(self, n: int) -> tuple[int, bool]:
        return int(self.rows[self.g.node_ev[n]]), bool(self.g.node_start[n])

    def edges(self) -> Counter:
        g = self.g
        return Counter(self.key(s) + self.key(d) + (int(w) // 1000, T.HTA_NAMES[t], None if a < 0 else int(self.rows[a]))
                       for s, d, w, t, a in zip(g.src, g.dst, g.w_raw, g.typ, g.attr))

    def edge(self, src: tuple[int, bool], dst: tuple[int, bool]) -> tuple[int, str]:
        """(weight µs, type) of the edge between two (raw event, start?) nodes."""
        hits = [(int(self.g.w_raw[i]) // 1000, T.HTA_NAMES[self.g.typ[i]]) for i in range(len(self.g.src))
                if self.key(self.g.src[i]) == src and self.key(self.g.dst[i]) == dst]
        assert len(hits) == 1, f"no single edge {src} -> {dst}: {hits}"
        return hits[0]


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, shared_data, tmp_path_factory):
    folder, ann, inst = CASES[request.param]
    return request.param, shared_data / "hta" / "critical_path" / folder, ann, inst, \
        Ours(shared_data / "hta" / "critical_path" / folder, ann, inst, tmp_path_factory.mktemp("cp"))


def test_graph_path_and_overlay_equal_hta(case, hta_python, tmp_path):
    name, folder, ann, inst, ours = case
    r = subprocess.run([hta_python, "-c", ORACLE, str(folder), ann, json.dumps(inst), str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    hta = json.loads(r.stdout)
    assert hta["ok"]
    assert {ours.key(n) for n in range(ours.g.n)} == {tuple(k) for k in hta["nodes"]}
    theirs = Counter(tuple(e[0:2]) + tuple(e[2:4]) + (e[4], e[5], e[6]) for e in hta["edges"])
    mine = ours.edges()
    assert mine == theirs, f"only ours: {list(mine - theirs)[:5]}, only HTA's: {list(theirs - mine)[:5]}"
    assert [ours.key(n) for n in ours.p.nodes] == [tuple(k) for k in hta["path"]]
    with gzip.open(hta["overlay"]) as fh:
        hta_doc = json.load(fh)
    assert _overlay_signature(O.overlaid(ours.doc, ours.g, ours.p)) == _overlay_signature(hta_doc)


def _overlay_signature(doc: dict) -> tuple[list[int], Counter]:
    """Critical-marked events (by position) and flow events (ids aside: HTA numbers them in set order)."""
    evs = doc["traceEvents"]
    marked = [i for i, e in enumerate(evs) if e.get("ph") == "X" and e.get("args", {}).get("critical") == 1]
    fl = Counter(json.dumps({k: v for k, v in e.items() if k != "id"}, sort_keys=True)
                 for e in evs if "critical_path" in str(e.get("cat", "")))
    return marked, fl


def test_counts_measured_with_hta(case):
    name, *_, ours = case
    assert (len(ours.p.nodes), len(O.critical_events(ours.g, ours.p))) == HTA_COUNTS[name]


def test_sync_edges_of_hta_tests(case):
    """HTA's test_critical_path_analysis_event_sync / _multistream, with their event indices."""
    name, *_, ours = case
    if name == "event_sync":
        # spin_kernel (33) -> cudaEventSynchronize (41) and -> cudaDeviceSynchronize (51): GPU -> CPU syncs
        assert ours.edge((33, False), (41, False)) == (0, "critical_path_sync_dependency")
        assert ours.edge((33, False), (51, False)) == (0, "critical_path_sync_dependency")
    elif name == "multi_stream":
        # ampere_sgemm_128x64_nn (24) on stream 20 -> Memset (84) on stream 24, through cudaStreamWaitEvent
        assert ours.edge((24, False), (84, True)) == (0, "critical_path_sync_dependency")
    else:
        kinds = Counter(T.HTA_NAMES[t] for t in ours.g.typ)
        assert kinds["critical_path_kernel_launch_delay"] > 0 and kinds["critical_path_kernel_kernel_delay"] > 0
        assert kinds["critical_path_sync_dependency"] > 0


def test_committed_overlay_of_a_later_hta(shared_data, case):
    """The committed expected overlay (HTA's tests/data, commit 55aa2d8) was written by HTA after
    0.5.0, whose rules changed (CUDA runtime lock edges, a kernel-kernel delay threshold): HTA 0.5.0
    marks 600 events critical there, 590 of the file's 624. Ours must agree with 0.5.0 the same way."""
    name, *_, ours = case
    if name != "simple_add":
        return
    with gzip.open(shared_data / "hta" / "critical_path" / "end_to_end" / "simple_add" / "output"
                   / "overlaid_critical_path_trace.json.gz") as fh:
        expected = json.load(fh)["traceEvents"]
    want = {i for i, e in enumerate(expected) if e.get("ph") == "X" and e.get("args", {}).get("critical") == 1}
    got = set(ours.rows[O.critical_events(ours.g, ours.p)].tolist())
    assert len(got) == 600 and len(want) == 624 and len(got & want) == 590
