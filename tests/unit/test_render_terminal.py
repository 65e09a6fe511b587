"""`rankscope analyze` in the terminal: the per-rank table, then the verdict, once (it was printed twice:
as the table's caption and as the line under it)."""
from __future__ import annotations

import pytest

from rankscope.analysis.registry import run_all
from rankscope.cli import main
from rankscope.model.run import load_run
from rankscope.synth import generate
from tests.helpers import one_line, tiny_run


@pytest.mark.parametrize("case", ["healthy", "straggler"])
def test_verdict_printed_once_under_the_table(tmp_path, capsys, case):
    if case == "healthy":
        run = tiny_run(tmp_path / "run")
    else:
        run = generate(tmp_path / "run", ranks=4, steps=6, ops_per_step=40, seed=3, stragglers=["2:compute:1.5"])
    verdict = run_all(load_run(run, jobs=1))["straggler"].summary["verdict"]
    capsys.readouterr()
    assert main(["analyze", str(run), "-j", "1"]) == 0
    out = one_line(capsys.readouterr().out)
    assert (verdict == "no straggler") == (case == "healthy"), verdict
    assert out.count(one_line(verdict)) == 1, out
    assert out.index("Per-rank step breakdown") < out.index(one_line(verdict))  # under the table
    assert out.count("verdict:") == 0, out  # the table no longer carries it as a caption
