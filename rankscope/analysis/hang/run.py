"""The registered analysis "hang": the latest collective recorder dump of every rank in a run directory."""
from __future__ import annotations

from typing import Any

from rankscope.analysis.hang.diagnose import diagnose
from rankscope.analysis.hang.words import describe


def run_hang(run: Any, results: dict[str, Any]) -> Any:
    """Registered analysis "hang": the latest collective recorder dump of every rank in the run directory
    (``ranks/<r>/comms.<n>-<reason>.rank<r>.json.gz``), matched by (process group, sequence)."""
    import polars as pl

    from rankscope.analysis.base import Finding, Result, Severity
    from rankscope.errors import TraceError
    from rankscope.model import frdump

    files = [f for f in frdump.find(run.path) if str(f).rsplit("/", 1)[-1].startswith("comms.")]
    if not files:
        return Result("hang", skipped="no collective recorder dumps in the run (profile with comms=True or "
                                      "RANKSCOPE_COMMS=1; dumps come at the end, on a watchdog, on SIGUSR1 or with "
                                      "`rankscope trigger RUN --dump`)")
    latest: dict[int, Any] = {}
    for f in sorted(files, key=lambda x: str(x).rsplit("/", 1)[-1]):  # comms.<n>-...: the last one wins
        try:
            d = frdump.read(f)
        except (TraceError, OSError):
            continue
        latest[d.rank] = d
    if not latest:
        return Result("hang", skipped="the collective recorder dumps in the run could not be read")
    v = diagnose(list(latest.values()), run.world_size)
    kind = v.problems[0]["kind"] if v.problems else ""
    sev = Severity.INFO if not v.problems else Severity.WARNING if kind == "behind" else Severity.CRITICAL
    p0 = v.problems[0] if v.problems else {}
    findings = [Finding({"not_joined": "hang", "mismatch": "desync", "behind": "collective_behind",
                         "unmatched_send": "p2p_unmatched", "unmatched_recv": "p2p_unmatched",
                         "p2p_mismatch": "p2p_mismatch"}.get(kind, "collectives_in_step"), v.headline, sev,
                        tuple(p0.get("missing") or p0.get("behind") or
                              ([p0["src"], p0["dst"]] if "src" in p0 else
                               [r for rs in p0.get("odd", {}).values() for r in rs])),
                        {k: val for k, val in (v.problems[0] if v.problems else {}).items() if k != "group"})]
    rows = [{"group": g["group"], "desc": g["desc"], "rank": int(r), "last_seq": int(s),
             "last_completed": (g.get("last_completed") or {}).get(r)}
            for g in v.groups for r, s in g["last_seq"].items()]
    return Result("hang", tables={"last_collective": pl.DataFrame(rows) if rows else pl.DataFrame()},
                  findings=findings, summary={"headline": v.headline, "dumps": len(latest),
                                              "also": "; ".join(describe(p) for p in v.problems[1:]) or "none",
                                              "no_dump": v.no_dump})
