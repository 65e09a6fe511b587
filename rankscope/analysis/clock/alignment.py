"""Clock alignment across ranks: explicit per-rank offsets to rank 0's clock, never baked in.

Pattern: anchors first, edges that really pair second, causality as the referee.
1. Collection-time anchors (``RankInfo.clock_offset_ns``, meta.json's NTP-style exchange with rank 0,
   with its error bound) give each rank's offset.
2. Only edges that really pair measure it again: collectives matched by (group, sequence), or by order in
   a group whose members recorded the same number of calls (:func:`trusted`); never send / receive as a
   group. The *end* of one instance is nearly simultaneous on every rank of its group: per group, each
   rank's offset to the group's lowest rank is the *median* end-time difference (gloo spans end up to
   ±9 ms apart), all groups solved by weighted least squares with ``o_ref = 0`` (``edgesolve``).
3. Causality bounds every offset (``clock_bounds``: a receive ends after its send started, a
   synchronising collective ends after every rank started it), and decides: a rank on the reference's
   host keeps its anchors (one clock; an estimate that disagrees is rejected and said); elsewhere the
   anchors stand unless the bounds contradict them; without anchors the estimate, held inside the bounds.
4. Drift: the slope of the end-time difference to the reference over the window (:func:`fit_drift`),
   applied only to offsets taken from the collectives, when ``DRIFT_Z`` standard errors from zero, moving
   the clock by more than ``DRIFT_MIN_NS``, and no larger than a clock can drift. The correction is then
   ``offset + drift_ppm * 1e-6 * (ts - offset - t_ref_ns)``, ``t_ref_ns`` the window's centre.
Every offset or drift rejected or resting on too little is a warning finding (:func:`findings`).

Convention: ``offset_ns[r] = clock_r - clock_ref``; time on the reference clock = ``ts - offset``
(``ts - correction`` with a drift: :meth:`ClockAlignment.shift`, :func:`correction_expr`).
Everything here is pure: the Run is not changed. ``RANKSCOPE_CLOCK_ALIGN=0`` (or ``enabled=False``)
switches alignment off: offsets are then zero and say so.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.clock import bounds as clock_bounds
from rankscope.analysis.clock import edgesolve
from rankscope.analysis.base import Analysis, Finding, Result, Severity, frame
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.stats import as_int
from rankscope.model.run import Run

log = logging.getLogger(__name__)

DRIFT_Z = 5.0
DRIFT_MIN_NS = 10_000




def matched_collectives(run: Run) -> pl.DataFrame:
    """Collectives matched across ranks (one row per instance × rank), on the ranks' own clocks."""
    from rankscope.analysis.comm.collectives import match_collectives

    return frame(match_collectives(run)).with_columns(
        pl.col("pg_name").cast(pl.Utf8), pl.col("op").cast(pl.Utf8))


