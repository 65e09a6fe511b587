"""The report's communication view filters the rank × rank matrix by operation (issue 25: "with a per-op
filter in the report"): an MoE-like run whose all_to_all is uneven (rank 1 receives 2.5x) beside an even
all_reduce. Summed over both, the all_to_all's shape is diluted; chosen alone, its heatmap holds exactly
its own bytes, and the all_reduce alone is said to be equal for every pair. Rendered from a hand-made
comm_matrix result (the analysis' own table shape: pg_name, op, src, dst, bytes, time_ns, count, exact)."""
from __future__ import annotations

import json
import re

import polars as pl

from rankscope.analysis.base import Result
from rankscope.analysis.comm.matrix import by_op
from rankscope.model.run import Run
from rankscope.render.views import communication


def _matrix() -> pl.DataFrame:
    rows = []
    for s in range(4):
        for d in range(4):
            if s != d:
                rows.append(("0", "all_reduce", s, d, 3e6, 1_000_000, 4, False))
                rows.append(("0", "all_to_all", s, d, (2.5e6 if d == 1 else 1e6) + s * 1e3, 2_000_000, 4, True))
    m = pl.DataFrame(rows, schema=["pg_name", "op", "src", "dst", "bytes", "time_ns", "count", "exact"], orient="row")
    return m.with_columns(bandwidth_gbps=pl.col("bytes") / pl.col("time_ns"))


def _figs(html: str, div: str) -> dict[str, dict]:
    part = re.search(rf'<div class="heat-op" id="{div}"( hidden)?>(.*?)</div>(?=<div class="heat-op"|</section>)',
                     html, re.S)
    assert part, div
    return {i: json.loads(j) for i, j in re.findall(r'<script type="application/json" data-fig="([^"]+)">(.*?)</script>',
                                                     part.group(2), re.S)}


def test_the_matrix_is_shown_per_operation_on_choice():
    m = _matrix()
    res = {"comm_matrix": Result("comm_matrix", tables={"matrix": m.to_arrow(), "by_op": by_op(m).to_arrow()})}
    html = communication(Run(path="x", run_id="x", world_size=4, ranks={}), res)
    opts = re.findall(r'<option value="(heat-op-[^"]+)">([^<]+)</option>', html)
    # by_op's order: most bytes first (all_to_all 12 pairs x ~1.5 MB = 18.0 MB < all_reduce 12 x 3 MB = 36 MB)
    assert [v for v, _ in opts] == ["heat-op-all", "heat-op-0", "heat-op-1"]
    assert opts[1][1].startswith("all_reduce") and "modelled" in opts[1][1]
    assert opts[2][1].startswith("all_to_all") and "modelled" not in opts[2][1]
    assert '<div class="heat-op" id="heat-op-all">' in html and '<div class="heat-op" id="heat-op-1" hidden>' in html
    a2a = _figs(html, "heat-op-1")
    data = a2a["heat-matrix-op1-0"]["data"][0]["z"]  # data sent, MB, rank -> rank; the diagonal blank
    for s in range(4):
        for d in range(4):
            want = None if s == d else round((2.5e6 if d == 1 else 1e6) + s * 1e3) / 1e6
            assert data[s][d] == (None if want is None else float(f"{want:.4g}")), (s, d, data[s][d])
    ar = re.search(r'id="heat-op-0" hidden>(.*?)</div>', html, re.S).group(1)
    assert "all equal" in ar and "data sent" in ar  # an even all_reduce: said in words, no flat heatmap
    every = _figs(html, "heat-op-all")["heat-matrix-0"]["data"][0]["z"]
    assert every[0][1] == float(f"{(3e6 + 2.5e6) / 1e6:.4g}")  # both operations summed when none is chosen


def test_one_operation_needs_no_choice():
    m = _matrix().filter(pl.col("op") == "all_to_all")
    res = {"comm_matrix": Result("comm_matrix", tables={"matrix": m.to_arrow(), "by_op": by_op(m).to_arrow()})}
    html = communication(Run(path="x", run_id="x", world_size=4, ranks={}), res)
    assert "heat-op-select" not in html and 'data-fig="heat-matrix-0"' in html
