"""The shared per-rank pass (one read of a rank's events for breakdown, hta_temporal, kernels,
opstats, memory), kernel statistics per launching-operator shape, and the pipeline "stage" rows
of the Ascend step_trace_time table. Tiny hand-made traces; expected values computed by hand."""
import json

import pytest

from rankscope.analysis.steps import breakdown
from rankscope.analysis.compat import hta as hta_compat
from rankscope.analysis.gpu import kernels
from rankscope.analysis.steps import memory
from rankscope.analysis.steps import opstats
from rankscope.analysis.registry import run_all
from rankscope.model.run import Run, load_run
from tests.helpers import write_trace, x


def k(name, ts, dur, ext, corr):
    return x(name, ts, dur, "kernel", tid=7, **{"External id": ext, "correlation": corr, "stream": 7, "device": 0})


def _rank_events(slow: float = 1.0):
    # two steps; aten::mm launches gemm twice with shapes [[4, 4]] and once with [[8, 8]].
    ev = []
    for s, t0 in ((1, 0.0), (2, 100.0)):
        ev += [x(f"ProfilerStep#{s}", t0, 100, "user_annotation"),
               x("aten::mm", t0 + 1, 5, "cpu_op", **{"External id": 10 * s, "Input Dims": [[4, 4]]}),
               x("cudaLaunchKernel", t0 + 2, 1, "cuda_runtime", **{"External id": 10 * s, "correlation": 10 * s}),
               k("gemm", t0 + 10, 20 * slow, 10 * s, 10 * s),
               x("aten::mm", t0 + 40, 5, "cpu_op", **{"External id": 10 * s + 1, "Input Dims": [[8, 8]]}),
               x("cudaLaunchKernel", t0 + 41, 1, "cuda_runtime",
                 **{"External id": 10 * s + 1, "correlation": 10 * s + 1}),
               k("gemm", t0 + 50, 30, 10 * s + 1, 10 * s + 1)]
    return ev


def _run(tmp_path, world=4, layout=None):
    for r in range(world):
        d = tmp_path / "ranks" / str(r)
        write_trace(d / "trace.json", _rank_events(2.0 if r == 3 else 1.0), rank=r, world=world)
        (d / "meta.json").write_text(json.dumps({"rank": r, "layout": layout}))
    return load_run(tmp_path, jobs=1)


def test_shared_pass_equals_standalone_and_reads_events_once(tmp_path, monkeypatch):
    run = _run(tmp_path)
    reads = []
    orig = Run.table
    monkeypatch.setattr(Run, "table", lambda self, r, n, columns=None: (reads.append((r, n)), orig(self, r, n, columns))[1])
    names = ["breakdown", "hta_temporal", "opstats", "kernels", "memory"]
    shared = run_all(run, names=names)
    assert sorted(r for r, n in reads if n == "events") == [0, 1, 2, 3]  # one read per rank for five analyses
    alone = {"breakdown": breakdown.run_breakdown(run, {}), "hta_temporal": hta_compat.run_hta_temporal(run, {}),
             "opstats": opstats.run_opstats(run, {}), "kernels": kernels.run_kernels(run, {}),
             "memory": memory.run_memory(run, {})}
    for n in names:
        assert shared[n].skipped == alone[n].skipped
        for t in alone[n].tables:
            a, b = shared[n].tables[t], alone[n].tables[t]
            key = [(c, "ascending") for c in ("rank", "step", "Step", "Index", "class", "name", "input_dims", "ts")
                   if c in a.column_names]
            ra, rb = a.sort_by(key).to_pylist(), b.sort_by(key).to_pylist()
            # floats only to ~1e-12: polars sums in parallel, so std's last digit may differ run to run
            # (nan_ok: HTA's overlap of a rank without communication kernels is NaN, as HTA gives it)
            assert ra == [{c: pytest.approx(v, rel=1e-9, nan_ok=True) if isinstance(v, float) else v for c, v in r.items()}
                          for r in rb], (n, t)


def test_pass_frees_the_events_before_the_parts_that_read_only_the_hta_view(tmp_path, monkeypatch):
    """Issue 26: the rank parts that declare ``rank_reads=("htaview",)`` run after the events and everything
    computed from them are freed; where no part before them built the view, the pass builds it before it
    frees the events (the events are still read once)."""
    from rankscope.analysis.rankdata import RankData

    run = _run(tmp_path)
    seen = []
    orig = RankData.release

    def spy(self, keep=()):
        freed = orig(self, keep)
        seen.append((self.rank, freed, dict(self._tables), set(self._memo)))
        return freed

    monkeypatch.setattr(RankData, "release", spy)
    reads = []
    table = Run.table
    monkeypatch.setattr(Run, "table", lambda self, r, n, columns=None: (reads.append((r, n)), table(self, r, n, columns))[1])
    together = run_all(run, names=["kernel_breakdown", "aten_kernels", "hta_temporal"])
    assert [(r, freed, t, m) for r, freed, t, m in seen] == [(r, True, {}, {"htaview"}) for r in range(4)]
    assert sorted(r for r, n in reads if n == "events") == [0, 1, 2, 3]
    assert together["hta_temporal"].tables["hta_temporal"].to_pylist() == \
        hta_compat.run_hta_temporal(run, {}).tables["hta_temporal"].to_pylist()
    seen.clear()
    reads.clear()
    run_all(run, names=["breakdown", "hta_temporal"])  # only hta_temporal reads the view: the pass builds it
    assert [(r, freed, m) for r, freed, _, m in seen] == [(r, True, {"htaview"}) for r in range(4)]
    assert sorted(r for r, n in reads if n == "events") == [0, 1, 2, 3]


