"""Natural mistakes get one helpful line each, and the process pool survives any bad file (issue 11)."""
from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path

import pytest

from rankscope.cli import main
from rankscope.commands.common import size_arg
from rankscope.errors import TraceError, safe
from tests.hostile import _bomb, healthy_run, rank_doc


def _plain_dir(d: Path) -> Path:
    d.mkdir(parents=True)
    for r in range(3):
        (d / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(rank_doc(r)).encode()))
    return d


def test_trace_error_pickles_back_from_a_worker():
    err = pickle.loads(pickle.dumps(TraceError("/r/x.json", "empty file")))
    assert isinstance(err, TraceError) and (err.path, err.problem) == ("/r/x.json", "empty file")


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "pool"])
def test_stray_json_files_beside_traces_never_break_the_pool(tmp_path, capsys, jobs):
    """The BrokenProcessPool of issue 11: an empty x.json, a user's notes.json and the --json output of
    an earlier analyze, next to the traces of a plain directory."""
    d = _plain_dir(tmp_path / "traces")
    assert main(["analyze", str(d), "-j", jobs, "--json"]) == 0
    (d / "summary.json").write_text(capsys.readouterr().out)
    (d / "x.json").write_bytes(b"")
    (d / "notes.json").write_text('{"note": "lr 3e-4, batch 64"}')
    assert main(["analyze", str(d), "-j", jobs, "--json"]) == 0
    got = capsys.readouterr()
    doc = json.loads(got.out)
    assert [r["rank"] for r in doc["run"]["ranks"]] == [0, 1, 2]
    assert "Traceback" not in got.err and "BrokenProcessPool" not in got.err
    for name, why in (("x.json", "empty file"), ("notes.json", "no trace events"), ("summary.json", "no trace events")):
        assert any(name in ln and why in ln for ln in got.err.splitlines()), (name, got.err)


