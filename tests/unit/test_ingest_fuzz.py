"""Property-based fuzzing of the readers (hypothesis, fixed budget, derandomized so CI is stable).

Properties: ``ingest`` (the worker entry point) never raises, whatever the bytes or values; what it
returns is a RankInfo or a TraceError and pickles (it must travel back from a pool worker); a kept
rank never has more events than the file had; the small-file reader never raises; gzip is inflated
within bounds or refused with a TraceError.
"""
from __future__ import annotations

import gzip
import json
import pickle
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankscope.errors import TraceError
from rankscope.model import inflate, sanity
from rankscope.model.info import RankInfo
from rankscope.model.ingest import RankTask, ingest
from tests.hostile import rank_doc

BUDGET = settings(max_examples=200, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**80, max_value=2**80),
                     st.floats(allow_nan=False), st.text(max_size=12))
JSON = st.recursive(_SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                    max_leaves=12)
_FIELDS = ("ph", "name", "cat", "ts", "dur", "pid", "tid", "args")


def _ingest_bytes(data: bytes, name: str = "rank0.json") -> RankInfo | TraceError:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_bytes(data)
        got = ingest(RankTask((str(p),), str(Path(d) / "cache"), 0, {}, "file name"))
        assert isinstance(got, (RankInfo, TraceError))
        back = pickle.loads(pickle.dumps(got))
        assert type(back) is type(got) and str(back) == str(got)
        return got


@BUDGET
@given(st.binary(max_size=2000))
def test_any_bytes_give_a_rank_or_one_line(data):
    got = _ingest_bytes(data)
    if isinstance(got, TraceError):  # one line naming the file
        assert got.path.endswith("rank0.json") and "Traceback" not in got.problem


@BUDGET
@given(st.data())
def test_mutated_real_shaped_trace(data):
    """A valid trace with bytes flipped, cut or inserted somewhere (plain and gzip)."""
    raw = json.dumps(rank_doc(0)).encode()
    gz = data.draw(st.booleans())
    buf = bytearray(gzip.compress(raw, mtime=0) if gz else raw)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            buf[i] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del buf[i:i + data.draw(st.integers(1, 64))]
        else:
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        if not buf:
            break
    got = _ingest_bytes(bytes(buf), "rank0.json.gz" if gz else "rank0.json")
    if isinstance(got, RankInfo):
        assert got.counts["events"] <= len(rank_doc(0)["traceEvents"])


@BUDGET
@given(st.lists(st.fixed_dictionaries({}, optional={k: JSON for k in _FIELDS}), max_size=8),
       st.dictionaries(st.sampled_from(["distributedInfo", "baseTimeNanoseconds", "deviceProperties"]), JSON))
def test_events_with_any_values(events, top):
    """Every field of every event and the trace header may hold any JSON value."""
    doc: dict[str, Any] = {"traceEvents": rank_doc(0)["traceEvents"][:5] + events, **top}
    got = _ingest_bytes(json.dumps(doc).encode())
    if isinstance(got, RankInfo):
        assert got.counts["events"] <= len(doc["traceEvents"])
        assert got.world_size is None or 1 <= got.world_size <= sanity.MAX_WORLD
        assert 0 <= got.base_time_ns < sanity.MAX_EPOCH_NS


@BUDGET
@given(st.binary(max_size=400))
def test_small_side_files_never_raise(data):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "meta.json"
        p.write_bytes(data)
        problems: list[str] = []
        got = sanity.read_object(p, problems)
        assert isinstance(got, dict)
        assert got or problems or data.lstrip(b"\xef\xbb\xbf").strip().startswith(b"{")


@BUDGET
@given(st.binary(min_size=1, max_size=3000), st.integers(1, 64))
def test_inflate_is_bounded(payload, limit_kib):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json.gz"
        p.write_bytes(gzip.compress(payload * 50))
        src = inflate.Source(str(p), limit=limit_kib << 10)
        try:
            out = src.read_all()
        except TraceError as err:
            assert "too large" in err.problem
        else:
            assert out == payload * 50 and not src.damage


_RUN_DIR: dict[str, Path] = {}


def _side_file_run() -> Path:
    """One healthy 3-rank run reused by every example (its trace cache makes re-reading cheap)."""
    if "root" not in _RUN_DIR:
        from tests.hostile import healthy_run

        _RUN_DIR["root"] = healthy_run(Path(tempfile.mkdtemp(prefix="rs-fuzz-")) / "run")
    return _RUN_DIR["root"]


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(["run.json", "ranks/1/meta.json", "ranks/1/MANIFEST.json"]),
       st.one_of(JSON, st.dictionaries(st.sampled_from(
           ["run_id", "world_size", "ranks_expected", "rank", "clock", "files", "host", "windows", "device"]), JSON)))
def test_side_files_with_any_json(name, value):
    """run.json, meta.json and MANIFEST.json may hold any JSON: load_run never raises for them, and
    ranks 0 and 2 (whose own files are intact) are always read."""
    from rankscope.errors import RankscopeError
    from rankscope.model.run import load_run

    root = _side_file_run()
    target = root / name
    old = target.read_bytes()
    target.write_text(json.dumps(value))
    try:
        run = load_run(root, jobs=1)
    except RankscopeError as err:  # allowed only as one line; never for these inputs in practice
        raise AssertionError(f"{name}={value!r}: {err}") from err
    finally:
        target.write_bytes(old)
    assert {0, 2} <= set(run.ranks)
    assert run.world_size is None or 1 <= run.world_size <= sanity.MAX_WORLD
    assert len(run.missing) <= sanity.MAX_WORLD
