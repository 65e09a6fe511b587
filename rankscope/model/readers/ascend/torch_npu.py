"""Reader for the Ascend PyTorch Profiler (torch_npu) output directory ``*_ascend_pt/``.

Layout, from Ascend's public documentation of the torch_npu profiler::

    <host>_<pid>_<time>_ascend_pt/
      profiler_info_{rank}.json        config, start/end info and "rank_id" (rank in the name too)
      profiler_metadata.json           user metadata; "distributed_args" (backend, rank, world_size)
      ASCEND_PROFILER_OUTPUT/
        trace_view.json                Chrome trace, bare JSON array; layers are processes named by
                                       "process_name" metadata events: Python, CANN, Ascend Hardware,
                                       HCCL, Overlap Analysis, ...; "ts" may be a decimal string (µs)
        kernel_details.csv             one row per NPU task (used when trace_view.json is absent)
        communication.json             {"stepN": {"collective"|"p2p": {"hcom_allReduce__12_0_1@<group>":
                                        {"Communication Time Info": {"Start Timestamp(us)",
                                        "Elapse Time(ms)", ...}, "Communication Bandwidth Info":
                                        {"HCCS"|"RDMA"|"SDMA"|...: {"Transit Size(MB)", ...}}}}}}
        step_trace_time.csv            per-step Computing / Communication / Free (no timestamps)
        memory_record.csv              Component, Timestamp(us), Total Allocated(MB), Total Reserved(MB), ...

Output: the same per-rank tables as the Kineto reader (``schema.py``), so every analysis runs on
Ascend runs unchanged. Mapping: Ascend Hardware / HCCL tasks -> ``kernel`` (HCCL ones are
communication), CANN API -> ``runtime``, Python-layer ops -> ``cpu_op`` unless they carry their own
category; "Overlap Analysis" is derived data and is left out. Collectives come from
communication.json (host and device span are both the HCCL op's span); sizes use MB = 10^6 bytes.
Decimal-string timestamps are read as float64 µs, i.e. to within ~0.25 µs on epoch values.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar, Iterator, Union

import numpy as np
import pyarrow as pa

from rankscope.errors import TraceError
from rankscope.model import schema
from rankscope.model.readers import kineto
from rankscope.model.readers.ascend import flows
from rankscope.model.info import Kind, Problem, prefixed
from rankscope.model.readers.kineto import Event, RawTrace

OUTPUT = "ASCEND_PROFILER_OUTPUT"
FILES = ("trace_view.json", "kernel_details.csv", "communication.json", "communication_matrix.json",
         "step_trace_time.csv", "memory_record.csv", "operator_details.csv", "op_statistic.csv")
_QUEUE_CATS = ("enqueue", "dequeue")  # torch_npu's task queue events (``TraceEventManager.create_x_event``)
# Layer (process) name -> Kineto category the rest of rankscope understands; None: left out.
LAYER_CAT: dict[str, str | None] = {
    "ascend hardware": "kernel", "hccl": "kernel", "cann": "runtime", "python": "cpu_op",
    "python3": "cpu_op", "overlap analysis": None,
}
_INFO_RE = re.compile(r"profiler_info_(\d+)\.json$")
# hcom_<op>__<last 3 digits of the group hash>_<per-group call counter>[_<n>]@<group hash>
_HCOM_RE = re.compile(r"^hcom_([A-Za-z]+)_+([^@]*)(?:@(.*))?$")


def is_ascend_dir(d: Path) -> bool:
    """A torch_npu (``*_ascend_pt``) or MindSpore (``*_ascend_ms``, the same layout) profiler output
    directory, or one with ASCEND_PROFILER_OUTPUT."""
    return d.is_dir() and ((d / OUTPUT).is_dir() or (d.name.endswith(("_ascend_pt", "_ascend_ms")) and
                                                      any(d.glob("profiler_info*.json"))))


def find_dirs(root: Path) -> list[Path]:
    """Every Ascend output directory at or under ``root``."""
    if is_ascend_dir(root):
        return [root]
    return sorted(p.parent for p in root.rglob(OUTPUT) if p.is_dir() and "analysis" not in p.parts)


def source_files(d: Path) -> tuple[str, ...]:
    """The files whose size/mtime/head key the cache of this rank."""
    own = sorted(d.glob("profiler_info*.json")) + sorted(d.glob("profiler_metadata.json"))
    out = [d / OUTPUT / f for f in FILES if (d / OUTPUT / f).is_file()]
    out += sorted((d / OUTPUT).glob("*.db"))
    return tuple(str(p) for p in own + out)


def identity(d: Path, problems: list[str] | None = None) -> tuple[int | None, str, dict[str, Any]]:
    """(rank, where it came from, distributed args) from profiler_info / profiler_metadata content;
    a file or field of the wrong shape is ignored with a line in ``problems``."""
    said = [] if problems is None else problems
    dist: dict[str, Any] = {}
    meta_file = d / "profiler_metadata.json"
    if meta_file.is_file():
        try:
            dist = dict(json.loads(meta_file.read_text()).get("distributed_args") or {})
        except (OSError, ValueError, AttributeError, TypeError, RecursionError) as exc:
            said.append(Problem(f"{meta_file}: distributed_args unreadable ({type(exc).__name__}); ignored",
                                Kind.BAD_FIELD, str(meta_file)))
            dist = {}
    for f in sorted(d.glob("profiler_info*.json")):
        try:
            rank = json.loads(f.read_text()).get("rank_id")
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            said.append(Problem(f"{f}: not a JSON object with rank_id ({type(exc).__name__}); rank from its name",
                                Kind.BAD_FIELD, str(f)))
            rank = None
        if isinstance(rank, int) and rank >= 0:
            return rank, "profiler_info.json", dist
        m = _INFO_RE.search(f.name)
        if m:
            return int(m.group(1)), "profiler_info file name", dist
    if type(dist.get("rank")) is int and 0 <= dist["rank"] < (1 << 20):
        return dist["rank"], "profiler_metadata.json", dist
    from rankscope.model.readers.ascend import db as ascend_db

    rank, source = ascend_db.rank_of(d / OUTPUT)
    return rank, source, dist


def double_hash(data: str) -> int:
    """msprof-analyze's hash of an HCCL comm name: the group id in operation names ("@<hash>").

    From msprof_analyze/cluster_analyse/common_func/utils.py (26.2.0); parallel_group_info in
    profiler_metadata.json is keyed by the comm name, operations by this hash of it.
    """
    h0 = h1 = 0
    for ch in data:
        h0 = (h0 * 29 + ord(ch)) & 0xFFFFFFFF
        h1 = (h1 * 131 + ord(ch)) & 0xFFFFFFFF
    return (h0 << 32) | h1


def _metadata(d: Path) -> dict[str, Any]:
    try:
        doc = json.loads((d / "profiler_metadata.json").read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def process_groups(d: Path) -> list[dict[str, Any]]:
    """The rank's HCCL groups from profiler_metadata.json's ``parallel_group_info``.

    ``name`` is the group hash used in operation names, ``desc`` the group's name ("tp", "pp",
    "default_group"), ``ranks`` its global ranks, ``comm_name`` the HCCL comm name it is keyed by.
    """
    info = _metadata(d).get("parallel_group_info")
    out = []
    for comm, g in (info.items() if isinstance(info, dict) else []):
        ranks = g.get("global_ranks") if isinstance(g, dict) else None
        if isinstance(ranks, list) and all(type(r) is int for r in ranks) and len(ranks) < (1 << 20):
            out.append({"name": str(double_hash(str(comm))), "desc": str(g.get("group_name", "")),
                        "ranks": sorted(ranks), "comm_name": str(comm)})
    return out


class _AscendTrace(RawTrace):
    """trace_view.json events with a Kineto category derived from their layer (process)."""

    pid_cat: dict[Any, str | None] = {}
    dropped: set[tuple[Any, Any]] = set()  # (pid, tid) of HCCL task-level threads
    typed = False  # events are rewritten in place below: plain Event structs

    links: flows.Links = flows.Links()  # launch links from the flow events (tasks' streams and correlations)
    queue: flows.Links = flows.Links()  # the task queue's Enqueue -> Dequeue pairs (``flows.queue_links``)
    # device layers' pid -> the pid of their NPU: torch_npu's Ascend Hardware and HCCL layers are one NPU, and Kineto's
    # tables (which the GPU analyses read) give a device one pid
    npu_pid: dict[Any, Any] = {}

    def chunks(self, size: int | None = None) -> Iterator[list[Event]]:
        host_pids = self.links.host_pids()  # the layers whose ops launched tasks
        for chunk in super().chunks(size):
            for e in chunk:  # per event, but only a dict lookup on the Ascend path
                if e.pid in self.pid_cat and (not e.cat or self.pid_cat[e.pid] == "kernel"):
                    e.cat = self.pid_cat[e.pid]
            linked = [e for e in chunk if e.ph == "X" and (e.pid in host_pids or self.pid_cat.get(e.pid) == "kernel")]
            if linked:
                self._link(linked)
            if self.queue:
                queued = [e for e in chunk if e.ph == "X" and e.cat in _QUEUE_CATS]
                if queued:
                    self._link(queued, self.queue, [e.cat == "dequeue" for e in queued])
            kept = [e for e in chunk if self.pid_cat.get(e.pid, "") is not None
                    and (not self.dropped or (e.pid, e.tid) not in self.dropped)]
            if self.npu_pid:
                for e in kept:
                    e.pid = self.npu_pid.get(e.pid, e.pid)
            yield kept

    def _link(self, events: list[Event], links: flows.Links | None = None, sides: list[bool] | None = None) -> None:
        """Each task's stream and correlation, each host op's correlation (``flows``): looked up for a chunk at once.
        With ``links`` (the task queue's): each event's id on its side of them (``sides``: the "task" side), no
        stream."""
        kernel = {p for p, c in self.pid_cat.items() if c == "kernel"}
        device = np.array([e.pid in kernel for e in events] if sides is None else sides, bool)
        links = self.links if links is None else links
        if links:
            corrs = links.find([(e.pid, e.tid) for e in events], flows.ns_many([e.ts for e in events]),
                               device).tolist()
        else:
            corrs = [-1] * len(events)
        for e, corr, dev in zip(events, corrs, device.tolist()):
            stream = flows.stream_of(e.name, e.tid) if dev and sides is None else None
            if corr < 0 and stream is None:
                continue
            args = e.args if e.args is not None else kineto.Args()
            e.args = args
            if stream is not None:
                args.stream = stream
            if corr >= 0:
                args.correlation = corr


class _Meta(kineto.msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    args: Any = None
    cat: Any = None  # flow events: the link's kind, id and time
    id: Any = None
    ts: Any = None


# The fast path of ``_layers``: metadata and flow events get their fields, every other event decodes to an empty
# struct (its keys skipped: a trace_view.json is mostly "X" events, whose args and timestamps are not needed here;
# bench/ascend_flows.py, 300,000 tasks with their flows: peak RSS 1,045 MB decoding every event as ``_Meta``, 652 MB
# with this, 643 MB at 3a11640, which read no flows).
class _M(kineto.msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    ph: ClassVar[str] = "M"
    name: str = ""
    pid: Any = None
    tid: Any = None
    args: Any = None


class _S(kineto.msgspec.Struct, gc=False, tag_field="ph", tag="s"):
    ph: ClassVar[str] = "s"
    cat: Any = None
    id: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None


class _F(_S, tag="f"):
    ph: ClassVar[str] = "f"


_SKIP = tuple(kineto.msgspec.defstruct(f"_Skip{ord(c)}", [], tag_field="ph", tag=c, gc=False, namespace={"ph": c})
              for c in "XiBEICbnetPNODVvRcSTpF()")
# a union built at run time, as kineto's ``_TYPED``
_FAST = kineto.msgspec.json.Decoder(list[Union[(_M, _S, _F) + _SKIP]])  # type: ignore[misc]


def _layers(data: bytes) -> tuple[dict[Any, str | None], set[tuple[Any, Any]], flows.Links, dict[Any, Any],
                                  flows.Links]:
    """pid -> category from the "process_name" metadata events, the HCCL task-level threads, the launch links
    (``flows``), each NPU layer's pid -> the first pid labelled with its NPU ("process_labels" "NPU 3", as
    torch_npu's own ``TraceStepTimeParser`` reads them; a bare "NPU": the one NPU of the rank's profile), and the task
    queue's links (``flows.queue_links``).

    The HCCL layer has one "Group <hash> Communication" thread per group with the operations
    (hcom_*) and, at Level1, task threads ("Plane 0", ...) with their Notify_Wait / Memcpy /
    RDMASend tasks: parts of those operations, not compute, so they are left out.
    """
    out: dict[Any, str | None] = {}
    threads: list[_Meta] = []
    try:
        metas: list[Any] = _FAST.decode(data)
    except kineto.msgspec.DecodeError:  # an unknown or missing "ph": every event, read loosely
        try:
            metas = kineto.msgspec.json.decode(data, type=list[_Meta])
        except kineto.msgspec.DecodeError:
            return out, set(), flows.Links(), {}, flows.Links()
    npu: dict[Any, Any] = {}
    first: dict[str, Any] = {}
    for m in metas:
        if m.ph == "M" and m.name == "process_labels" and isinstance(m.args, dict):
            label = " ".join(str(m.args.get("labels", "")).split()[:2])
            if label.split()[:1] == ["NPU"]:
                npu[m.pid] = first.setdefault(label if label != "NPU" else "NPU", m.pid)

        if m.ph == "M" and m.name == "process_name" and isinstance(m.args, dict):
            layer = str(m.args.get("name", "")).strip().lower()
            if layer in LAYER_CAT:
                out[m.pid] = LAYER_CAT[layer]
            if layer == "communication":  # the HCCL layer's name in some CANN versions
                out[m.pid] = "kernel"
        elif m.ph == "M" and m.name == "thread_name" and isinstance(m.args, dict):
            threads.append(m)
    hccl = {m.pid for m in threads if str(m.args.get("name", "")).endswith("Communication")}
    dropped = {(m.pid, m.tid) for m in threads if m.pid in hccl and "Communication" not in str(m.args.get("name", ""))}
    queue = flows.queue_links([m for m in metas if m.ph in ("s", "f") and m.cat == flows.QUEUE_CAT])
    return out, dropped, flows.links([m for m in metas if m.ph in ("s", "f") and m.cat in flows.CATS]), npu, queue


def read_trace_view(path: Path) -> RawTrace:
    """Decode trace_view.json into a RawTrace whose events carry Kineto categories."""
    data, problems = kineto.read_bytes(path)
    raw = kineto.decode_bytes(str(path), data, problems)
    out = _AscendTrace(raw.path, raw.trace, raw.problems, raw.partial, raw.nbytes)
    out.pid_cat, out.dropped, out.links, out.npu_pid, out.queue = _layers(data)
    return out


def collectives(path: Path, groups: dict[str, list[int]] | None = None) -> tuple[pa.Table, list[str]]:
    """The ``collectives`` table from communication.json; ``groups``: group hash -> member ranks."""
    try:
        doc = json.loads(Path(path).read_bytes().decode("utf-8-sig", errors="replace"))
    except (OSError, ValueError, RecursionError) as exc:
        deep = isinstance(exc, RecursionError)
        return schema.empty("collectives"), [Problem(
            f"{path}: not readable JSON ({'nested too deeply' if deep else exc}); no collectives",
            Kind.TOO_DEEP if deep else Kind.FILE_UNREADABLE if isinstance(exc, OSError) else Kind.NOT_JSON, str(path))]
    return collectives_of(doc, str(path), groups)


def collectives_of(doc: Any, where: str, groups: dict[str, list[int]] | None = None) -> tuple[pa.Table, list[str]]:
    """The ``collectives`` table from communication.json's content (``where``: its source, for problems)."""
    path = where
    if not isinstance(doc, dict):
        return schema.empty("collectives"), [Problem(f"{path}: expected a JSON object, found {type(doc).__name__}; "
                                                     "no collectives", Kind.NOT_AN_OBJECT, path)]
    bad: list[int] = [0]
    rows = [r for step in doc.values() if isinstance(step, dict)
            for kind in ("collective", "p2p") for r in _comm_rows(step.get(kind), bad, groups or {})]
    problems: list[str] = [Problem(f"{path}: {bad[0]} communication entries with wrong types were left out",
                                   Kind.BAD_FIELD, path, count=bad[0])] if bad[0] else []
    if not rows:
        return schema.empty("collectives"), problems
    fill = schema.COLLECTIVE_FILL
    cols = {f.name: [r.get(f.name, fill.get(f.name)) for r in rows] for f in schema.COLLECTIVES}
    return pa.table(cols, schema=schema.COLLECTIVES).sort_by("ts"), problems