@dataclass
class ClockAlignment:
    """Per-rank offsets to the reference rank's clock, with their quality."""

    ref: int
    offset_ns: dict[int, int]
    residual_ns: dict[int, int] = field(default_factory=dict)
    drift_ppm: dict[int, float] = field(default_factory=dict)  # estimated
    samples: dict[int, int] = field(default_factory=dict)
    source: dict[int, str] = field(default_factory=dict)
    enabled: bool = True
    applied_drift_ppm: dict[int, float] = field(default_factory=dict)  # significant drifts only
    t_ref_ns: int = 0  # where the constant offsets hold (the centre of the matched collectives)
    note: str = ""  # why the alignment fell back (a linear-algebra failure), shown in the summary
    # what the alignment could not support (analysis/clock/bounds.py), each said as a warning
    rejected: dict[int, dict[str, int]] = field(default_factory=dict)
    contradicted: dict[int, dict[str, int]] = field(default_factory=dict)
    weak: dict[int, dict[str, int]] = field(default_factory=dict)
    implausible_drift_ppm: dict[int, float] = field(default_factory=dict)

    def correction(self, rank: int, ts: Any) -> Any:
        """How far ``rank``'s clock is ahead of the reference at local time(s) ``ts`` (numpy)."""
        ppm = self.applied_drift_ppm.get(rank, 0.0)
        base = self.offset_ns.get(rank, 0)
        if not ppm:
            return base
        # drift runs on the reference clock's time: local ts minus the offset (up to seconds apart)
        return base + np.rint((np.asarray(ts) - base - self.t_ref_ns) * (ppm * 1e-6)).astype(np.int64)

    def shift(self, rank: int, ts: Any) -> Any:
        """``ts`` (numpy array or scalar) moved onto the reference clock."""
        return ts - self.correction(rank, ts)

    def offsets_expr(self, rank_col: str = "rank") -> pl.Expr:
        """A polars expression giving each row's constant offset from its rank column."""
        return pl.col(rank_col).replace_strict(self.offset_ns, default=0, return_dtype=pl.Int64)

    def rank_correction_expr(self, rank: int, ts: pl.Expr) -> pl.Expr:
        """The correction of one rank's timestamps ``ts`` (a frame with no rank column)."""
        base = self.offset_ns.get(rank, 0)
        ppm = self.applied_drift_ppm.get(rank, 0.0)
        if not ppm:
            return pl.lit(base, dtype=pl.Int64)
        return base + ((ts - base - self.t_ref_ns).cast(pl.Float64) * (ppm * 1e-6)).round().cast(pl.Int64)

    def correction_expr(self, ts: pl.Expr, rank_col: str = "rank") -> pl.Expr:
        """Each row's correction (offset, plus drift where applied) at its own time ``ts``."""
        base = self.offsets_expr(rank_col)
        drifts = {r: v for r, v in self.applied_drift_ppm.items() if v}
        if not drifts:
            return base
        ppm = pl.col(rank_col).replace_strict(drifts, default=0.0, return_dtype=pl.Float64)
        return base + ((ts - base - self.t_ref_ns).cast(pl.Float64) * ppm * 1e-6).round().cast(pl.Int64)

    def to_frame(self) -> pl.DataFrame:
        ranks = sorted(self.offset_ns)
        return pl.DataFrame({
            "rank": ranks, "offset_ns": [self.offset_ns[r] for r in ranks],
            "residual_ns": [self.residual_ns.get(r, -1) for r in ranks],
            "drift_ppm": [self.drift_ppm.get(r, 0.0) for r in ranks],
            "drift_applied": [bool(self.applied_drift_ppm.get(r)) for r in ranks],
            "samples": [self.samples.get(r, 0) for r in ranks],
            "source": [self.source.get(r, "none") for r in ranks]}, schema_overrides={"rank": pl.Int64})


def sync_times(matched: pl.DataFrame) -> pl.DataFrame:
    """(key, rank, t): the near-simultaneous end of each matched instance on each rank."""
    return matched.select(
        key=pl.concat_str([pl.col("pg_name").cast(pl.Utf8), pl.col("instance").cast(pl.Utf8)], separator="#"),
        rank=pl.col("rank").cast(pl.Int64),
        t=pl.when(pl.col("dev_end") >= 0).then(pl.col("dev_end")).otherwise(pl.col("end")).cast(pl.Int64))


def refine(sync: pl.DataFrame, prior: dict[int, int]) -> tuple[dict[int, int], pl.DataFrame]:
    """Offsets per rank (not yet referenced) from pairwise medians, and the rows with residuals.

    Per group, every rank is compared with the group's lowest rank: ``d = median_k(t_rk - t_0k)``
    (robust to single bad pairs); the edges of all groups are then solved by weighted least squares.
    """
    t0 = as_int(sync["t"].min())
    df = sync.with_columns(grp=pl.col("key").str.split("#").list.first(),
                           t=pl.col("t") - t0 - pl.col("rank").replace_strict(prior, default=0,
                                                                              return_dtype=pl.Int64))
    head = df.group_by("grp").agg(a=pl.col("rank").min())
    anchor = df.join(head, on="grp").filter(pl.col("rank") == pl.col("a")).select("key", ta=pl.col("t"))
    edges = (df.join(head, on="grp").join(anchor, on="key").filter(pl.col("rank") != pl.col("a"))
             .group_by("grp", "rank", "a").agg(d=(pl.col("t") - pl.col("ta")).median(), n=pl.len()))
    ranks = sorted(set(df["rank"].to_list()))
    idx = {r: i for i, r in enumerate(ranks)}
    # Sparse weighted least squares (analysis/clock/edgesolve.py): memory linear in the edges, nothing
    # that can fail to converge (a dense lstsq was 400 MB at 4,096 ranks and raised LinAlgError).
    sol = edgesolve.solve(len(ranks), np.array([idx[r] for r in edges["rank"].to_list()], dtype=np.int64),
                          np.array([idx[r] for r in edges["a"].to_list()], dtype=np.int64),
                          edges["d"].to_numpy().astype(float), edges["n"].to_numpy().astype(float))
    off = {r: int(round(sol[idx[r]])) + int(prior.get(r, 0)) for r in ranks}
    for r, v in prior.items():
        off.setdefault(r, int(v))
    df = df.with_columns(o=pl.col("rank").replace_strict({r: int(round(sol[idx[r]])) for r in ranks},
                                                         return_dtype=pl.Int64))
    df = df.with_columns(c=(pl.col("t") - pl.col("o")).median().over("key"))
    return off, df.with_columns(res=pl.col("t") - pl.col("o") - pl.col("c"))