def test_pass_builds_the_view_after_the_events_side_and_runs_the_view_side_after_the_events_go(tmp_path, monkeypatch):
    """Issue 26: kernel_breakdown's and memory_bw's rank parts read the events and return a ``Later`` for their
    HTA side. Per rank: the events sides, then the view built beside only the event columns it reads (the
    other tables, columns and memoized values freed), the events freed, then the view sides; the results
    equal the standalone runs."""
    from rankscope.analysis.gpu import htaview as hv
    from rankscope.analysis.gpu import kernel_breakdown as kb
    from rankscope.analysis.gpu import memory_bw
    from rankscope.analysis.rankdata import MAKERS, Maker, RankData

    run = _run(tmp_path)
    alone = {"kernel_breakdown": kb.run_kernel_breakdown(run, {}), "memory_bw": memory_bw.run_memory_bw(run, {})}
    calls = []

    def spy(tag, fn):
        return lambda *a, **k: (calls.append(tag), fn(*a, **k))[1]

    maker = MAKERS[hv.KEY]

    def make(d):
        calls.append(("view", sorted(d._tables), sorted(d.events.column_names), sorted(d._memo)))
        return maker.make(d)

    monkeypatch.setitem(MAKERS, hv.KEY, Maker(make, maker.columns))
    monkeypatch.setattr(kb, "_own_part", spy("own", kb._own_part))
    monkeypatch.setattr(kb, "_hta_part", spy("hta", kb._hta_part))
    monkeypatch.setattr(memory_bw, "copy_columns", spy("copy columns", memory_bw.copy_columns))
    monkeypatch.setattr(memory_bw, "copies", spy("copies", memory_bw.copies))
    monkeypatch.setattr(RankData, "release", spy("release", RankData.release))
    shared = run_all(run, names=["kernel_breakdown", "memory_bw"])
    view = ("view", ["events"], sorted(maker.columns), [])
    assert calls == ["own", "copy columns", view, "release", "hta", "copies"] * 4
    for n, res in alone.items():
        assert res.skipped == shared[n].skipped
        for t, a in res.tables.items():
            assert a.equals(shared[n].tables[t]), (n, t)


def test_kernel_stats_per_launching_shape(tmp_path):
    res = run_all(_run(tmp_path), names=["opstats"])["opstats"]
    rows = {r["input_dims"]: r for r in res.tables["kernels_by_shape"].to_pylist()}
    assert set(rows) == {"[[4, 4]]", "[[8, 8]]"}
    small, big = rows["[[4, 4]]"], rows["[[8, 8]]"]
    # per rank: 2 launches of each shape; [[4,4]] takes 20 µs (40 µs on rank 3), [[8,8]] 30 µs
    assert (small["calls"], big["calls"]) == (8, 8)
    assert (small["min"], small["max"], small["max_rank"]) == (40_000, 80_000, 3)
    assert big["min"] == big["max"] == 60_000
    (kern,) = res.tables["kernels"].to_pylist()
    assert kern["calls"] == 16 and kern["max"] == 140_000 and kern["max_rank"] == 3


def test_stage_rows_from_pp_layout(tmp_path):
    res = run_all(_run(tmp_path, layout={"dp": 2, "pp": 2}), names=["breakdown"])["breakdown"]
    assert res.summary["pipeline_stages"] == [[0, 1], [2, 3]]
    rows = res.tables["step_trace_time"].to_pylist()
    assert sum(r["Type"] == "rank" for r in rows) == 8 and {r["Index"] for r in rows if r["Type"] == "rank"} == {
        "0", "1", "2", "3"}
    stage = {(r["Step"], r["Index"]): r for r in rows if r["Type"] == "stage"}
    assert set(stage) == {(1, "(0,1)"), (1, "(2,3)"), (2, "(0,1)"), (2, "(2,3)")}
    # stage value = maximum over its ranks: rank 3's gemm is twice as long (40 + 30 µs computing)
    assert stage[(1, "(2,3)")]["Computing"] == pytest.approx(70.0)
    assert stage[(1, "(0,1)")]["Computing"] == pytest.approx(50.0)


def test_no_stage_rows_without_layout(tmp_path):
    res = run_all(_run(tmp_path, world=2), names=["breakdown"])["breakdown"]
    t = res.tables["step_trace_time"]
    assert set(t.column("Type").to_pylist()) == {"rank"} and t.column("Index").to_pylist()[0] == 0
    assert "pipeline_stages" not in res.summary
