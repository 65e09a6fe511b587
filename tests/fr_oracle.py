"""torch's Flight Recorder analyzer as the oracle for ``rankscope hang``, on the dumps of torch's own tests.

The cases are built as torch 2.13's ``test/distributed/flight_recorder/test_fr_analysis.py`` builds them
(``create_one_event`` / ``create_one_entry``, ``LOADED_FR_DETAIL_TEMPLATE``; its pairwise ``match_one_event``
cases become two-rank dumps, rank 0 holding the first event and rank 1 the second) and as ``test_loader.py``
writes its dump; two more swap the ranks of its state and dtype cases. Each case is written as one pickle per rank (``dump_file_rank_<r>``, the template's names),
then read by torch's analyzer (``torchfrtrace``'s ``fr_trace.main``, with ``-o`` for its database) and by
rankscope (``frdump.read`` + ``diagnose``). torch's analyzer takes its reference rank from the order the
directory lists its files; the runner lists them sorted, so that reference is the lowest rank, as in
torch's in-process test.

    python -m tests.fr_oracle        # one line per case: torch's verdict, rankscope's, agreement
"""
from __future__ import annotations

import copy
import math
import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BACKEND = "gloo"  # test_fr_analysis.py: get_default_backend_for_device("cpu") on a machine without an accelerator
VERSION = "2.8"  # testBuildDB: "Same as the version in FlightRecorder.hpp"
# torch 2.13's types.py COLLECTIVES, which test_all_events walks
COLLECTIVES = sorted({
    "broadcast", "_broadcast_oop", "reduce", "_reduce_oop", "all_gather", "all_gather_single", "all_gather_v",
    "all_reduce", "_all_gather_base", "all_gather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_single",
    "reduce_scatter_v", "reduce_scatter_tensor_coalesced", "_reduce_scatter_base", "gather", "scatter", "all_to_all",
    "all_to_all_single", "all_to_all_v_single", "all_reduce_barrier", "barrier", "split", "new_window",
    "allreduce_coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})


def create_one_event(collective_name: str, pg_info: tuple[str, str], input_sizes: Any, output_sizes: Any,
                     state: str = "scheduled", collective_seq_id: int = 0, p2p_seq_id: int = 0,
                     output_dtypes: str = "float32", backend: str = BACKEND) -> dict[str, Any]:
    """test_fr_analysis.py's create_one_event (sequence numbers as strings, dtypes as one string)."""
    return {"profiling_name": f"{backend}:{collective_name}", "state": state, "process_group": pg_info,
            "input_sizes": input_sizes, "output_sizes": output_sizes, "input_dtypes": "float32",
            "output_dtypes": output_dtypes, "collective_seq_id": str(collective_seq_id),
            "p2p_seq_id": str(p2p_seq_id), "time_created_ns": 0, "frames": []}


def create_one_entry(record_id: int, collective_name: str, input_sizes: Any, output_sizes: Any,
                     state: str = "completed", collective_seq_id: int = 0, p2p_seq_id: int = 0,
                     output_dtypes: str = "float32", pg_info: tuple[str, str] = ("0", "default")) -> dict[str, Any]:
    """test_fr_analysis.py's create_one_entry."""
    e = create_one_event(collective_name, pg_info, input_sizes, output_sizes, state, collective_seq_id, p2p_seq_id,
                         output_dtypes)
    e.update({"record_id": record_id, "is_p2p": False})
    return e


TEMPLATE: dict[str, dict[str, Any]] = {  # test_fr_analysis.py's LOADED_FR_DETAIL_TEMPLATE, with testBuildDB's version
    "dump_file_rank_0": {"entries": [], "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                                                      "1": {"name": "1", "desc": "sub_pg", "ranks": "[0]"}},
                         "rank": 0, "version": VERSION},
    "dump_file_rank_1": {"entries": [], "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                                                      "1": {"name": "1", "desc": "sub_pg", "ranks": "[1]"}},
                         "rank": 1, "version": VERSION},
}


def _pair(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """match_one_event(a, b) as a job: rank 0 recorded a, rank 1 recorded b, both in group "0" = [0, 1]."""
    out = {}
    for r, e in enumerate((a, b)):
        e = {**copy.deepcopy(e), "record_id": 0, "is_p2p": False}
        out[f"dump_file_rank_{r}"] = {"entries": [e], "version": VERSION, "rank": r,
                                      "pg_config": {"0": {"name": "0", "desc": "default", "ranks": "[0, 1]"}}}
    return out


def _match_one_event_cases() -> dict[str, dict[str, dict[str, Any]]]:
    d = ("0", "default")
    e1 = create_one_event("all_reduce", d, [[4, 4]], [[4, 4]], "scheduled", 1)
    e2 = create_one_event("all_gather", d, [[4, 4]], [[4, 4]], "scheduled", 1)
    e3 = create_one_event("all_to_all", d, [[4, 4]], [[4, 4]], "scheduled", 1)
    e5 = create_one_event("all_reduce", d, [[5, 4]], [[4, 4]], "scheduled", 1, 1)
    e6 = create_one_event("all_reduce", d, [[4, 4]], [[5, 4]], "scheduled", 1, 2)
    e7 = create_one_event("all_reduce", d, [[4, 4]], [[5, 4]], "scheduled", 2)
    e9 = create_one_event("all_reduce", d, [[4, 4]], [[4, 4]], "completed", 1)
    e10 = create_one_event("all_reduce", d, [[4, 4]], [[4, 4]], "completed", 1, output_dtypes="float16")
    e11 = create_one_event("gather", d, [[4, 4]], [[4, 4], [4, 4]], "completed", 1, output_dtypes="float32")
    e12 = create_one_event("gather", d, [[4, 4]], [[]], "completed", 1, output_dtypes="")
    e13 = create_one_event("gather", d, [[4, 4]], [[4, 4]], "completed", 1, output_dtypes="")
    return {"match e1/e1": _pair(e1, e1),
            # not torch's: its state and dtype cases with the ranks swapped, to see whom each analyzer blames
            "swapped e9/e1 state": _pair(e9, e1), "swapped e9/e10 dtype": _pair(e9, e10), "match e1/e2 type": _pair(e1, e2), "match e3/e4 all_to_all": _pair(e3, e3),
            "match e1/e5 input size": _pair(e1, e5), "match e1/e6 output size": _pair(e1, e6),
            "match e7/e7 all_reduce in!=out": _pair(e7, e7), "match e1/e9 state": _pair(e1, e9),
            "match e10/e9 dtype": _pair(e10, e9), "match e11/e12 gather": _pair(e11, e12),
            "match e11/e13 gather": _pair(e11, e13)}


def _all_events_cases() -> dict[str, dict[str, dict[str, Any]]]:
    """test_all_events: every collective matched with itself, sizes made valid for its op."""
    out = {}
    for c in COLLECTIVES:
        ins, outs = [[4, 4]], [[4, 4]]
        if c in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
            outs = [[ins[0][0] * 2]]
        if c in ("all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced"):
            outs = [[math.prod(ins[0]) * 2]]
        e = create_one_event(c, ("0", "default"), ins, outs, "scheduled", 1)
        out[f"all_events {c}"] = _pair(e, e)
    return out


def _backend_cases() -> dict[str, dict[str, dict[str, Any]]]:
    """FlightRecorderOpBackendTest: each backend prefix accepted; an unknown one refused (AssertionError)."""
    out = {}
    for b in ("nccl", "ncclx", "gloo", "xccl", "unknown_backend"):
        e = create_one_event("all_reduce", ("0", "default"), [[4, 4]], [[4, 4]], "completed", 1, backend=b)
        out[f"backend {b}"] = _pair(e, e)
    return out


def _build_db_cases() -> dict[str, dict[str, dict[str, Any]]]:
    """testBuildDB's six cases, entry for entry."""
    t, ce = TEMPLATE, create_one_entry
    out = {}
    c = copy.deepcopy(t)
    for r in (0, 1):
        c[f"dump_file_rank_{r}"]["entries"] += [ce(0, "all_reduce", [[4, 4]], [[4, 4]]),
                                                ce(1, "all_reduce", [[5, 5]], [[5, 5]], pg_info=("1", "sub_pg"))]
    out["build_db 1 all_reduce + split sub_pg"] = c
    c = copy.deepcopy(t)
    for r in (0, 1):
        c[f"dump_file_rank_{r}"]["entries"].append(ce(0, "allreduce_coalesced", [[4, 4]], [[4, 4]]))
    out["build_db 2 allreduce_coalesced"] = c
    c = copy.deepcopy(t)
    for r in (0, 1):
        c[f"dump_file_rank_{r}"]["entries"] += [ce(0, "broadcast", [[4, 4]], [[4, 4]]),
                                                ce(1, "broadcast", [[4, 4]], [[4, 4]]), ce(2, "coalesced", [[]], [[]])]
    out["build_db 3 coalesced broadcasts"] = c
    c = copy.deepcopy(t)
    c["dump_file_rank_0"]["entries"] += [ce(0, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                                         ce(1, "_broadcast_oop", [[5, 5]], [[5, 5]]),
                                         ce(2, "ALLGATHER_coalesced", [[]], [[]])]
    c["dump_file_rank_1"]["entries"] += [ce(0, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                                         ce(1, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                                         ce(2, "ALLGATHER_coalesced", [[]], [[]])]
    out["build_db 4 uneven coalesced broadcast"] = c
    c = copy.deepcopy(t)
    for r in (0, 1):
        c[f"dump_file_rank_{r}"]["entries"] += [ce(0, "_reduce_oop", [[4, 4]], [[4, 4]]),
                                                ce(1, "_reduce_oop", [[4, 4]], [[4, 4]]),
                                                ce(2, "REDUCE_SCATTER_coalesced", [[]], [[]])]
    out["build_db 5 coalesced reduce"] = c
    c = copy.deepcopy(t)
    c["dump_file_rank_0"]["entries"].append(ce(0, "all_reduce", [[4, 4]], [[4, 4]]))
    c["dump_file_rank_1"]["entries"] += [ce(0, "all_reduce", [[4, 4]], [[4, 4]]),
                                         ce(1, "_reduce_oop", [[4, 4]], [[4, 4]]),
                                         ce(2, "_reduce_oop", [[4, 4]], [[4, 4]]),
                                         ce(3, "REDUCE_SCATTER_coalesced", [[]], [[]])]
    out["build_db 6 coalesced on rank 1 only"] = c
    return out


def cases() -> dict[str, dict[str, dict[str, Any]]]:
    """Every case: name -> {file name: the dump torch's test builds}."""
    loader = {"dump_file_rank_0": {"entries": [], "version": VERSION, "pg_config": {}}}  # test_loader.py's dump
    return {**_match_one_event_cases(), **_all_events_cases(), **_backend_cases(), **_build_db_cases(),
            "loader empty dump": loader}


def write(details: dict[str, dict[str, Any]], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in details.items():
        (out / name).write_bytes(pickle.dumps({k: v for k, v in doc.items() if k != "rank"}))
    return out


@dataclass
class TorchFinding:
    kind: str  # not_joined | errors | totals
    seq: int
    group: str  # the group's name
    collective: str
    missing: list[int] = field(default_factory=list)
    culprits: dict[int, str] = field(default_factory=dict)  # rank -> MatchState name


@dataclass
class TorchVerdict:
    ok: bool  # the analyzer ran to its end
    findings: list[TorchFinding]
    passed: list[tuple[int, str, bool]]  # its database: (record id, collective, pass_check)
    error: str = ""
    log: str = ""


# The analyzer's own entry point (torchfrtrace = fr_trace.main) on each case's directory in one process (one
# torch import instead of one per case), with the directory listed in sorted order (see the module docstring);
# a line "=== CASE <dir>" before each, and the exception that stops it (torch's AssertionError) after it.
_RUN = """
import os, sys, traceback
_w = os.walk
os.walk = lambda *a, **k: ((r, d, sorted(f)) for r, d, f in _w(*a, **k))
from torch.distributed.flight_recorder.fr_trace import main
for d in sys.argv[1:]:
    print("=== CASE " + d, file=sys.stderr, flush=True)
    try:
        main([d, "--prefix", "dump_file_rank_", "-o", d + ".db.pkl"])
    except BaseException as exc:
        print("STOPPED " + type(exc).__name__ + ": " + str(exc), file=sys.stderr, flush=True)
"""


def torch_verdicts(dirs: list[Path]) -> dict[Path, TorchVerdict]:
    p = subprocess.run([sys.executable, "-c", _RUN, *map(str, dirs)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    logs = dict(re.findall(r"^=== CASE (.*)\n((?:(?!=== CASE ).*\n?)*)", p.stderr, re.M))
    out = {}
    for d in dirs:
        log = logs.get(str(d), "")
        stop = next((ln.removeprefix("STOPPED ") for ln in log.splitlines() if ln.startswith("STOPPED ")), "")
        db_file = Path(str(d) + ".db.pkl")
        passed = []
        if not stop and db_file.exists():
            _, db = pickle.loads(db_file.read_bytes())
            passed = [(c.record_id, c.collective_name, c.pass_check) for c in db.collectives]
        out[d] = TorchVerdict(not stop and str(d) in logs, _findings(log), passed, stop or p.stderr[-300:], log)
    return out


_HEAD = re.compile(r"^(Not all ranks joining collective, sequence number: |Collective sequence number: |"
                   r"Input/output mismatch in the collective sequence number: )(\d+)")


def _findings(log: str) -> list[TorchFinding]:
    out: list[TorchFinding] = []
    for ln in log.splitlines():
        m = _HEAD.match(ln)
        if m:
            kind = {"N": "not_joined", "C": "errors", "I": "totals"}[m.group(1)[0]]
            out.append(TorchFinding(kind, int(m.group(2)), "", ""))
        elif out and ln.startswith("group info: "):
            out[-1].group = ln.removeprefix("group info: ").split(":")[0]
        elif out and ln.startswith("collective: "):
            out[-1].collective = ln.removeprefix("collective: ")
        elif out and ln.startswith("missing ranks: "):
            out[-1].missing = sorted(int(x) for x in re.findall(r"\d+", ln.removeprefix("missing ranks: ")))
        elif out and ln.startswith("error msg: "):
            for r, state in re.findall(r"Culprit rank (\d+); Error type: (\w+)", ln):
                out[-1].culprits[int(r)] = state
    return out


_CLASS = {"COLLECTIVE_TYPE_MISMATCH": "op", "SIZE_OR_SYNTAX_MISMATCH": "size", "COLLECTIVE_DTYPE_MISMATCH": "dtype",
          "COLLECTIVE_STATE_MISMATCH": "state"}


def torch_summary(v: TorchVerdict) -> list[tuple[str, int, str, list[int]]]:
    """(group, seq, class, culprit ranks) per finding; class: not_joined, op, size, dtype, state, totals."""
    out = []
    for f in v.findings:
        if f.kind == "not_joined":
            out.append((f.group, f.seq, "not_joined", f.missing))
        elif f.kind == "totals":
            out.append((f.group, f.seq, "totals", []))
        else:
            cls = sorted({_CLASS.get(s, s) for s in f.culprits.values()})
            out.append((f.group, f.seq, "/".join(cls), sorted(f.culprits)))
    return out


def our_verdict(d: Path) -> Any:
    from rankscope.analysis.hang import diagnose
    from rankscope.model.readers import frdump

    return diagnose([frdump.read(f) for f in frdump.find(d)])


def our_summary(v: Any) -> list[tuple[str, int, str, list[int]]]:
    """The same shape from rankscope's verdict (hang and mismatch problems; process-group notes aside)."""
    out = []
    for p in v.problems:
        if p.kind == "not_joined":
            cls = "not_joined"
        elif p.kind == "mismatch":
            cls = "totals" if p.detail.get("check") == "totals" else p.detail["what"]
        elif p.kind == "behind":
            cls = "state"
        else:
            continue
        out.append((p.group.split(":")[0], p.seq, cls, [] if cls == "totals" else p.culprits))
    return out


def run_all(tmp: Path) -> list[dict[str, Any]]:
    """Every case: torch's verdict and rankscope's on the same files."""
    dirs = {name: write(details, tmp / re.sub(r"\W+", "_", name)) for name, details in cases().items()}
    theirs = torch_verdicts(list(dirs.values()))
    rows = []
    for name, d in dirs.items():
        t, ours = theirs[d], our_verdict(d)
        rows.append({"case": name, "torch": torch_summary(t), "torch_ok": t.ok, "torch_error": t.error,
                     "torch_db": t.passed, "ours": our_summary(ours), "headline": ours.headline, "verdict": ours})
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for row in run_all(Path(tmp)):
            same = row["torch_ok"] and row["torch"] == row["ours"]
            torch_said = row["torch"] if row["torch_ok"] else f"stopped: {row['torch_error'][:60]}"
            print(f"{'=' if same else '≠'} {row['case']:42} torch {torch_said}  ours {row['ours']}")


if __name__ == "__main__":
    main()
