"""rankscope on torch_npu's DB export against msprof-analyze in DB mode (the owner of cluster_analysis.db).

Input: the realistic 4-rank run of rankscope/synth/ascend_run.py (TP 2 x PP 2 on two nodes, slow rank 3,
slow HCCS link 0-1) written twice: as torch_npu's text export and as its DB export
(rankscope/synth/ascend_db.py; schema from torch_npu 2.6.0 prof_common_func/_constant.py and
prof_view/prof_db_parse/*.py, read back by rankscope/model/readers/ascend/db.py). msprof-analyze 26.2.0
``cluster -m all`` picks DB mode itself when it finds ascend_pytorch_profiler_<rank>.db
(cluster_data_preprocess/prof_data_allocate.py) and writes cluster_analysis.db; every value of its
ClusterStepTraceTime, CommunicationGroupMapping, ClusterCommunicationTime, ClusterCommunicationBandwidth
and ClusterCommunicationMatrix tables is looked up in rankscope's cluster files (tests/msprof_db_oracle.py
says which columns and why). Expected: all 5,421 agree.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from rankscope.synth.ascend_run import write_run
from tests import msprof_db_oracle, msprof_oracle
from tests.helpers import require


@pytest.fixture(scope="module", autouse=True)
def oracle_installed() -> None:
    """msprof-analyze is the oracle of every test here: missing, they fail with its install command (never a skip)."""
    require("msprof_analyze", "msprof-analyze>=26.2")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("db_oracle")
    write_run(root / "db", form="db")
    write_run(root / "text")
    ref = msprof_oracle.run_msprof(root / "db", root / "msprof") / "cluster_analysis.db"
    got_db = msprof_oracle.run_rankscope(root / "db", root / "rankscope-db")
    got_text = msprof_oracle.run_rankscope(root / "text", root / "rankscope-text")
    return ref, got_db, got_text


def test_every_value_agrees_with_msprof_analyze_db_mode(outputs):
    ref, got, _ = outputs
    assert ref.is_file(), "msprof-analyze wrote no cluster_analysis.db (did it fall back to text mode?)"
    res = msprof_db_oracle.compare(ref, got)
    for table, (ok, n, bad) in res.items():
        assert n > 10, f"{table}: too few values to compare ({n})"
        assert ok == n, f"{table}: {ok} of {n} agree; first differences: {bad}"
    assert sum(n for _, n, _ in res.values()) == 5421


def test_msprof_db_mode_shows_the_slow_rank_and_the_slow_link(outputs):
    """The oracle itself sees the injected faults in the DB form (so the agreement is about something)."""
    ref, _, _ = outputs
    con = sqlite3.connect(ref)
    comp = dict(con.execute("SELECT `index`, SUM(computing) FROM ClusterStepTraceTime WHERE type = 'rank' "
                            "GROUP BY `index`").fetchall())
    assert max(comp, key=comp.get) in (3, "3")
    groups = dict(con.execute("SELECT rank_set, group_name FROM CommunicationGroupMapping").fetchall())
    bw = dict(con.execute("SELECT group_name, bandwidth FROM ClusterCommunicationMatrix WHERE hccl_op_name = "
                          "'Total Op Info' AND step = 'step10' AND src_rank <> dst_rank").fetchall())
    assert bw[groups["(0,1)"]] < 0.3 * bw[groups["(2,3)"]]


def test_db_and_text_forms_give_the_same_numbers(outputs):
    """rankscope's files from the two forms of one run agree value by value, except where msprof-analyze's
    two modes differ by design: DB mode maps pipeline send links (no self-link) through
    parallel_group_info, text mode drops them. Those links are the only differences, and only in the
    DB form."""
    _, got_db, got_text = outputs
    res = msprof_oracle.compare(got_text, got_db)
    for name in ("cluster_step_trace_time.csv", "cluster_communication.json", "communication_group.json"):
        ok, n, bad = res[name]
        assert n > 20 and ok == n, f"{name}: {ok} of {n} agree; {bad}"
    groups = json.loads((got_db / "communication_group.json").read_text())
    p2p = {g["group_name"] for g in groups["comm_group_parallel_info"] if g["type"] == "p2p"}
    text = msprof_oracle.values(got_text / "cluster_communication_matrix.json")
    db = msprof_oracle.values(got_db / "cluster_communication_matrix.json")
    common = [k for k in text if k in db]
    assert len(common) > 1000 and all(msprof_oracle._same(text[k], db[k]) for k in common)
    only_db = [k for k in db if k not in text]
    assert only_db and all(k[2].split("@")[-1] in p2p and k[3] != "" for k in only_db)
    assert all(text[k] == {} and k[2].split("@")[-1] in p2p for k in text if k not in db)


def test_cli_synth_db_at_8_ranks_agrees_too(tmp_path):
    """`rankscope synth --format ascend --db` (8 ranks on 2 nodes, TP 2 x PP 4, slow rank 5, slow link 0-1)."""
    import subprocess
    import sys

    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rankscope.cli", "synth", str(run), "--format", "ascend", "--db",
                           "--ranks", "8", "--gpus-per-host", "4", "--straggler", "5:compute:1.4", "--slow-link",
                           "0-1:0.3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ref = msprof_oracle.run_msprof(run, tmp_path / "msprof") / "cluster_analysis.db"
    res = msprof_db_oracle.compare(ref, msprof_oracle.run_rankscope(run, tmp_path / "rankscope"))
    for table, (ok, n, bad) in res.items():
        assert n > 20 and ok == n, f"{table}: {ok} of {n} agree; first differences: {bad}"
    assert sum(n for _, n, _ in res.values()) == 13239


def test_text_and_db_side_by_side_follow_msprof_db_mode(outputs, tmp_path):
    """export_type ["text", "db"] writes both forms in one folder: msprof-analyze then runs in DB mode
    (prof_data_allocate.py looks for the profiler db first); rankscope reads the text files and its
    cluster files follow DB mode, so every value agrees again."""
    import shutil

    ref_db, _, _ = outputs
    root = ref_db.parents[2]  # the module's tmp dir: db/ and text/ of one simulated run
    both = tmp_path / "both"
    shutil.copytree(root / "text", both)
    for src in sorted((root / "db").glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT/*.db")):
        shutil.copy(src, both / src.parent.parent.name / "ASCEND_PROFILER_OUTPUT" / src.name)
    ref = msprof_oracle.run_msprof(both, tmp_path / "msprof") / "cluster_analysis.db"
    assert ref.is_file()
    res = msprof_db_oracle.compare(ref, msprof_oracle.run_rankscope(both, tmp_path / "rankscope"))
    for table, (ok, n, bad) in res.items():
        assert n > 10 and ok == n, f"{table}: {ok} of {n} agree; first differences: {bad}"
