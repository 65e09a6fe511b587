"""Tiny hand-made Kineto traces for unit tests; dev tools a test needs (never a skip); the straggler
headline's grammar, checked against a finding's structured fields."""
from __future__ import annotations

import gzip
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

# ---- dev tools: a missing one fails the test with the command that installs it ----

def install_command(spec: str) -> str:
    """The exact command that installs ``spec`` into the interpreter running the tests."""
    return f"{sys.executable} -m pip install '{spec}'  (or `make install`: every dev dependency)"


def require(module: str, spec: str) -> Any:
    """Import ``module`` (a dev dependency of the tests, pip name and version ``spec``) or fail the
    test with the command that installs it. Never a skip: a green run must mean the oracle ran."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is missing ({exc}); it is a dev dependency of this test: "
                    f"{install_command(spec)}", pytrace=False)


# ---- the straggler headline ----

def straggler_note(f: Any) -> str:
    """Check a straggler finding's title against the grammar of ``analysis/diagnosis/straggler.py``'s ``_finding``,
    every variant of it, rebuilt from the finding's own fields, and return the cause's note between the
    head and the measure (e.g. ", +35% input work per step (aten::bmm inputs [...] vs [...])").

    "rank R is slow: LABEL" + note + ", " + measure + cost, where the measure is "own time +X% vs the other
    ranks' median", "own time excluding CPU wait +X% vs ..." (found on own time minus run-queue wait:
    evidence test "... (cpu-available)"), "CPU time +X% vs ..." (more input work found on the training thread's
    CPU time: "input work (cpu time)") or, for a slow link, "in every slow group (transfers up to Nx the
    other groups' median)" or, named from the critical path alone, "bounding the step on the critical path"; the
    cost ", costs M ms per step (S%)" only where time was lost; then, where the rank bounds the steps on the
    critical path, "; critical path: CHAIN bounds K of N steps[ (L more bounded by a rank's wait for a CPU, left
    out)]; at the other ranks' median the step would take ..."."""
    from rankscope.analysis.diagnosis.straggler import LABELS

    ev = f.evidence
    head = f"rank {f.ranks[0]} is slow: {LABELS.get(ev['cause'], ev['cause'])}"
    lost = ev.get("time_lost", {})
    cost = (f", costs {lost['lost_per_step_ns'] / 1e6:.1f} ms per step ({lost.get('lost_share_of_step', 0):.0%})"
            if lost.get("lost_per_step_ns") else "")
    path = ev.get("critical_path")
    if path:  # the chain that bounds the step, from the critical path (``bound.Bound.clause``)
        chain = f"{path['description']} bounds" if path.get("description") else f"rank {path['rank']} bounds"
        left = path.get("host_steps_left_out") or 0
        left_out = f" ({left} more bounded by a rank's wait for a CPU, left out)" if left else ""
        cost += (f"; critical path: {chain} {path['bounds_steps']} of {path['of_steps']} steps{left_out}; at the other ranks' "
                 f"median the step would take {(path['step_ns'] - path['cost_per_step_ns']) / 1e6:.1f} ms instead of "
                 f"{path['step_ns'] / 1e6:.1f} ms")
    if "test" not in ev and "transfer_ratio" in ev:
        tail = f", in every slow group (transfers up to {ev['transfer_ratio']:.1f}x the other groups' median){cost}"
    elif ev["test"] == "critical path":  # named from the dependencies alone: no own-time figure
        tail = f", bounding the step on the critical path{cost}"
    else:
        measure = ("own time excluding CPU wait" if str(ev["test"]).endswith("(cpu-available)") else
                   "CPU time" if str(ev["test"]).endswith("(cpu time)") else "own time")
        tail = f", {measure} +{ev['relative_excess']:.0%} vs the other ranks' median{cost}"
    assert f.title.startswith(head) and f.title.endswith(tail), (f.title, head, tail)
    return f.title[len(head):len(f.title) - len(tail)]