def test_parent_of_several_runs_lists_them(tmp_path, capsys):
    healthy_run(tmp_path / "runs" / "monday")
    healthy_run(tmp_path / "runs" / "tuesday")
    assert main(["analyze", str(tmp_path / "runs"), "-j", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds 2 runs (monday, tuesday); pass one of them" in err


def test_run_without_traces_suggests_prof_step(tmp_path, capsys):
    root = healthy_run(tmp_path / "run")
    for r in range(3):  # the collector wrote meta.json and a MANIFEST listing only it: no window completed
        d = root / "ranks" / str(r)
        (d / f"rank{r}.pt.trace.json.gz").unlink()
        (d / "MANIFEST.json").write_text(json.dumps({"files": [{"path": "meta.json", "size": 1, "sha256": "0"}]}))
    assert main(["analyze", str(root), "-j", "1"]) == 1
    assert "prof.step()" in capsys.readouterr().err


def test_run_still_being_written_says_not_published(tmp_path, capsys):
    root = healthy_run(tmp_path / "run")
    for r in range(3):
        d = root / "ranks" / str(r)
        (d / f"rank{r}.pt.trace.json.gz").unlink()
        (d / "MANIFEST.json").unlink()
    assert main(["analyze", str(root), "-j", "1"]) == 1
    err = capsys.readouterr().err
    assert "not published" in err and "still running" in err and "missing" not in err


def test_one_trace_file_is_accepted(tmp_path, capsys):
    root = healthy_run(tmp_path / "run")
    f = root / "ranks" / "1" / "rank1.pt.trace.json.gz"
    assert main(["analyze", str(f), "-j", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in doc["run"]["ranks"]] == [1]


@pytest.mark.parametrize("verb,name", [("report", "r.html"), ("timeline", "t.json")])
def test_output_into_a_missing_folder_is_created(tmp_path, capsys, verb, name):
    root = healthy_run(tmp_path / "run")
    target = tmp_path / "new" / "deeper" / name
    assert main([verb, str(root), "-o", str(target), "-j", "1"]) == 0
    assert target.is_file() and target.stat().st_size > 0


def test_output_folder_that_cannot_exist_fails_before_the_work(tmp_path, capsys, monkeypatch):
    root = healthy_run(tmp_path / "run")
    (tmp_path / "afile").write_text("x")
    import rankscope.model.run as run_mod

    def no_work(*a, **k):  # the check must come before any rank is read
        raise AssertionError("ranks were read before the output folder was checked")
    monkeypatch.setattr(run_mod, "load_run", no_work)
    assert main(["report", str(root), "-o", str(tmp_path / "afile" / "r.html"), "-j", "1"]) == 1
    err = capsys.readouterr().err
    assert "cannot create its folder" in err and "Traceback" not in err


def test_gzip_bomb_refused_unless_the_limit_is_raised(tmp_path, capsys):
    root = healthy_run(tmp_path / "run")
    _bomb(root)
    assert main(["analyze", str(root), "-j", "1"]) == 0
    assert "gzip inflates more than" in capsys.readouterr().err
    shutil.rmtree(root / "analysis")
    assert main(["analyze", str(root), "-j", "1", "--max-inflated-size", "200M"]) == 0
    err = capsys.readouterr().err
    assert "gzip inflates" not in err and "rank1.pt.trace.json.gz" in err  # read, then found not to be JSON


def test_size_argument():
    assert size_arg("16G") == 16 << 30 and size_arg("512M") == 512 << 20 and size_arg("1000") == 1000
    with pytest.raises(Exception, match="not a size"):
        size_arg("lots")


def test_terminal_escapes_are_escaped():
    assert safe("a\x1b[2Jb\nc\rd\x07") == "a\\x1b[2Jb\\nc\\rd\\x07"


def test_numbers_from_files_never_size_memory(tmp_path):
    """World size 10**9 (trace and run.json) and a 1 GiB gzip bomb: a subprocess's peak RSS stays far
    below what honouring them would take (measured before the fix: 8-14 GB and 6.2 GB)."""
    import os
    import subprocess
    import sys
    import zlib

    root = healthy_run(tmp_path / "run")
    m = json.loads((root / "run.json").read_text())
    m["world_size"] = 10**9
    m.pop("ranks_expected")
    (root / "run.json").write_text(json.dumps(m))
    d = rank_doc(0)
    d["distributedInfo"]["world_size"] = 10**9
    (root / "ranks" / "0" / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(d).encode()))
    (root / "ranks" / "0" / "MANIFEST.json").unlink()
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(root / "ranks" / "1" / "rank1.pt.trace.json.gz", "wb") as f:
        for _ in range(64):
            f.write(co.compress(b" " * (1 << 24)))
        f.write(co.flush())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSCOPE_")}  # default limits
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    # -j 1: all reading happens in this one process, whose own peak RSS it prints at exit.
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak (pytest's, here) into ru_maxrss across exec.
    code = ("import re, sys; from rankscope.cli import main; rc = main(sys.argv[1:]); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print('MAXRSS_KIB', hwm, file=sys.stderr); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, "analyze", str(root), "-j", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "world size 1000000000 ignored" in p.stderr, p.stderr[-800:]
    assert "gzip inflates more than 100x" in p.stderr, p.stderr[-800:]
    peak_mib = int(p.stderr.rsplit("MAXRSS_KIB", 1)[1].split()[0]) / 1024
    print(f"peak RSS {peak_mib:.0f} MiB")
    assert peak_mib < 600, f"peak RSS {peak_mib:.0f} MiB\n{p.stderr[-800:]}"


def test_report_names_missing_and_damaged_ranks_above_the_verdict(tmp_path, capsys):
    from tests.hostile import CASES

    root = healthy_run(tmp_path / "run")
    next(c for c in CASES if c.name == "truncated_gzip").make(root)
    (root / "ranks" / "2" / "rank2.pt.trace.json.gz").write_bytes(b"")
    out = tmp_path / "r.html"
    assert main(["report", str(root), "-o", str(out), "-j", "1"]) == 0
    html = out.read_text()
    banner = html.index('class="warn coverage"')
    assert "damaged rank 1: rank1.pt.trace.json.gz: gzip stream damaged" in html
    assert "missing rank 2: empty file" in html
    # one undamaged rank left: no verdict, and the page says why, below the banner
    assert banner < html.index("straggler analysis skipped: needs at least 2 undamaged ranks")
    assert '"coverage": {"world_size": 3, "ranks_read": 2' in html  # the page's JSON data too


def _crashing_ingest(task):  # type: ignore[no-untyped-def]
    """ingest, except that a worker process reading rank 1 dies (module level: pools pickle it by name)."""
    import os

    from rankscope.model.ingest import ingest

    if str(os.getpid()) != os.environ.get("RS_TEST_PARENT_PID") and "rank1" in task.files[0]:
        os._exit(3)
    return ingest(task)


def test_a_worker_that_dies_costs_only_its_rank(tmp_path, monkeypatch):
    """A reader crash that kills its worker process (simulated: os._exit in the worker when it reads
    rank 1; no file here can crash the real readers) breaks the pool; every other rank is still read,
    in processes of their own, and rank 1 is missing with the reason."""
    import os

    import rankscope.model.run as run_mod
    from rankscope.model.run import load_run

    monkeypatch.setattr(run_mod, "ingest", _crashing_ingest)
    monkeypatch.setenv("RS_TEST_PARENT_PID", str(os.getpid()))
    root = healthy_run(tmp_path / "run")
    run = load_run(root, jobs=2)
    assert run.rank_ids == [0, 2] and run.missing == [1]
    assert "reader process died" in run.absent[1]


def test_truncated_slowest_rank_is_never_the_straggler(tmp_path, capsys):
    """Rank 1 is the slow one; once its trace is truncated it must not be named, and the verdict says
    it left the damaged rank out. The control (same run, intact) names rank 1, so this can fail."""
    from tests.hostile import trace_path, write_manifest

    root = healthy_run(tmp_path / "run")
    for r, slow in ((1, 1.6), (2, 1.0)):
        trace_path(root, r).write_bytes(gzip.compress(json.dumps(rank_doc(r, slow=slow)).encode()))
        write_manifest(root / "ranks" / str(r), r)
    assert main(["analyze", str(root), "-j", "1", "--json"]) == 0
    control = json.loads(capsys.readouterr().out)["analyses"]["straggler"]
    assert {r for f in control["findings"] for r in f["ranks"]} == {1}
    shutil.rmtree(root / "analysis")
    g = trace_path(root, 1).read_bytes()
    trace_path(root, 1).write_bytes(g[: len(g) * 3 // 4])
    assert main(["analyze", str(root), "-j", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    st = doc["analyses"]["straggler"]
    assert 1 in [r["rank"] for r in doc["run"]["ranks"]] and doc["coverage"]["damaged"][0]["rank"] == 1
    assert not {r for f in st["findings"] for r in f["ranks"]} & {1}
    # ranks 0 and 2 are enough for a verdict: drawn on them, rank 1 named as left out (no escape hatch)
    assert st["skipped"] is None and st["findings"] == [] and st["summary"]["excluded_ranks"] == [1]
    assert st["summary"]["verdict"] == "no straggler (damaged ranks 1 left out of the verdict)"


def test_unreadable_rank_directory_is_one_line():
    """A rank directory that cannot be listed (chmod 000), read by a user the mode applies to: as root the
    analysis runs as uid 65534 (tests/hostile.py run_batch, setpriv), never a simulated PermissionError."""
    import os
    import tempfile

    from tests.hostile import run_batch

    base = Path(tempfile.mkdtemp(prefix="rs-unreadable-"))
    os.chmod(base, 0o755)
    root = healthy_run(base / "r" / "run")
    os.chmod(root / "ranks" / "1", 0)
    try:
        got = run_batch(base, ["r"], "1", {})["r"]
    finally:
        os.chmod(root / "ranks" / "1", 0o755)
        shutil.rmtree(base, ignore_errors=True)
    assert got["rc"] == 0 and "Traceback" not in got["err"], got["err"]
    doc = json.loads(got["out"])
    assert [r["rank"] for r in doc["run"]["ranks"]] == [0, 2]
    assert doc["coverage"]["missing"] == [{"rank": 1, "why": "directory unreadable (Permission denied)"}]
    assert [(i["kind"], i["rank"], i["file"]) for i in doc["run"]["issues"]] == [
        ("directory_unreadable", 1, str(root / "ranks" / "1"))]
    assert f"warning: {root / 'ranks' / '1'}: directory unreadable (Permission denied)" in got["err"].splitlines()


def test_inspect_json_starts_with_coverage(tmp_path, capsys):
    root = healthy_run(tmp_path / "run")
    (root / "ranks" / "2" / "rank2.pt.trace.json.gz").write_bytes(b"")
    assert main(["inspect", str(root), "-j", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert next(iter(doc)) == "coverage" and doc["coverage"]["missing"] == [{"rank": 2, "why": "empty file"}]



def test_parent_of_plain_trace_folders_lists_them(tmp_path, capsys):
    """Two folders of plain traces that both hold a rank 0 are two runs; per-host folders of one run
    (ranks 0-1 in one, 2 in the other) are read as one run."""
    for name in ("monday", "tuesday"):
        _plain_dir(tmp_path / "runs" / name)
    assert main(["analyze", str(tmp_path / "runs"), "-j", "1"]) == 1
    err = capsys.readouterr().err
    assert "holds traces of 2 separate runs (monday, tuesday: rank 0 appears in monday and tuesday)" in err
    hosts = tmp_path / "hosts"
    for host, ranks in (("node0", (0, 1)), ("node1", (2,))):
        (hosts / host).mkdir(parents=True)
        for r in ranks:
            (hosts / host / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(rank_doc(r)).encode()))
    assert main(["analyze", str(hosts), "-j", "1", "--json"]) == 0
    assert [r["rank"] for r in json.loads(capsys.readouterr().out)["run"]["ranks"]] == [0, 1, 2]


def test_diff_names_missing_ranks_of_either_run_and_strict(tmp_path, capsys):
    a = healthy_run(tmp_path / "a")
    b = healthy_run(tmp_path / "b")
    (b / "ranks" / "2" / "rank2.pt.trace.json.gz").write_bytes(b"")
    assert main(["diff", str(a), str(b), "-j", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert next(iter(doc)) == "coverage" and doc["coverage"]["baseline"]["missing"] == [{"rank": 2, "why": "empty file"}]
    assert main(["diff", str(a), str(b), "-j", "1"]) == 0
    assert capsys.readouterr().out.startswith("baseline: missing rank 2 (empty file)")
    assert main(["diff", str(a), str(b), "-j", "1", "--strict"]) == 1


_WRONG = [5, 1.5, "x", True, -1, 2**70, [1], ["x"], [[1]], [{"a": 1}], {}, {"a": 1}]
_META_PATHS = ["format", "run_id", "local_rank", "world_size", "host", "pid", "device", "backend", "process_groups",
               "process_groups.0", "process_groups.0.ranks", "layout", "versions", "clock", "clock.anchors",
               "clock.anchors.0.wall_ns", "clock.offset_to_rank0_ns", "clock.offset_error_ns", "windows", "windows.0",
               "windows.0.index", "windows.0.steps", "windows.0.steps.0", "windows.0.file", "windows.0.sched",
               "windows.0.sched.step", "windows.0.sched.cpu_ns", "windows.0.sched.runq_wait_ns", "metadata",
               "metadata.device_memory_bytes", "idle", "idle.since_step", "idle.closed_windows", "rpc_files"]


def _at(doc, path):  # type: ignore[no-untyped-def]
    *head, last = path.split(".")
    for k in head:
        doc = doc[int(k)] if k.isdigit() else doc[k]
    return doc, int(last) if last.isdigit() else last


def test_every_meta_field_of_the_wrong_type_is_said_and_never_reaches_an_analysis(tmp_path):
    """Issue 23's traceback ('int' object is not iterable): every meta.json field (docs/contract.md), set to
    values of every JSON type. The check (model/sanity.py clean against META) says each value of another
    type than the documented one, with a count, and the analyses that read meta.json (captured windows,
    CPU wait, device memory, pipeline stages) run on what is left without raising; cleaning twice says
    nothing more."""
    import copy

    from rankscope.analysis.diagnosis import advice
    from rankscope.analysis.steps import breakdown
    from rankscope.analysis.steps import capture
    from rankscope.analysis.diagnosis import cpu
    from rankscope.model import sanity
    from rankscope.model.run import load_run
    from tests.hostile import meta_doc

    run = load_run(healthy_run(tmp_path / "run"), jobs=1)
    base = meta_doc(1)
    base["windows"][0]["sched"] = {"source": "schedstat", "step": [1, 2, 3, 4], "cpu_ns": [5, 5, 5, 5],
                                   "runq_wait_ns": [0, 1, None, 0]}
    base["layout"], base["idle"], base["metadata"] = {"pp": 1}, {"since_step": 3, "closed_windows": [0]}, {
        "device_memory_bytes": 1 << 30}
    base["rpc_files"] = ["rpc.0000.json.gz"]
    assert sanity.clean(base, sanity.META, "m", []) is base  # the documented shape passes untouched
    tried = 0
    for path in _META_PATHS:
        for value in _WRONG:
            meta = copy.deepcopy(base)
            parent, key = _at(meta, path)
            documented = parent[key]
            parent[key] = value
            problems: list[str] = []
            clean = sanity.clean(meta, sanity.META, "ranks/1/meta.json", problems)
            wrong_type = type(value) is not type(documented)
            assert not wrong_type or (len(problems) == 1 and problems[0].n >= 1), (path, value, problems)
            assert sanity.clean(clean, sanity.META, "again", []) is clean, (path, value)
            run.ranks[1].meta = clean
            capture.collect(run), cpu.sched_frame(run), advice._device_totals(run), breakdown.stage_groups(run)
            tried += wrong_type
    assert tried > 300


@pytest.mark.parametrize("rel,data,kind,rank", [
    ("run.json", b'{"run_id": "R", "world_size": "3"}', "bad_field", None),  # was: TypeError in range("3")
    ("run.json", b"{", "not_json", None),  # was: the whole run refused
    ("ranks/1/meta.json", json.dumps({"rank": 1, "windows": 5, "metadata": [1]}).encode(), "bad_field", 1),
    ("ranks/1/meta.json", b"\xef\xbb\xbf[1]", "not_an_object", 1),
])
def test_side_files_of_a_run_on_remote_storage_are_checked_like_local_ones(tmp_path, rel, data, kind, rank):
    """A run read through fsspec (memory://: fsspec's own in-memory filesystem, the code path of s3://)
    gets the same checks of run.json and meta.json as a local run: one record each, every rank read."""
    import fsspec

    from rankscope.model.run import load_run

    local = healthy_run(tmp_path / "run")
    (local / rel).write_bytes(data)
    fs, name = fsspec.filesystem("memory"), f"rs-{tmp_path.name}"
    for p in local.rglob("*"):
        if p.is_file():
            fs.pipe_file(f"/{name}/{p.relative_to(local)}", p.read_bytes())
    try:
        run = load_run(f"memory://{name}", jobs=1, cache_dir=tmp_path / "cache")
    finally:
        fs.rm(f"/{name}", recursive=True)
    assert run.rank_ids == [0, 1, 2] and run.world_size == 3
    recs = [p.record() for p in run.problems]
    want = [(kind, f"memory:///{name}/{rel}", rank)]
    if rel.endswith("meta.json") and data.startswith(b"\xef\xbb\xbf"):
        want.insert(0, ("byte_order_mark", f"memory:///{name}/{rel}", rank))
    assert [(r["kind"], r["file"], r["rank"]) for r in recs] == want
