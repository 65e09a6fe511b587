"""torch_npu's own step_trace_time.csv writer, run on a trace_view.json without an NPU.

torch_npu's profiler analysis is pure Python; its package needs the CANN runtime, so the wheel
(torch-npu 2.14.0, cached by ``make test`` with ``pip download --no-deps`` into ``$RANKSCOPE_TEST_CACHE/wheels``,
default ~/.cache/rankscope-tests/wheels, like the other dev dependencies; the tests never download it and
fail with :func:`fetch_command` when it is absent) is unpacked and only ``torch_npu/profiler/analysis`` and
the helpers in ``torch_npu/utils/`` are imported, under stub parent packages (stubs for the four names it takes from torch_npu's
compiled or torch-importing parts: a warning switch, an interactive-shell test, a host id).

What runs unchanged from the wheel: ``FwkCANNRelationParser.get_step_range`` (a step's range on the
device) and ``TraceStepTimeParser.create_step_file`` (the per-step sums and the CSV). What this file
supplies, as torch_npu's framework files would: the ProfilerStep#N nodes (``TorchOpNode`` over the
trace's ProfilerStep spans) and the kernel dict (host launch time of each ``torch_to_npu`` flow -> the
kernels it launched), i.e. torch_npu's path for a run without a task queue.
"""
from __future__ import annotations

import csv
import json
import os
import sys
import types
import warnings
import zipfile
from decimal import Decimal
from pathlib import Path
from typing import Any

VERSION = "2.14.0"


def cache_dir() -> Path:
    return Path(os.environ.get("RANKSCOPE_TEST_CACHE", Path.home() / ".cache" / "rankscope-tests"))


def fetch_command() -> str:
    """The command that caches the wheel where :func:`unpacked` reads it (what ``make test`` runs; the
    Makefile reads VERSION from this file)."""
    return (f"{sys.executable} -m pip download --no-deps -d {cache_dir() / 'wheels'} --python-version 3.11 "
            f"--only-binary=:all: --platform manylinux_2_28_x86_64 torch-npu=={VERSION}")


def unpacked() -> Path:
    """The wheel's analysis sources, unpacked once from the cached wheel; raises RuntimeError with the
    command that caches it when it is absent."""
    root = cache_dir() / f"torch_npu-{VERSION}"
    done = root / "torch_npu" / "profiler" / "analysis" / "prof_view" / "_trace_step_time_parser.py"
    if done.is_file():
        return root
    got = sorted((cache_dir() / "wheels").glob(f"torch_npu-{VERSION}-*.whl"))
    if not got:
        raise RuntimeError(f"the torch-npu {VERSION} wheel (this oracle's source) is not cached in "
                           f"{cache_dir() / 'wheels'}: run `make test` (it caches it) or `{fetch_command()}`")
    with zipfile.ZipFile(got[0]) as z:
        names = [n for n in z.namelist() if n.startswith("torch_npu/profiler/analysis/")
                 or (n.startswith("torch_npu/utils/") and n.count("/") == 2)]
        z.extractall(root, names)
    return root


def _import(root: Path) -> tuple[Any, Any, Any]:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    for name, sub in (("torch_npu", ""), ("torch_npu.profiler", "profiler"), ("torch_npu.utils", "utils"),
                      ("torch_npu._init", "_init"), ("torch_npu._init.common", "_init/common"), ("torch_npu._C", "_C")):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [str(root / "torch_npu" / sub)]  # type: ignore[attr-defined]
            sys.modules[name] = m
    # the few names the analysis imports from torch_npu's compiled or torch-importing parts
    for name, attrs in (("torch_npu.utils", {"_should_print_warning": lambda: False}),
                        ("torch_npu._init.common.warning_utils", {"_should_print_warning": lambda: False}),
                        ("torch_npu.utils.utils", {"_is_interactive_command_line": lambda: False}),
                        ("torch_npu._C._profiler", {"_get_host_uid": lambda: 0})):
        m = sys.modules.setdefault(name, types.ModuleType(name))
        for k, v in attrs.items():
            setattr(m, k, v)
    with warnings.catch_warnings():  # its regular expressions carry invalid escapes (DeprecationWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch_npu.profiler.analysis.prof_bean._torch_op_node import TorchOpNode  # type: ignore[import-not-found]
        from torch_npu.profiler.analysis.prof_parse import _fwk_cann_relation_parser as rel  # type: ignore[import-not-found]
        from torch_npu.profiler.analysis.prof_view._trace_step_time_parser import (  # type: ignore[import-not-found]
            TraceStepTimeParser)

    return TorchOpNode, rel, TraceStepTimeParser


def _ns(v: Any) -> int:
    return int(Decimal(str(v)) * 1000)


def step_trace_time(trace_view: Path, out_dir: Path) -> list[dict[str, str]]:
    """torch_npu's step_trace_time.csv for ``trace_view`` (written into ``out_dir``), as rows."""
    TorchOpNode, rel, Parser = _import(unpacked())
    events = json.loads(Path(trace_view).read_bytes())
    events = events["traceEvents"] if isinstance(events, dict) else events
    npu = {e.get("pid") for e in events if e.get("name") == "process_labels"
           and str(e.get("args", {}).get("labels", "")).startswith("NPU")}
    kernels = {(e["pid"], e["tid"], str(e["ts"])): e for e in events if e.get("ph") == "X" and e.get("pid") in npu}
    launch = {e["id"]: _ns(e["ts"]) for e in events if e.get("ph") == "s" and e.get("cat") == "async_npu"}
    kernel_dict: dict[int, list[Any]] = {}
    for e in events:
        k = kernels.get((e.get("pid"), e.get("tid"), str(e.get("ts")))) if e.get("ph") == "f" else None
        if k is not None and e.get("cat") == "async_npu" and e["id"] in launch:
            bean = types.SimpleNamespace(ts=_ns(k["ts"]), end_ns=_ns(k["ts"]) + int(Decimal(str(k["dur"])) * 1000))
            kernel_dict.setdefault(launch[e["id"]], []).append(bean)
    root = TorchOpNode(types.SimpleNamespace(name="root", ts=0, end_ns=0, pid=0, args={}))
    for e in events:
        if e.get("ph") == "X" and e.get("pid") not in npu and str(e.get("name", "")).startswith("ProfilerStep#"):
            ts = _ns(e["ts"])
            root.add_child_node(TorchOpNode(types.SimpleNamespace(
                name=e["name"], ts=ts, end_ns=ts + int(Decimal(str(e["dur"])) * 1000), pid=e["pid"], args={})))
    rel.FwkFileParser.has_task_queue_data = lambda self: False  # the path without a task queue
    out_dir.mkdir(parents=True, exist_ok=True)
    parser = Parser.__new__(Parser)
    parser._profiler_path = str(out_dir)
    rel.ProfilerLogger.init(str(out_dir), "FwkCANNRelationParser")
    parser.step_range = rel.FwkCANNRelationParser(str(out_dir)).get_step_range(root, kernel_dict)
    parser.create_step_file(str(out_dir), events, "step_trace_time.csv")
    with open(out_dir / "step_trace_time.csv", newline="") as f:
        return list(csv.DictReader(f))
