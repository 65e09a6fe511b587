"""The report's views on hand-built results (issue 23): signed and grouped cells, heatmaps that say "all equal"
instead of one flat colour, one colour per category in every figure, the memory view's peak and operator."""
from __future__ import annotations

import json

import pyarrow as pa

from rankscope.analysis.base import Result
from rankscope.render import charts, views
from rankscope.analysis.compare.diff import VIEW_TABLES as DIFF_TABLES
from rankscope.render.declare import cell, group_label


def test_signed_cells_group_labels_and_devices():
    assert cell(2_500_000, "ns+") == "+2.50 ms" and cell(-1_200_000, "bytes+") == "-1.2 MB"
    assert cell(20717.7, "us+") == "+20.7 ms" and cell(-116396.8, "us+") == "-116 ms"  # never µs above 1 ms
    assert cell(0, "ns+") == "0 µs" and cell(3, "count+") == "+3" and cell(-1, "device") == "CPU"
    assert cell("host_wait", "words") == "host wait"
    assert cell("0,1,2,3", "group") == "0-3" and cell("0,2,4,6", "group") == "0,2,4,6"
    odd = ",".join(str(r) for r in range(1, 64, 2))
    assert cell(odd, "group") == "1,3,…,63 (32 ranks)" == group_label(range(1, 64, 2))
    for tv in DIFF_TABLES:  # labels a person reads: no X / XBase / XDiff, no snake_case
        assert not [c.label for c in tv.cols if "_" in c.label or any(a.islower() and b.isupper()
                                                                      for a, b in zip(c.label, c.label[1:]))], tv


def _matrix(values: dict[tuple[int, int], float]) -> pa.Table:
    rows = [{"src": a, "dst": b, "bytes": v, "time_ns": 1e6, "count": 1} for (a, b), v in values.items()]
    return pa.Table.from_pylist(rows)


def test_heatmap_of_equal_pairs_is_said_in_words():
    """A 4-rank data-parallel all-reduce moves the same bytes between every pair: one colour would say nothing."""
    equal = _matrix({(a, b): 7.9e6 for a in range(4) for b in range(4) if a != b})
    out = "".join(views._heatmaps("comm_matrix", "matrix", equal))
    assert out.count('class="heat-equal"') == 3 and "data-fig" not in out  # bytes, time, bandwidth
    assert "7.9 MB for every one of the 12 pairs of ranks (all equal" in out


def test_heatmap_scale_spans_the_pairs_only():
    pairs = {(a, b): (2e6 if (a, b) == (0, 1) else 1e6) for a in range(4) for b in range(4) if a != b}
    out = views._heatmaps("comm_matrix", "matrix", _matrix(pairs))
    fig = json.loads(out[0].split('data-fig="heat-matrix-0">')[1].split("</script>")[0])
    z = fig["data"][0]["z"]
    assert [z[i][i] for i in range(4)] == [None] * 4  # a rank with itself is no pair: blank, not a dark 0
    assert z[0][1] == 2.0 and z[1][0] == 1.0 and fig["data"][0]["x"] == [0, 1, 2, 3]


def test_one_colour_per_category_in_every_figure():
    per_rank = [{"rank": r, "computing": 1e6, "comm_exposed": 1e6, "data_wait": 1e6, "free": 1e6} for r in range(3)]
    tl = {"lanes": ["rank 0", "rank 1"], "ranks": [0, 1], "classes": ["compute", "exposed communication",
                                                                     "data wait", "idle"],
          "blocks": [(0, 0.0, 1.0, k) for k in range(4)], "arrivals": [[(0, 1.0), (1, 2.0)]],
          "step_starts": {3: 0.0}, "aligned": True}
    from rankscope.render.diff import _rank_delta_figure

    delta = [{"rank": r, **{f"{c}Diff": 1.0 for c in ("computing", "comm_exposed", "data_wait", "free")}}
             for r in range(3)]
    traj = charts.stacked_figure([{"rank": 0, "iteration_gap": 1, "fwd_bwd": 2, "iteration_tail": 3}], "rank",
                                 [("iteration_gap", "gap before compute"), ("fwd_bwd", "forward + backward"),
                                  ("iteration_tail", "tail after compute")], "ms", 1.0)
    colour: dict[str, set[str]] = {}
    for fig in (charts.breakdown_figure(per_rank, set()), charts.cluster_figure(tl), _rank_delta_figure(delta), traj):
        for tr in fig.data:
            c = tr.marker.color if tr.type == "bar" else (tr.marker.color or tr.line.color)
            colour.setdefault(tr.name, set()).add(c)
    assert all(len(c) == 1 for c in colour.values()), colour
    cats = ("compute", "exposed communication", "data wait", "idle")
    assert all(len(colour[c]) == 1 and colour[c] == {charts.PALETTE[c]} for c in cats)
    assert len(set(charts.PALETTE.values())) == len(charts.PALETTE)  # no two categories share a colour


def test_memory_view_shows_each_rank_peak_and_the_operator_at_it():
    peaks = pa.Table.from_pylist([{"rank": r, "device": -1, "peak_allocated": (r + 1) * 4_000_000, "peak_ts": 10,
                                   "peak_reserved": 0, "operator_at_peak": f"aten::op{r}"} for r in range(3)])
    line = pa.Table.from_pylist([{"rank": r, "device": -1, "ts": t, "allocated": t * 1000, "reserved": 0}
                                 for r in range(3) for t in range(1, 5)])
    res = {"memory": Result("memory", tables={"timeline": line, "peaks": peaks},
                            summary={"max_peak_allocated": 12_000_000, "max_peak_rank": 2})}
    out = views.memory(None, res)  # type: ignore[arg-type]
    assert "largest peak: <b>12.0 MB</b> allocated on rank 2, while <b>aten::op2</b> ran" in out
    assert 'id="memory-peaks-chart"' in out and 'id="memory-chart"' in out
    skipped = views.memory(None, {"memory": Result("memory", skipped="no [memory] events")})  # type: ignore[arg-type]
    assert "no memory to show: no [memory] events" in skipped and "profile_memory=True" in skipped
