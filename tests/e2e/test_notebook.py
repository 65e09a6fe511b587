"""docs/notebook.ipynb, run as a notebook runs it: its code cells in order in one namespace (what a Jupyter
kernel does, minus rich display: no kernel is installed here), on a real 2-rank demo run; and the API's
tables checked against the analyses they come from."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import demo_runs

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebook.ipynb"


def test_example_notebook_runs(tmp_path_factory, tmp_path, monkeypatch):
    run = demo_runs(tmp_path_factory) / "slow1"
    monkeypatch.setenv("RANKSCOPE_NOTEBOOK_RUN", str(run))
    monkeypatch.chdir(tmp_path)
    nb = json.loads(NOTEBOOK.read_text())
    ns: dict = {}
    last = None
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            code = "".join(cell["source"])
            *body, tail = code.rstrip().splitlines()
            exec(compile("\n".join(body), str(NOTEBOOK), "exec"), ns)  # noqa: S102 - our own notebook
            try:  # the last line's value is what the notebook shows
                last = eval(compile(tail, str(NOTEBOOK), "eval"), ns)  # noqa: S307
            except SyntaxError:
                exec(compile(tail, str(NOTEBOOK), "exec"), ns)  # noqa: S102
    a = ns["a"]
    st = a.results["straggler"]  # the notebook's run has rank 1 slow: named, with a cause (structured)
    assert [f.ranks for f in st.findings] == [(1,)] and st.findings[0].evidence["cause"], a.verdict
    assert a.verdict == st.summary["verdict"]
    per_rank = ns["per_rank"]
    assert per_rank.sort("own_ms", descending=True)["rank"][0] == 1
    assert list(ns["ops"].columns)[:3] == ["name", "ranks", "calls"]  # a pandas DataFrame
    assert last[0] > 100_000 and last[1] > 1_000  # report and trace written
    bd = a.breakdown()
    assert (bd["computing"] + bd["comm_exposed"] + bd["data_wait"] + bd["free"] == bd["wall"]).all()
    with pytest.raises(KeyError, match="has no table"):
        a.table("breakdown", "nope")
    d = a.diff(str(run.parent / "healthy"))
    assert d.results["diff"].findings and d.table("diff", "ranks").height == 2