def _quality(df: pl.DataFrame) -> pl.DataFrame:
    """Per rank: residual (median |res|) and samples."""
    return df.group_by("rank").agg(residual=pl.col("res").abs().median(), samples=pl.len())


def fit_drift(x: np.ndarray, y: np.ndarray) -> tuple[float, bool]:
    """Drift (ppm) = slope of ``y`` (ns, clock difference) over ``x`` (ns, time), and whether it is
    significant. Least squares after dropping outliers (beyond 5 MADs of a first fit: gloo's
    single pairs milliseconds apart); significant when the slope is DRIFT_Z standard errors from 0
    and moves the clock by more than DRIFT_MIN_NS from the window's centre to its ends."""
    if len(x) < 8:
        return 0.0, False
    try:
        return _fit_drift(x.astype(float), y.astype(float))
    except (np.linalg.LinAlgError, ValueError, FloatingPointError):
        # np.polyfit's SVD can fail to converge on ill-conditioned input (seen on Ascend runs,
        # issue 13): no drift is estimated rather than no analysis at all.
        return 0.0, False


def _fit_drift(x: np.ndarray, y: np.ndarray) -> tuple[float, bool]:
    mad0 = float(np.median(np.abs(y - np.median(y)))) * 1.4826
    keep0 = np.abs(y - np.median(y)) <= max(5 * mad0, 1.0)  # gross outliers first: they would tilt a fit
    if keep0.sum() >= 8:
        x, y = x[keep0], y[keep0]
    x = x - float(np.mean(x))
    for _ in range(2):
        a, b = np.polyfit(x, y, 1)
        e = y - (a * x + b)
        mad = float(np.median(np.abs(e - np.median(e)))) * 1.4826
        keep = np.abs(e) <= max(5 * mad, 1.0)
        if keep.sum() < 8 or keep.all():
            break
        x, y = x[keep], y[keep]
        x = x - float(np.mean(x))
    a, b = np.polyfit(x, y, 1)
    e = y - (a * x + b)
    sxx = float(np.sum(x * x))
    if sxx <= 0:
        return 0.0, False
    se = (float(np.sum(e * e)) / max(len(x) - 2, 1) / sxx) ** 0.5
    reach = abs(a) * (float(x.max()) - float(x.min())) / 2
    return float(a * 1e6), bool(abs(a) > DRIFT_Z * max(se, 1e-12) and reach > DRIFT_MIN_NS)


def drifts(rows: pl.DataFrame, ref: int) -> dict[int, tuple[float, bool]]:
    """Per rank, drift against ``ref`` from the instances both ranks took part in (their aligned
    end-time difference over time); ranks that share no group with ``ref`` are measured against
    the consensus of each instance instead (the ``res`` column) minus the reference's own."""
    al = rows.with_columns(a=(pl.col("t") - pl.col("o")).cast(pl.Float64))
    base = al.filter(pl.col("rank") == ref).select("key", ra=pl.col("a"), rc=pl.col("res"))
    out: dict[int, tuple[float, bool]] = {}
    for r, grp in al.filter(pl.col("rank") != ref).group_by("rank"):
        rank = int(r[0])
        both = grp.join(base, on="key")
        if both.height >= 8:
            out[rank] = fit_drift(both["c"].to_numpy(), (both["a"] - both["ra"]).to_numpy())
        else:
            out[rank] = fit_drift(grp["c"].to_numpy(), grp["res"].to_numpy())
    return out


