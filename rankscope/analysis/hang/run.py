"""The registered analysis "hang": the latest collective recorder dump of every rank in a run directory
(``ranks/<r>/comms.<n>-<reason>.rank<r>.json.gz``), matched by (process group, sequence); a finding per
root cause, then one per consequence."""
from __future__ import annotations

from typing import Any

from rankscope.analysis.hang.diagnose import diagnose
from rankscope.analysis.hang.findings import Problem
from rankscope.analysis.hang.words import describe

_FINDING = {"not_joined": "hang", "mismatch": "desync", "behind": "collective_behind", "unmatched_send": "p2p_unmatched",
            "unmatched_recv": "p2p_unmatched", "p2p_mismatch": "p2p_mismatch", "deadlock": "deadlock",
            "pg_inconsistent": "process_groups_differ"}


def _severity(p: Problem) -> Any:
    from rankscope.analysis.base import Severity

    return Severity.WARNING if p.kind in ("behind", "pg_inconsistent") or not p.root else Severity.CRITICAL


def run_hang(run: Any, results: dict[str, Any]) -> Any:
    """Registered analysis "hang" (see the module docstring)."""
    import polars as pl

    from rankscope.analysis.base import Finding, Result, Severity
    from rankscope.errors import TraceError
    from rankscope.model.readers import frdump

    files = [f for f in frdump.find(run.path) if str(f).rsplit("/", 1)[-1].startswith("comms.")]
    if not files:
        return Result("hang", skipped="no collective recorder dumps in the run (profile with comms=True or "
                                      "RANKSCOPE_COMMS=1; dumps come at the end, on a watchdog, on SIGUSR1 or with "
                                      "`rankscope trigger RUN --dump`)")
    from rankscope.model.info import Kind
    from rankscope.model.info import Problem as Line
    from rankscope.model.info import records

    latest: dict[int, Any] = {}
    said: list[str] = []  # dumps not read, entries left out: one Problem each (kind, file, rank, count)
    for f in sorted(files, key=lambda x: str(x).rsplit("/", 1)[-1]):  # comms.<n>-...: the last one wins
        try:
            d = frdump.read(f)
        except TraceError as err:
            said.append(Line(str(err), err.kind, err.path, err.rank))
            continue
        except OSError as exc:
            said.append(Line(f"{f}: cannot read ({exc.strerror or exc})", Kind.FILE_UNREADABLE, str(f)))
            continue
        latest[d.rank] = d
    said += [p for d in latest.values() for p in d.problems]
    if not latest:
        return Result("hang", skipped="the collective recorder dumps in the run could not be read"
                      + (f" ({said[0]})" if said else ""), summary={"issues": records(said)})
    v = diagnose(list(latest.values()), run.world_size)
    findings = [Finding(_FINDING.get(p.kind, p.kind), describe(p, v.where) if i else v.headline, _severity(p),
                        tuple(p.culprits), {k: val for k, val in p.to_dict().items() if k != "group"})
                for i, p in enumerate(v.problems)]
    if not findings:
        findings = [Finding("collectives_in_step", v.headline, Severity.INFO)]
    rows = [{"group": g["group"], "desc": g["desc"], "rank": int(r), "last_seq": int(s),
             "last_completed": (g.get("last_completed") or {}).get(r)}
            for g in v.groups for r, s in g["last_seq"].items()]
    also = "; ".join(("consequence: " if not p.root else "") + describe(p, v.where) for p in v.problems[1:])
    return Result("hang", tables={"last_collective": pl.DataFrame(rows) if rows else pl.DataFrame()},
                  findings=findings, summary={"headline": v.headline, "dumps": len(latest), "also": also or "none",
                                              "no_dump": v.no_dump, "not_read": said or "none",
                                              "issues": records(said)})
