"""torch_npu's DB export (ascend_pytorch_profiler_<rank>.db + analysis.db) read as a second input form.

The fixture is one simulated run written in both of torch_npu's forms (rankscope/synth/ascend_run.py;
DB tables from torch_npu 2.6.0 prof_common_func/_constant.py ``TableColumnsManager`` and
prof_view/prof_db_parse/*.py, see rankscope/synth/ascend_db.py). The text reader is the reference here
(it agrees with msprof-analyze, tests/golden/test_msprof_oracle.py); the DB form against msprof-analyze's
DB mode is tests/golden/test_msprof_db_oracle.py. Damaged DB files give one line each, never a traceback.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rankscope.cli import main
from rankscope.model.readers.ascend import reader as ascend
from rankscope.model.readers.ascend import torch_npu
from rankscope.synth.ascend_run import write_run
from rankscope.synth.ascend_sim import AscendJob

OUT = "ASCEND_PROFILER_OUTPUT"


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    job = AscendJob(steps=(10, 11))
    return write_run(root / "text", job), write_run(root / "db", job, form="db")


def _rows(tab, drop=()):
    rows = [{k: (json.loads(v) if k == "info" else v) for k, v in r.items() if k not in drop} for r in tab.to_pylist()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


@pytest.mark.parametrize("table,drop", [("events", ("pid", "tid")), ("steps", ()), ("collectives", ()),
                                        ("comm_ops", ()), ("comm_links", ()), ("step_times", ())])
def test_db_form_reads_the_same_tables_as_the_text_form(forms, table, drop):
    """Every per-rank table but the layer pid/tid numbering is the same from both forms."""
    for text_dir, db_dir in zip(*forms):
        assert not (db_dir / OUT / "trace_view.json").exists() and ascend.export_form(db_dir) == "db"
        want, _, _ = ascend.read(text_dir)
        got, problems, partial = ascend.read(db_dir)
        assert not problems and not partial
        assert want[table].num_rows > 0, table
        assert _rows(got[table], drop) == _rows(want[table], drop), f"{db_dir.name}: {table}"


def test_db_form_gives_the_same_verdict(forms, tmp_path):
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    verdicts = []
    for dirs in forms:
        run = load_run(dirs[0].parent, jobs=1, cache_dir=tmp_path / dirs[0].parent.name)
        assert run.rank_ids == [0, 1, 2, 3]
        st = run_all(run, ["breakdown", "clock", "links", "straggler"])["straggler"]
        verdicts.append((st.summary["verdict"], [f.ranks for f in st.findings]))
    assert verdicts[0] == verdicts[1] and verdicts[0][1] == [(3,)]


def _copy(forms, tmp_path) -> Path:
    import shutil

    root = tmp_path / "run"
    shutil.copytree(forms[1][0].parent, root, ignore=shutil.ignore_patterns("analysis"))
    return root


def _rank1(root: Path) -> Path:
    return next(d for d in root.iterdir() if d.name.startswith("node0_41001")) / OUT


def _drop_table(name: str):
    def damage(out: Path) -> None:
        for db in out.glob("*.db"):
            with sqlite3.connect(db) as con:
                con.execute(f"DROP TABLE IF EXISTS {name}")
            con.close()
    return damage


CASES = [  # name, damage of rank 1, line on stderr, rank 1 analyzed
    ("profiler_db_not_sqlite", lambda out: (out / "ascend_pytorch_profiler_1.db").write_bytes(b"<html>" * 100),
     "not a readable SQLite database", False),
    ("analysis_db_not_sqlite", lambda out: (out / "analysis.db").write_bytes(b"\x00garbage" * 50),
     "analysis.db: unreadable", True),
    ("analysis_db_missing", lambda out: (out / "analysis.db").unlink(), "no analysis.db", True),
    ("no_timeline_tables", _drop_table("STRING_IDS"), "no timeline", True),
    ("no_comm_time_table", _drop_table("CommAnalyzerTime"), "", True),
    ("only_analysis_db", lambda out: (out / "ascend_pytorch_profiler_1.db").unlink(), "only analysis.db: no timeline",
     True),
]


@pytest.mark.parametrize("name,damage,line,kept", CASES, ids=[c[0] for c in CASES])
def test_hostile_db(forms, tmp_path, capsys, name, damage, line, kept):
    root = _copy(forms, tmp_path)
    damage(_rank1(root))
    assert main(["analyze", str(root), "-j", "1", "--json"]) == 0
    got = capsys.readouterr()
    assert "Traceback" not in got.err
    if line:
        assert any(line in ln for ln in got.err.splitlines()), got.err
    ranks = [r["rank"] for r in json.loads(got.out)["run"]["ranks"]]
    assert 0 in ranks and (1 in ranks) == kept


def test_cli_synth_db(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rankscope.cli", "synth", str(run), "--format", "ascend", "--db",
                           "--ranks", "4"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    dbs = sorted(p.name for p in run.glob(f"*_ascend_pt/{OUT}/*.db"))
    assert dbs == ["analysis.db"] * 4 + [f"ascend_pytorch_profiler_{r}.db" for r in range(4)]
    assert not list(run.glob(f"*/{OUT}/*.json"))
    bad = subprocess.run([sys.executable, "-m", "rankscope.cli", "synth", str(tmp_path / "k"), "--db"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--db is for --format ascend" in bad.stderr


def test_rank_from_the_db_when_profiler_info_is_gone(forms, tmp_path):
    """RANK_DEVICE_MAP (content) names the rank, then the db's file name; profiler_info and
    profiler_metadata removed."""
    root = _copy(forms, tmp_path)
    d = _rank1(root).parent
    (d / "profiler_info_1.json").unlink()
    (d / "profiler_metadata.json").unlink()
    assert torch_npu.identity(d)[:2] == (1, "RANK_DEVICE_MAP")
    _drop_table("RANK_DEVICE_MAP")(d / OUT)
    assert torch_npu.identity(d)[:2] == (1, "profiler db file name")