def align(run: Run, matched: pl.DataFrame | None = None, *, enabled: bool | None = None,
          use_anchors: bool = True, ref: int | None = None) -> ClockAlignment:
    """Per-rank clock offsets to ``ref`` (default: the lowest rank) from anchors and collectives.

    Never raises on numerics: a linear-algebra failure falls back to the anchors alone (or no
    offsets) and says so in ``note``.
    """
    try:
        return _align(run, matched, enabled=enabled, use_anchors=use_anchors, ref=ref)
    except (np.linalg.LinAlgError, FloatingPointError, ValueError, ZeroDivisionError) as exc:
        log.debug("clock alignment failed", exc_info=True)
        ranks = run.rank_ids
        anchors = {r: run.ranks[r].clock_offset_ns for r in ranks} if use_anchors else {}
        prior = {r: int(v) for r, v in anchors.items() if v is not None}
        base = prior.get(ranks[0] if ref is None else ref, 0)
        return ClockAlignment(ranks[0] if ref is None else ref, {r: prior.get(r, base) - base for r in ranks},
                              source={r: "anchors" if r in prior else "none" for r in ranks},
                              note=f"alignment from collectives failed ({type(exc).__name__}: {exc}); "
                                   "clock anchors only")


def _align(run: Run, matched: pl.DataFrame | None = None, *, enabled: bool | None = None,
           use_anchors: bool = True, ref: int | None = None) -> ClockAlignment:
    if enabled is None:
        enabled = os.environ.get("RANKSCOPE_CLOCK_ALIGN", "1") not in ("0", "off", "false", "no")
    ranks = run.rank_ids
    ref = ranks[0] if ref is None else ref
    if not enabled:
        return ClockAlignment(ref, {r: 0 for r in ranks}, source={r: "off" for r in ranks}, enabled=False)
    anchors = {r: run.ranks[r].clock_offset_ns for r in ranks} if use_anchors else {}
    prior = {r: int(v) for r, v in anchors.items() if v is not None}
    p2p = _p2p(run) if matched is None else None
    matched = trusted(matched_collectives(run) if matched is None else matched)
    base = prior.get(ref, 0)
    rel_anchor = {r: v - base for r, v in prior.items()}
    if matched.height == 0 and (p2p is None or p2p.height == 0):
        return ClockAlignment(ref, {r: rel_anchor.get(r, 0) for r in ranks},
                              source={r: "anchors" if r in prior else "none" for r in ranks})
    est: dict[int, int] = {}
    q: dict[int, Any] = {}
    rows = pl.DataFrame()
    sync = sync_times(matched) if matched.height else None
    if sync is not None:
        off, rows = refine(sync, prior)
        q = {int(row["rank"]): row for row in _quality(rows).iter_rows(named=True)}
        est = {r: v - off.get(ref, base) for r, v in off.items() if r in q}
    bnd = clock_bounds.bounds(matched, p2p, ref)
    errors = {r: int(run.ranks[r].clock_error_ns or 0) for r in ranks}
    hosts = {r: run.ranks[r].host for r in ranks}
    d = clock_bounds.decide(ranks, ref, est, rel_anchor, errors, hosts, q, bnd)
    out = ClockAlignment(ref, {r: d.offset_ns.get(r, 0) for r in ranks}, source=d.source)
    out.rejected, out.contradicted, out.weak = d.rejected, d.contradicted, d.weak
    for r, row in q.items():
        out.residual_ns[r], out.samples[r] = int(row["residual"]), int(row["samples"])
    if sync is not None and rows.height:
        _drifts(out, rows, ref, d)
        # refine measures times from the earliest synchronising end; t_ref is the centre on that scale
        out.t_ref_ns = as_int(sync["t"].min()) + as_int(rows["c"].median())
    return out


def _drifts(out: ClockAlignment, rows: pl.DataFrame, ref: int, d: clock_bounds.Decision) -> None:
    """Drift estimated for every rank; applied only where the offset came from the collectives (one host
    has one clock; an anchored rank keeps its anchor) and the drift is one a clock can have."""
    for r, (ppm, sig) in drifts(rows, ref).items():
        out.drift_ppm[r] = ppm
        if not sig:
            continue
        if d.source.get(r, "").startswith("collectives") and clock_bounds.plausible_drift(ppm):
            out.applied_drift_ppm[r] = ppm
        elif not clock_bounds.plausible_drift(ppm) or r in d.rejected:
            out.implausible_drift_ppm[r] = ppm


