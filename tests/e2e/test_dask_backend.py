"""The Dask distributed backend against the local process pool, on a real LocalCluster.

The test starts a real ``distributed.LocalCluster`` (two worker processes, one thread each) and
points rankscope at its scheduler address, as a user with a running cluster would. Nothing is
mocked: the workers parse the traces, write the Parquet cache and run the per-rank analysis parts.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

distributed = pytest.importorskip("distributed", reason="the dask extra is part of the dev install")

from rankscope.analysis.registry import run_all  # noqa: E402
from rankscope.engine.executors import run_tasks  # noqa: E402
from rankscope.model.ingest import ingest  # noqa: E402
from rankscope.model.run import discover, load_run  # noqa: E402
from rankscope.synth import generate  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Any:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c:
        yield c


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("dask")
    src = generate(base / "src", ranks=6, steps=6, ops_per_step=40, seed=3, stragglers=["4:compute:1.5"],
                   slow_links=["0-1:3.0"], clock_skew_s=0.2)
    # One broken rank file beside the good ones: reported, not fatal, on both backends.
    (src / "ranks" / "5" / "extra.pt.trace.json").write_text("{\"traceEvents\": [")
    a, b = base / "pool", base / "dask"
    shutil.copytree(src, a)
    shutil.copytree(src, b)
    return a, b


def _tables(results: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    out = {}
    for name, res in results.items():
        for tname, t in res.tables.items():
            out[f"{name}.{tname}"] = t if isinstance(t, pl.DataFrame) else pl.from_arrow(t)
    return out


def _local(problems: list[str], root: Path) -> list[str]:
    return [p.replace(str(root), "RUN") for p in problems]


def test_same_tables_through_pool_and_dask(runs: tuple[Path, Path], cluster: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = runs
    ra = load_run(a, jobs=2, allow_missing_ranks=True)
    res_a = run_all(ra)
    monkeypatch.setenv("RANKSCOPE_DASK", cluster.scheduler_address)
    rb = load_run(b, jobs=2, allow_missing_ranks=True)
    res_b = run_all(rb)
    # the workers wrote the cache of the Dask copy themselves
    assert all(Path(rb.ranks[r].cache).is_relative_to(b) for r in rb.rank_ids)
    assert rb.rank_ids == ra.rank_ids == list(range(6))
    assert _local(rb.problems, b) == _local(ra.problems, a)
    assert any("extra.pt.trace.json" in p for p in rb.problems)  # the broken file is named
    ta, tb = _tables(res_a), _tables(res_b)
    assert ta.keys() == tb.keys() and len(ta) > 10
    from polars.testing import assert_frame_equal

    for k in ta:
        # exact for integers and strings; floats to 1e-12 (polars' std aggregates in parallel and
        # differs in the last bit between two runs of the same backend too)
        assert_frame_equal(ta[k], tb[k], check_row_order=False, rel_tol=1e-12, abs_tol=0.0)
    assert res_a["straggler"].summary["verdict"] == res_b["straggler"].summary["verdict"]
    # rank 5 is damaged (its broken file): left out of the verdict on both backends; rank 4 still named
    assert rb.damaged == ra.damaged and 5 in rb.damaged
    assert {r for f in res_b["straggler"].findings for r in f.ranks} == {4}


def _dies_once(task: Any) -> Any:
    """Kill this worker process the first time any task runs (a marker file says it happened)."""
    marker = Path(task.cache_dir) / "killed-once"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return ingest(task)


def test_killed_worker_is_retried_and_result_complete(runs: tuple[Path, Path], tmp_path: Path,
                                                     cluster: Any) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs[0], run, ignore=shutil.ignore_patterns("analysis"))
    cache = tmp_path / "cache"
    tasks = discover(run, cache).tasks
    got = run_tasks(_dies_once, tasks, jobs=2, dask=cluster.scheduler_address)
    assert (cache / "killed-once").exists()  # a worker really died
    ok = [g for g in got if not isinstance(g, Exception)]
    assert sorted(i.rank for i in ok) == list(range(6)) and len(got) == len(tasks)


def test_cli_dask_local_same_verdict_as_pool(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """`rankscope analyze RUN --dask local` as a user types it: its own LocalCluster, quiet stderr."""
    import json
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(runs[0], run, ignore=shutil.ignore_patterns("analysis"))

    def analyze(*extra: str) -> tuple[dict[str, Any], str]:
        p = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", str(run), "--json",
                            "--allow-missing-ranks", *extra], capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout), p.stderr

    got, err = analyze("--dask", "local", "--jobs", "2")
    assert "distributed" not in err and "Traceback" not in err
    shutil.rmtree(run / "analysis")
    want, _ = analyze("--jobs", "2")
    assert got["analyses"]["straggler"]["summary"]["verdict"] == want["analyses"]["straggler"]["summary"]["verdict"]
    assert got["run"]["problems"] == want["run"]["problems"]