def _comm_rows(ops: Any, bad: list[int], groups: dict[str, list[int]]) -> Iterator[dict[str, Any]]:
    """Rows of one step's "collective" / "p2p" object; an entry with wrong types is counted in ``bad``."""
    if not isinstance(ops, dict):
        bad[0] += ops is not None
        return
    for name, info in ops.items():
        if isinstance(name, str) and name.startswith("Total"):
            continue  # "Total Op Info": the writer's per-step sum, not an operation
        try:
            row = _comm_row(name, info, groups)
        except (TypeError, ValueError, AttributeError, OverflowError):
            row = None
        if row is None:
            bad[0] += 1
        else:
            yield row


def transit_bytes(bw: Any) -> int:
    """Bytes moved by one operation from its "Communication Bandwidth Info" (MB = 10^6 bytes).

    SDMA is the sum of HCCS and PCIE in CANN's output (see the real file in
    ../shared/data/ascend_msprof/cluster_communication.json), so it is skipped when either is there.
    """
    if not isinstance(bw, dict):
        return -1
    parts = {k: float(v.get("Transit Size(MB)", 0) or 0) for k, v in bw.items() if isinstance(v, dict)}
    if "HCCS" in parts or "PCIE" in parts:
        parts.pop("SDMA", None)
    size = sum(parts.values())
    return int(round(size * 1e6)) if size and 0 < size < 1e12 else -1