def trusted(matched: pl.DataFrame) -> pl.DataFrame:
    """Only instances that really pair: matched by (group, sequence), or by order in a group whose members
    all recorded the same number of calls (else the n-th call of one rank may be the (n+1)-th of another)."""
    if matched.height == 0 or "matched_by" not in matched.columns:
        return matched
    n = matched.group_by("pg_name", "rank").agg(n=pl.len()).group_by("pg_name").agg(
        same=pl.col("n").n_unique() == 1)
    ok = n.filter(pl.col("same"))["pg_name"].to_list()
    return matched.filter((pl.col("matched_by") == "seq") | pl.col("pg_name").is_in(ok))


def _p2p(run: Run) -> pl.DataFrame | None:
    """Paired sends and receives on the ranks' own clocks (the bounds are taken on them)."""
    try:
        from rankscope.analysis.comm.p2p import p2p_pairs

        return p2p_pairs(run)
    except Exception:  # noqa: BLE001 - a run without per-rank tables (hand-made) has no p2p to bound with
        log.debug("no point-to-point pairs for clock bounds", exc_info=True)
        return None


def run_clock(run: Run, results: dict[str, Result]) -> Result:
    """Registered analysis "clock": the offsets table, and findings on what the alignment did and could not
    support (each a warning: an unsupported offset scrambles who waited for whom)."""
    al = align(run)
    max_abs = max((abs(v) for v in al.offset_ns.values()), default=0)
    summary: dict[str, Any] = {
        "enabled": al.enabled, "ref": al.ref, "offsets_ns": {str(r): v for r, v in al.offset_ns.items()},
        "max_abs_offset_ns": max_abs, "max_residual_ns": max(al.residual_ns.values(), default=0),
        "drift_applied_ppm": {str(r): round(v, 3) for r, v in al.applied_drift_ppm.items()},
        "t_ref_ns": al.t_ref_ns, "source": {str(r): s for r, s in al.source.items()},
        "rejected_estimates": {str(r): v for r, v in al.rejected.items()}}
    if al.note:
        summary["note"] = al.note
    return Result("clock", tables={"offsets": al.to_frame().to_arrow()}, findings=findings(al), summary=summary)