def one_line(text: str) -> str:
    """Terminal output with rich's line wrapping undone (every run of whitespace -> one space)."""
    return " ".join(text.split())



def x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list[dict[str, Any]], rank: int | None = 0, world: int = 2,
                gz: bool = False, backend: str = "gloo") -> Path:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": world,
                                  "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                                 "ranks": list(range(world))}]}
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


# ---- a tiny 2-rank run directory (render, timeline, flame, diff and report tests) ----

EVIL = "<script>alert(1)</script>"
OFFSET_NS = 5_000_000  # rank 1's clock runs 5 ms ahead of rank 0's


def _tiny_rank_events(shift_us: float, mm_us: float, evil: bool) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = []
    for i, step in enumerate((1, 2)):
        # with mm_us=300: step 1000 µs ⊃ fwd 500 ⊃ (mm 300, relu 50); all_reduce 200; steps 1100 µs apart
        t = 1000.0 + i * (mm_us + 800) + shift_us
        evs += [x(f"ProfilerStep#{step}", t, mm_us + 700, cat="user_annotation"),
                x("fwd", t + 10, mm_us + 200, cat="user_annotation"),
                x("aten::mm", t + 20, mm_us),
                x(EVIL if evil else "aten::relu", t + mm_us + 100, 50),
                x("gloo:all_reduce", t + mm_us + 300, 200, cat="user_annotation",
                  **{"Input Dims": [[1000]], "Input type": ["float"]})]
        evs += [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                 "ts": t + 30 + k, "args": {"Total Allocated": 1024 * (k + 1), "Total Reserved": 0, "Bytes": 1024,
                                            "Device Id": -1, "Device Type": 0}} for k in range(3)]
    return evs


def tiny_run(root: Path, *, mm_us: float = 300, evil: bool = False, offset_ns: int | None = OFFSET_NS) -> Path:
    """A 2-rank run directory: 2 steps, nested ops, one all_reduce per step, memory events; rank 1's
    clock is ``offset_ns`` ahead (recorded in its meta.json, and applied to its timestamps)."""
    for r in (0, 1):
        shift = (offset_ns or 0) / 1e3 if r == 1 else 0.0
        d = root / "ranks" / str(r)
        write_trace(d / f"rank{r}.pt.trace.json", _tiny_rank_events(shift, mm_us, evil), rank=r, world=2)
        meta = {"format": "rankscope.meta/1", "run_id": root.name, "rank": r, "world_size": 2, "host": f"node-{r}",
                "clock": {"anchors": [], "offset_to_rank0_ns": offset_ns if r == 1 else 0, "offset_error_ns": 1000}}
        (d / "meta.json").write_text(json.dumps(meta))
    (root / "run.json").write_text(json.dumps({"format": "rankscope.run/1", "run_id": root.name, "world_size": 2,
                                               "ranks_expected": [0, 1], "hosts": ["node-0", "node-1"]}))
    return root


# ---- real demo runs (torchrun, gloo, 2 ranks) for the web UI and browser tests ----

def demo_runs(tmp_path_factory: Any) -> Path:
    """The served directory with two demo runs, made once per test session under pytest's session temp
    directory: "healthy" and "slow1" (rank 1 slow in compute), plus a directory that is not a run and a
    secret file beside the served directory."""
    from rankscope.demo.launch import launch

    base = tmp_path_factory.getbasetemp() / "rankscope-web-e2e"
    root = base / "runs"
    if (base / "done").exists():
        return root
    launch(root / "healthy", ranks=2, steps=3, warmup=1, slow_rank=None, slow_kind="compute", slowdown=1.0)
    launch(root / "slow1", ranks=2, steps=3, warmup=1, slow_rank=1, slow_kind="compute", slowdown=1.0)
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("not a run")
    (base / "secret.txt").write_text("TOP SECRET")
    (base / "done").write_text("ok")
    return root
