"""Every GPU analysis against Holistic Trace Analysis 0.5.0 (the oracle), value by value, on every GPU trace
in ../shared/data/hta (HTA's own test data, MIT): tests/hta_oracle.py runs HTA and ``rankscope analyze
--export json`` on the same folder and compares every value of every analysis both have.

Expected: every value agrees, in every analysis HTA answers. The counts of values (M) and the analyses
HTA 0.5.0 itself raises on are what HTA gave on these inputs (measured with holistictraceanalysis 0.5.0,
pandas 2.3.3: bench/RESULTS.md, "hta oracle"); a count that drops means values went missing on one
side. HTA runs in .bench/hta-venv (``make hta-venv``; its call graph needs pandas < 3).
"""
from __future__ import annotations

import pytest

from tests import hta_oracle

# trace folder -> (values compared in all, the analyses HTA 0.5.0 raises on there)
TRACES: dict[str, tuple[int, set[str]]] = {
    "trace_filter": (0, set()),
    "df_index_resolver": (0, set()),
    "nccl_parser_config": (0, set()),
    "negative_queue_length_values_check": (0, set()),
    "ns_resolution_trace": (0, {"frequent_cuda_kernel_sequences"}),
    "trace_diff/control": (0, set()),
    "trace_diff/test": (0, set()),
    "amd_trace": (0, {"aten_op_kernels_and_delay"}),
    "critical_path/end_to_end/simple_add/input": (0, set()),
    "critical_path/cuda_event_sync": (0, set()),
    "critical_path/cuda_event_sync_multi_stream": (0, set()),
}
# analyses with values on every trace that has kernels (a 0 there would mean nothing was compared)
ALWAYS = ("temporal_breakdown", "kernel_breakdown", "idle_time_breakdown", "queue_length_time_series")


@pytest.fixture(scope="module")
def oracle_python():
    if hta_oracle.hta_python() is None:  # never a skip: a green run means the oracle ran
        pytest.fail(f"HTA 0.5.0 (the oracle) is not installed with pandas < 3: {hta_oracle.INSTALL}", pytrace=False)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # HTA alone needs minutes on the larger traces: a bound only a hang reaches
@pytest.mark.parametrize("trace", list(TRACES))
def test_every_value_agrees_with_hta(shared_data, oracle_python, trace):
    res = hta_oracle.oracle(shared_data / "hta" / trace)
    total, raises = TRACES[trace]
    assert {n for n, r in res.items() if (r[3] or "").startswith("HTA raised")} == raises
    for name, (ok, n, bad, why) in res.items():
        assert ok == n, f"{trace}: {name}: {ok} of {n} values agree ({why}); first differences: {bad}"
    for name in ALWAYS:
        assert res[name][1] > 0, f"{trace}: {name}: nothing compared"
    assert sum(r[1] for r in res.values()) == total


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_time_at_a_full_queue_agrees_at_a_limit_reached(shared_data, oracle_python):
    """At HTA's default limit (1024 queued launches) no stream of these traces is ever full, so the
    comparison above has no value to compare there; at 16 trace_filter's busiest streams are."""
    res = hta_oracle.oracle(shared_data / "hta" / "trace_filter", max_queue=16)
    ok, n, bad, why = res["time_blocked_on_full_queue"]
    assert n == 6 and ok == n, (why, bad)  # 2 ranks x (stream, duration, relative duration)