def parse_name(name: str) -> tuple[str, int, str]:
    """(op, per-group call counter, group hash) of ``hcom_allReduce__149_2_1@6622486332382281149``.

    The first number is the last three digits of the group hash, the second the call counter of
    the group on this rank (the same on every member); a name with one number uses that one.
    """
    from rankscope.model.schema import normalize_op

    m = _HCOM_RE.match(name)
    if not m:
        return "other", -1, ""
    nums = re.findall(r"\d+", m.group(2))
    seq = int(nums[1] if len(nums) > 1 else nums[0]) if nums and len(nums[-1]) < 18 else -1
    return normalize_op(m.group(1)), seq, m.group(3) or ""


def _comm_row(name: str, info: Any, groups: dict[str, list[int]]) -> dict[str, Any] | None:
    # One entry; a wrong type raises (TypeError, ...) and is counted by the caller.
    t = (info or {}).get("Communication Time Info") or {}
    start = t.get("Start Timestamp(us)")
    if not isinstance(start, (int, float)) or not math.isfinite(start) or abs(start) > 4.1e15:
        return None
    ts = int(math.floor(start)) * 1000 + round((start - math.floor(start)) * 1000)
    dur = int(round(float(t.get("Elapse Time(ms)", 0) or 0) * 1e6))
    if not isinstance(name, str) or abs(dur) > 86_400 * 10**9:
        return None
    op, seq, group = parse_name(name)
    bw = info.get("Communication Bandwidth Info")
    if bw is not None and not isinstance(bw, dict):
        raise TypeError("Communication Bandwidth Info is not an object")  # counted as a wrong-typed entry
    nbytes = transit_bytes(bw)
    members = groups.get(group) or []
    return {"op": op, "name": name, "ts": ts, "dur": dur, "dev_ts": ts, "dev_dur": dur, "pg_name": group,
            "pg_ranks": ",".join(map(str, members)), "group_size": len(members), "seq": seq, "nelems_in": -1,
            "nelems_out": -1, "dtype": "", "bytes_in": nbytes, "bytes_out": nbytes, "external_id": -1}


