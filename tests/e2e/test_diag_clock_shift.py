"""End-to-end: shifting one rank's clock by a known offset gives the same diagnosis after alignment.

Real demo run (torchrun, gloo, 2 ranks, rank 1 a compute straggler); then rank 1's trace is
rewritten with ``baseTimeNanoseconds`` moved by +250 ms (every timestamp of that rank shifts) and its
meta.json put on another host (a clock stepped after the anchors were taken: only another host's clock
can be); and on a synthetic 16-rank cluster with ±0.5 s clock offsets the offsets are recovered. The
same shift on the anchors' own host is not believed (one host, one clock), and said.
"""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run

pytestmark = pytest.mark.slow
SHIFT_NS = 250_000_000
NAMES = ["breakdown", "clock", "links", "straggler"]


def _shift_rank(run_dir, rank: int, shift_ns: int, host: str | None = None) -> None:
    """As if the rank's clock had been off when it wrote its traces (on ``host``, when given): the files
    and their MANIFEST entries (size, sha256) are rewritten together, so the rank is not taken for damaged."""
    import hashlib

    d = run_dir / "ranks" / str(rank)
    manifest = json.loads((d / "MANIFEST.json").read_text())
    if host is not None:
        meta = json.loads((d / "meta.json").read_text())
        meta["host"] = host
        data = json.dumps(meta).encode()
        (d / "meta.json").write_bytes(data)
        for e in manifest["files"]:
            if e["path"].endswith("meta.json"):
                e.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    for f in [*d.glob("*.pt.trace.json.gz"), *d.glob("*.collectives.json.gz")]:
        doc = json.loads(gzip.decompress(f.read_bytes()))
        if "entries" in doc:  # the recorder's entries of the window, read with the same clock
            doc["entries"] = [e[:4] + [e[4] + shift_ns] + e[5:] for e in doc["entries"]]
        else:
            doc["baseTimeNanoseconds"] = int(doc["baseTimeNanoseconds"]) + shift_ns
        data = gzip.compress(json.dumps(doc).encode())
        f.write_bytes(data)
        for e in manifest["files"]:
            if e["path"].endswith(f.name):
                e.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (d / "MANIFEST.json").write_text(json.dumps(manifest))


