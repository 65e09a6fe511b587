"""torch_npu's "ts" strings are read to the ns, as torch_npu itself reads them.

The oracle is torch_npu's own pair of functions (``convert_ns2us_str`` writes every "ts" of trace_view.json,
``convert_us2ns`` reads it back; ``profiler/analysis/prof_common_func/_constant.py`` of the cached torch-npu wheel,
tests/torch_npu_oracle.py), and the real trace ../shared/data/ascend_msprof/trace_view.json.gz.
"""
from __future__ import annotations

import gzip
import json

import numpy as np
from hypothesis import given, settings, strategies as st

from rankscope.model import tables
from rankscope.model.readers.ascend import torch_npu as reader
from rankscope.model.readers.timestamps import decimal_ns, to_ns
from tests import torch_npu_oracle


def _constant():
    torch_npu_oracle._import(torch_npu_oracle.unpacked())
    from torch_npu.profiler.analysis.prof_common_func import _constant  # type: ignore[import-not-found]
    return _constant


EPOCH_NS = st.integers(min_value=0, max_value=4_100_000_000_000_000_000)  # to the year 2100


def _floats(strs):
    """The callers' fallback: each value's float, to ns (``tables`` and ``flows.ns_many`` read them so)."""
    return to_ns(np.array([float(s) for s in strs]), 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(EPOCH_NS, min_size=1, max_size=40))
def test_what_torch_npu_writes_is_read_back_to_the_ns(values):
    c = _constant()
    strs = [c.convert_ns2us_str(v) for v in values]
    got = decimal_ns(strs, _floats(strs))
    assert got.tolist() == values == [c.convert_us2ns(s) for s in strs]


_DECIMAL = st.builds(lambda neg, whole, frac: ("-" if neg else "") + whole + ("." + frac if frac is not None else ""),
                     st.booleans(), st.text("0123456789", min_size=1, max_size=15),
                     st.none() | st.text("0123456789", max_size=7))


@settings(max_examples=300, deadline=None)
@given(st.lists(_DECIMAL, min_size=1, max_size=20))
def test_any_decimal_is_read_as_convert_us2ns_reads_it(strs):
    """Fewer or more than three decimals, a sign, leading zeros: torch_npu's reader joins the digits and cuts after
    the third decimal."""
    c = _constant()
    want = [c.convert_us2ns(s) for s in strs]
    assert decimal_ns(strs, _floats(strs)).tolist() == want


def test_what_is_not_a_plain_decimal_keeps_its_float():
    """Exponents, a second point, words, values past 2**52 µs: the float's ns stand (where it has one)."""
    strs = ["1.5e3", "1.234e5", "1.2.3", "12", "1e3", "nan", "", "9" * 17 + ".5", "1.5 ", "１.５"]
    fallback = np.arange(len(strs), dtype=np.int64) * 7 + 2**62  # past 2**52 µs: nothing of it is read back
    assert decimal_ns(strs, fallback).tolist() == fallback.tolist()
    plain_floats = ["1.5e3", "1.234e5", "12", "1e3", "1.5 ", "１.５", "-3"]
    assert decimal_ns(plain_floats, _floats(plain_floats)).tolist() == [
        1_500_000, 123_400_000, 12_000, 1_000_000, 1_500, 1_500, -3_000]


def test_the_real_trace_is_read_to_the_ns_and_its_spans_nest(shared_data, tmp_path):
    """Every event of the real trace at the ns its string says (a float parse moved 1,652 of its 1,665 spans by up
    to 125 ns); the spans of a thread nest or follow each other, none overlaps another in part (11 did)."""
    c = _constant()
    tv = tmp_path / "trace_view.json"
    tv.write_bytes(gzip.decompress((shared_data / "ascend_msprof" / "trace_view.json.gz").read_bytes()))
    doc = json.loads(tv.read_text())
    xs = [e for e in doc if e.get("ph") == "X" and e["pid"] != 4376751100]  # "Overlap Analysis": left out
    tabs, _ = tables.build(reader.read_trace_view(tv))
    ev = tabs["events"].to_pydict()
    assert sorted(ev["ts"]) == sorted(c.convert_us2ns(e["ts"]) for e in xs)
    assert len(xs) == 1665
    threads: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for pid, tid, ts, dur in zip(ev["pid"], ev["tid"], ev["ts"], ev["dur"]):
        threads.setdefault((pid, tid), []).append((ts, ts + dur))
    partial = 0
    for spans in threads.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []
        for s, e in spans:
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            partial += bool(open_ends and e > open_ends[-1])
            open_ends.append(e)
    assert partial == 0
