"""Kineto reader on the real shared traces (../shared/data/hta, MIT; see its README.md).

Facts asserted come from the files themselves (their distributedInfo, category names, the README's
description of each trace). The df_index_resolver counts were cross-checked with a plain
orjson pass over the file: 'X' events by cat = cpu_op 56680, cuda_runtime 42373, kernel 19370,
gpu_memcpy 2040, user_annotation 2035, gpu_memset 880, Trace 1; 28010 '[memory]' instant events.
"""
from __future__ import annotations

import shutil

import pyarrow.compute as pc
import pytest

from rankscope.model.run import load_run


@pytest.fixture()
def copy(shared_data, tmp_path):  # type: ignore[no-untyped-def]
    def _copy(name: str):  # type: ignore[no-untyped-def]
        dst = tmp_path / name
        shutil.copytree(shared_data / "hta" / name, dst, ignore=shutil.ignore_patterns("analysis"))
        return load_run(dst, jobs=1, allow_missing_ranks=True)
    return _copy


def _kinds(run, r):  # type: ignore[no-untyped-def]
    vc = pc.value_counts(run.table(r, "events").column("kind").combine_chunks().dictionary_decode())
    return {x["values"]: x["counts"] for x in vc.to_pylist()}


def test_df_index_resolver(copy):
    run = copy("df_index_resolver")
    assert run.rank_ids == [1] and run.world_size == 2 and run.missing == [0]
    info = run.ranks[1]
    assert info.backend == "nccl" and info.rank_source == "content" and not info.partial
    k = _kinds(run, 1)
    assert k["kernel"] == 19370 and k["cpu_op"] == 56680 and k["runtime"] == 42373
    assert info.counts["memory"] == 28010  # [memory] instant events
    assert run.table(1, "steps").column("step").to_pylist() == [2, 3, 4, 5, 6]
    assert not [p for p in run.problems if p.startswith("rank 1:")]


def test_legacy_category_names(copy):
    run = copy("trace_file_list")  # legacy 'Kernel' / 'Runtime' categories
    (r,) = run.rank_ids
    k = _kinds(run, r)
    assert k["kernel"] == 4 and k["runtime"] == 8
    assert not any("unknown event categories" in p for p in run.problems)


def test_nanosecond_fractions_kept(copy):
    run = copy("ns_resolution_trace")
    ts = run.table(0, "events").column("ts").to_numpy()
    assert (ts % 1000 != 0).any()  # sub-µs parts of float-µs timestamps survive as int ns


def test_nccl_collective_metadata(copy):
    run = copy("nccl_parser_config")
    c = run.table(0, "collectives").to_pydict()
    assert len(c["op"]) == 27 and c["op"][0] == "broadcast"
    assert c["bytes_in"][0] == 212480 and c["pg_ranks"][0] == "0,1"


def test_gloo_cpu_only_rank_34_of_300(copy):
    run = copy("cpu_only")
    assert run.rank_ids == [34] and run.world_size == 300 and len(run.missing) == 299
    c = run.table(34, "collectives").to_pydict()
    assert set(c["op"]) == {"all_reduce"} and len(c["op"]) == 10 and c["bytes_in"][0] > 0


def test_no_rank_in_content_or_name_is_assigned_and_said(copy):
    run = copy("rank_unavailable")
    (info,) = run.ranks.values()
    assert info.rank_source == "assigned"
    assert any("rank unknown" in p and "rank_not_found.json.gz" in p for p in run.problems)