def memory(path: Path) -> pa.Table:
    """The ``memory`` table from memory_record.csv (PTA rows when present: the framework's view)."""
    import pyarrow.csv as pcsv

    t = pcsv.read_csv(path).to_pydict()
    comp = [str(c) for c in t.get("Component", [])]
    keep = np.array([c == "PTA" for c in comp]) if "PTA" in comp else np.ones(len(comp), dtype=bool)
    ts = np.asarray(t["Timestamp(us)"], dtype=np.float64)[keep]
    alloc = (np.asarray(t["Total Allocated(MB)"], dtype=np.float64)[keep] * 2**20).astype(np.int64)
    resv = (np.asarray(t["Total Reserved(MB)"], dtype=np.float64)[keep] * 2**20).astype(np.int64)
    dev = [int(m.group(1)) if (m := re.search(r"(\d+)", str(x))) else -1
           for x in t.get("Device Type", ["-1"] * len(comp))]
    delta = np.diff(alloc, prepend=alloc[:1]) if len(alloc) else alloc
    from rankscope.model.readers.timestamps import to_ns

    return pa.table({"ts": to_ns(ts, 0), "device": np.asarray(dev, np.int32)[keep],
                     "bytes_delta": delta, "total_allocated": alloc, "total_reserved": resv},
                    schema=schema.MEMORY).sort_by("ts")