def findings(al: ClockAlignment) -> list[Finding]:
    """What the alignment says: clocks that differ (info, when anchored or agreeing), and every offset or
    drift it rejected or could not support (warnings)."""
    out: list[Finding] = []
    if not al.enabled:
        return out
    far = {r: v for r, v in al.rejected.items() if abs(v["estimate_ns"] - v["anchor_ns"]) > clock_bounds.WARN_REJECTED_NS}
    if far:
        worst = max(far, key=lambda r: abs(far[r]["estimate_ns"] - far[r]["anchor_ns"]))
        w = al.rejected[worst]
        out.append(Finding(
            kind="clock_estimate_rejected", severity=Severity.WARNING, ranks=tuple(sorted(far)),
            title=f"the collectives put rank {worst}'s clock {(w['estimate_ns'] - w['anchor_ns']) / 1e6:+.3f} ms off "
                  f"its clock anchors (error ±{max(w['error_ns'], 0) / 1e3:.0f} µs), "
                  + (f"but it shares rank {al.ref}'s host and clock" if w["same_host"] else
                     "and the order of events does not require it")
                  + ": the anchors are kept; collectives or point-to-point pairs matched wrongly are the likely cause",
            evidence={"ranks": {str(r): v for r, v in far.items()}}))
    if al.contradicted:
        worst = max(al.contradicted, key=lambda r: abs(al.contradicted[r]["offset_ns"] - al.contradicted[r]["anchor_ns"]))
        c = al.contradicted[worst]
        out.append(Finding(
            kind="clock_anchors_contradicted", severity=Severity.WARNING, ranks=tuple(sorted(al.contradicted)),
            title=f"rank {worst}'s clock moved {(c['offset_ns'] - c['anchor_ns']) / 1e6:+.3f} ms from its clock anchors "
                  f"(with the anchors, collectives would end before other ranks started them); aligned from "
                  f"{c['samples']} matched collectives instead", evidence={"ranks": {str(r): v for r, v in al.contradicted.items()}}))
    if al.weak:
        worst = max(al.weak, key=lambda r: abs(al.weak[r]["offset_ns"]))
        out.append(Finding(
            kind="clock_offset_unsupported", severity=Severity.WARNING, ranks=tuple(sorted(al.weak)),
            title=f"rank {worst}'s clock offset of {al.weak[worst]['offset_ns'] / 1e6:+.3f} ms rests on "
                  f"{al.weak[worst]['samples']} matched collectives and no clock anchors: cross-rank times may be off "
                  "by that much (profile with rankscope.profile to record anchors)",
            evidence={"ranks": {str(r): v for r, v in al.weak.items()}}))
    if al.implausible_drift_ppm:
        worst = max(al.implausible_drift_ppm, key=lambda r: abs(al.implausible_drift_ppm[r]))
        out.append(Finding(
            kind="clock_drift_rejected", severity=Severity.WARNING, ranks=tuple(sorted(al.implausible_drift_ppm)),
            title=f"a clock drift of {al.implausible_drift_ppm[worst]:,.0f} ppm on rank {worst} was not applied: no clock "
                  f"drifts that much (over {clock_bounds.MAX_DRIFT_PPM:,.0f} ppm) or it shares its host's clock",
            evidence={"drift_ppm": {str(r): round(v, 1) for r, v in al.implausible_drift_ppm.items()}}))
    # ranks on the reference's host share its clock: their offsets are the anchors' error, not a difference
    other = {r: v for r, v in al.offset_ns.items() if not al.source.get(r, "").startswith("anchors (same host)")}
    max_abs = max((abs(v) for v in other.values()), default=0)
    if max_abs > 1_000_000 and not (al.contradicted or al.weak):
        worst = max(other, key=lambda r: abs(other[r]))
        out.append(Finding(
            kind="clock_skew", severity=Severity.INFO, ranks=(worst,),
            title=f"host clocks differ by up to {max_abs / 1e6:.1f} ms (rank {worst}, {al.source.get(worst, '')}); "
                  "cross-rank analyses are aligned",
            evidence={"offsets_ns": {str(r): v for r, v in al.offset_ns.items()}, "residual_ns": al.residual_ns}))
    return out


def alignment_from(results: dict[str, Result]) -> ClockAlignment | None:
    """The alignment the "clock" analysis computed (offsets, applied drifts), or None when it did not run."""
    res = results.get("clock")
    if res is None or res.skipped:
        return None
    sm = res.summary
    return ClockAlignment(
        ref=int(sm.get("ref", 0)), offset_ns={int(k): int(v) for k, v in sm.get("offsets_ns", {}).items()},
        applied_drift_ppm={int(k): float(v) for k, v in sm.get("drift_applied_ppm", {}).items()},
        t_ref_ns=int(sm.get("t_ref_ns", 0)), enabled=bool(sm.get("enabled", True)))


def correction_expr(al: ClockAlignment | dict[int, int] | None, ts: pl.Expr, rank_col: str = "rank") -> pl.Expr:
    """Per-row clock correction for ``ts``: from an alignment, plain offsets, or none (0)."""
    if al is None or (isinstance(al, dict) and not al):
        return pl.lit(0, dtype=pl.Int64)
    if isinstance(al, dict):
        return pl.col(rank_col).replace_strict(al, default=0, return_dtype=pl.Int64)
    return al.correction_expr(ts, rank_col)


ANALYSIS = Analysis(
    name="clock",
    description="per-rank clock offsets to rank 0 (anchors + matched collectives)",
    run=run_clock,
    view=View("Clock alignment", (Col("max_abs_offset_ns", "largest clock offset to the reference rank", NS),
                            Col("max_residual_ns", "largest residual after alignment", NS)),
        (TableView("offsets", "per rank", (Col("rank", "rank", "count"), Col("offset_ns", "offset", NS),
                                           Col("residual_ns", "residual", NS),
                                           Col("drift_ppm", "drift (ppm)", "float"),
                                           Col("samples", "matched samples", "count"),
                                           Col("source", "from"))),), place="clock"),
)