def test_demo_diagnosis_survives_a_clock_shift(tmp_path):
    cmd = [sys.executable, "-m", "rankscope.cli", "demo", "--ranks", "2", "--steps", "6", "--warmup", "2",
           "--out", str(tmp_path), "--run-id", "r", "--slow-rank", "1", "--slow-kind", "compute"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    base = tmp_path / "r"
    shifted = tmp_path / "shifted"
    shutil.copytree(base, shifted, ignore=shutil.ignore_patterns("analysis", "report.html"))
    _shift_rank(shifted, 1, SHIFT_NS, host="node-1")
    same_host = tmp_path / "same-host"
    shutil.copytree(base, same_host, ignore=shutil.ignore_patterns("analysis", "report.html"))
    _shift_rank(same_host, 1, SHIFT_NS)
    a = run_all(load_run(base, jobs=1), names=NAMES)
    b = run_all(load_run(shifted, jobs=1), names=NAMES)
    c = run_all(load_run(same_host, jobs=1), names=NAMES)
    # one host, one clock: the anchors stay within their error, and the collectives' 250 ms is said
    anchor = load_run(same_host, jobs=1).ranks[1]
    assert abs(c["clock"].summary["offsets_ns"]["1"] - anchor.clock_offset_ns) <= abs(anchor.clock_error_ns)
    assert [(f.kind, f.severity.value) for f in c["clock"].findings] == [("clock_estimate_rejected", "warning")]
    # another host: the anchors contradict the order of events, the collectives' offset is used, and said
    assert [(f.kind, f.severity.value) for f in b["clock"].findings] == [("clock_anchors_contradicted", "warning")]
    assert [(f.ranks, f.evidence["cause"]) for f in a["straggler"].findings] == [((1,), "compute")], \
        a["straggler"].summary["verdict"]
    assert b["straggler"].summary["verdict"] == a["straggler"].summary["verdict"]
    off_a = a["clock"].summary["offsets_ns"]["1"]
    off_b = b["clock"].summary["offsets_ns"]["1"]
    info = load_run(base, jobs=1).ranks[1]
    assert abs(off_a - info.clock_offset_ns) <= abs(info.clock_error_ns)  # one host: the anchors, within their error
    # The shifted rank's anchors now contradict the order of events by 250 ms, so its offset comes from the
    # collectives alone: the median of ~12 gloo end-time differences, each off by up to milliseconds on a busy
    # host (3.9 ms off the anchors on one run here). The same estimate on the unshifted run (collectives only)
    # must move by the shift, within 3 standard errors of that median (as the analysis states them) and never
    # worse than 1 ms where the ends agree better. (Beside a CPU hog: residual 1.7 ms, 3 standard errors 2.2 ms.)
    from rankscope.analysis.clock.alignment import align

    est_a = align(load_run(base, jobs=1), use_anchors=False).offset_ns[1]
    row = next(r for r in b["clock"].tables["offsets"].to_pylist() if r["rank"] == 1)
    stderr = 1.4826 * row["residual_ns"] / row["samples"] ** 0.5
    assert abs((off_b - est_a) - SHIFT_NS) < max(1_000_000, 3 * stderr)
    ta, tb = (r["straggler"].findings[0].evidence["time_lost"] for r in (a, b))
    assert ta["lost_per_step_ns"] == tb["lost_per_step_ns"]
    assert abs(ta["last_arrival_share"] - tb["last_arrival_share"]) < 0.1


def test_synthetic_offsets_recovered_within_50us(tmp_path):
    from rankscope.analysis.clock.alignment import align
    from rankscope.synth import generate

    path = generate(tmp_path / "run", ranks=16, steps=4, ops_per_step=40, stragglers=["9:compute:1.3"],
                    clock_skew_s=0.5, seed=7)
    run = load_run(path, jobs=1)
    truth = json.loads((path / "synth_truth.json").read_text())["clocks"]
    al = align(run, enabled=True)
    errors = [abs(al.offset_ns[c["rank"]] - c["offset_to_rank0_ns"]) for c in truth]
    assert max(abs(c["offset_to_rank0_ns"]) for c in truth) > 100_000_000
    assert max(errors) < 50_000, errors
    res = run_all(run, names=NAMES)
    assert [(f.ranks, f.evidence["cause"]) for f in res["straggler"].findings] == [((9,), "compute")], \
        res["straggler"].summary["verdict"]


def test_synthetic_drift_applied_over_a_long_window(tmp_path):
    """Clocks that drift (up to ±1000 ppm here, over a ~0.3 s window: up to ~150 µs at the ends) are corrected
    with their drift: matched collectives end together at both ends of the window, which a
    constant offset alone cannot do. The merged timeline uses the same correction."""
    import polars as pl

    from rankscope.analysis.clock.alignment import align, matched_collectives
    from rankscope.render.timeline import aligned_offsets, collect
    from rankscope.synth import generate

    path = generate(tmp_path / "run", ranks=8, steps=30, ops_per_step=20, clock_skew_s=0.5,
                    clock_drift_ppm=1000, seed=3)
    run = load_run(path, jobs=1)
    truth = {c["rank"]: c["drift_ppm"] for c in json.loads((path / "synth_truth.json").read_text())["clocks"]}
    al = align(run, enabled=True)
    assert al.applied_drift_ppm, al.drift_ppm
    for r, ppm in al.applied_drift_ppm.items():
        assert abs(ppm - (truth[r] - truth[0])) < 5.0, (r, ppm, truth[r])
    m = matched_collectives(run)
    t = pl.when(pl.col("dev_end") >= 0).then(pl.col("dev_end")).otherwise(pl.col("end"))
    key = ["pg_name", "instance"]

    def spread(corr: pl.Expr) -> pl.DataFrame:
        return (m.with_columns(a=t - corr).group_by(key).agg(s=pl.col("a").max() - pl.col("a").min(),
                                                              at=pl.col("a").min()).sort("at"))
    with_drift = spread(al.correction_expr(t))
    constant = spread(al.offsets_expr())
    edge = max(with_drift.height // 10, 1)
    ends = pl.concat([with_drift.head(edge), with_drift.tail(edge)])
    assert ends["s"].max() < 20_000  # within 20 µs at both ends of the window
    assert pl.concat([constant.head(edge), constant.tail(edge)])["s"].max() > 50_000
    sel = collect(run, ranks=[0, 1], steps=None, offsets=aligned_offsets(run))
    assert sel["drift_ppm"] == {r: v for r, v in al.applied_drift_ppm.items() if r in (0, 1)}