def step_ids(path: Path) -> list[int]:
    """Steps listed in step_trace_time.csv (it has per-step durations but no timestamps)."""
    import pyarrow.csv as pcsv

    col = pcsv.read_csv(path).to_pydict().get("Step", [])
    return [int(s) for s in col if str(s).lstrip("-").isdigit()]


def read_text(d: Path) -> tuple[dict[str, pa.Table], list[str], bool]:
    """All per-rank tables of one text-form Ascend output directory, problems, and whether it is partial."""
    from rankscope.model import tables

    out = d / OUTPUT
    tv = out / "trace_view.json"
    if not tv.is_file():
        raise TraceError(str(d), f"no {OUTPUT}/trace_view.json (was the profiler's analysis step run?)", Kind.NO_TRACE)
    raw = read_trace_view(tv)
    tabs, problems = tables.build(raw)
    problems = [prefixed(str(tv), p) for p in raw.problems + problems]
    if (out / "communication.json").is_file():
        groups = {g["name"]: g["ranks"] for g in process_groups(d)}
        tabs["collectives"], more = collectives(out / "communication.json", groups)
        problems += more
    from rankscope.model.readers.ascend import files as ascend_files

    summary, more = ascend_files.read_all(out)
    tabs.update(summary)
    said = {getattr(p, "file", None) for p in problems}
    problems += [p for p in more if getattr(p, "file", None) not in said]  # a file is said once
    if not (out / "step_trace_time.csv").is_file():  # torch_npu's rows, from the trace's Overlap Analysis layer
        from rankscope.model.readers.ascend import overlap as ascend_overlap

        try:
            tabs["step_times"] = ascend_overlap.step_times(tv)
        except (OSError, ValueError, TypeError, AttributeError, RecursionError, kineto.msgspec.DecodeError) as exc:
            problems.append(Problem(f"{tv}: no step_trace_time.csv and its Overlap Analysis layer is unreadable "
                                    f"({str(exc)[:200]}); left out of cluster_step_trace_time.csv", Kind.BAD_TABLE,
                                    str(tv)))
    if (out / "memory_record.csv").is_file():
        try:
            tabs["memory"] = memory(out / "memory_record.csv")
        except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
            problems.append(Problem(f"{out / 'memory_record.csv'}: unreadable ({exc}); no memory table", Kind.BAD_TABLE,
                                    str(out / "memory_record.csv")))
    if (out / "step_trace_time.csv").is_file() and not tabs["steps"].num_rows:
        try:
            ids = step_ids(out / "step_trace_time.csv")
        except (OSError, KeyError, ValueError, pa.ArrowException):
            ids = []
        if ids:
            problems.append(Problem(f"{tv}: no ProfilerStep spans, so steps {ids} of step_trace_time.csv "
                                    "have no timestamps; per-step analyses are skipped", Kind.BAD_STEP, str(tv)))
    return tabs, problems, raw.partial
