"""Which events are communication, and what the issuing ``c10d::`` op says about a collective call.

Classification (``is_comm_name``): the backends' and c10d's own spans (``nccl``, ``gloo``, ``hccl``,
``record_param_comms``, ``c10d::``), PyTorch's functional collectives (``_c10d_functional::all_reduce``,
``wait_tensor``: DTensor, tensor parallel) and the spans a framework wraps around issuing and waiting
for its collectives (FSDP2's ``FSDP::all_gather``, ``FSDP::all_gather_copy_out``,
``FSDP::post_backward_reduce``, ``FSDP::post_backward_rs_wait``, ``FSDP::backward_prefetch``): on gloo the
training thread waits for those collectives inside ``Work.wait()``, which no event records, so the own
time of those spans is that wait. FSDP's spans are capitalised; its custom ops (``fsdp::all_gather_copy_in``)
are copies, hence the case-sensitive test.

Issue ops (torch 2.13, gloo; checked on real traces): the training thread records ``c10d::send`` /
``c10d::recv_`` / ``c10d::alltoall_base_`` ... with the call's scalar arguments in "Concrete Inputs"
(``['', '', '<peer>', '<tag>']`` for send / recv, the peer rank *in the group*; ``['', '', '',
'[out splits]', '[in splits]', ...]`` for ``alltoall_base_``, split sizes in rows of dim 0), then gloo
records the call as a ``gloo:<op>`` span: point-to-point on the same thread, created inside the c10d op
and ended when the caller's ``wait()`` returns; collectives on gloo's own worker threads, in the order
they were issued (one queue per process group). NCCL's ``record_param_comms`` carries "Src Rank" /
"Dst Rank" and "In split size" / "Out split size" itself.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Any, Sequence

import numpy as np

_MARKERS = ("nccl", "rccl", "hccl", "hcom_", "gloo", "record_param_comms", "c10d::", "c10d_functional")
# Framework spans whose own time is a wait for a collective (case-sensitive on purpose: see the docstring).
FRAMEWORK_COMM = re.compile(
    r"^FSDP::(all_gather|all_gather_copy_out|post_backward_reduce|post_backward_rs_wait|backward_prefetch)\b")
_FUNCTIONAL = re.compile(r"^_?c10d_functional(_autograd)?::", re.I)
# on gloo, reduce_scatter into one tensor runs as an all_reduce: its span is queued with the all_reduces
_GLOO_FAMILY = {"reduce_scatter": "all_reduce"}
P2P = ("send", "recv")
SLACK_NS = 2_000  # a span created at the very end of its c10d op (µs timestamps, rounded)


@functools.lru_cache(maxsize=8192)
def is_comm_name(name: str) -> bool:
    """Whether an event of this name is communication or a wait for it (see the module docstring)."""
    low = name.lower()
    return any(m in low for m in _MARKERS) or FRAMEWORK_COMM.match(name) is not None


def comm_mask(names: Sequence[Any]) -> np.ndarray:
    """``is_comm_name`` over a sequence of names (a dictionary's values)."""
    return np.fromiter((is_comm_name(str(n)) for n in names), bool, len(names))


def is_call_name(name: str) -> bool:
    """Communication events that are a collective call (or part of one), not a framework's span or a
    functional collective's wrapper (whose call shows as the c10d op inside it)."""
    return is_comm_name(name) and FRAMEWORK_COMM.match(name) is None and _FUNCTIONAL.match(name) is None


def family(op: str) -> str:
    """The gloo queue a call of ``op`` runs in (its op, but reduce_scatter runs as all_reduce)."""
    return _GLOO_FAMILY.get(op, op)


def concrete(a: Any) -> list[Any]:
    """The "Concrete Inputs" list of an event's args ([] when absent or odd)."""
    raw = bytes(getattr(a, "concrete_inputs", b"") or b"") if a is not None else b""
    if not raw:
        return []
    import orjson

    try:
        v = orjson.loads(raw)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return []
    return v if isinstance(v, list) else []


def _int(v: Any) -> int | None:
    try:
        i = int(str(v).strip())
    except (TypeError, ValueError, OverflowError):
        return None
    return i if 0 <= i < (1 << 31) else None


def int_list(v: Any) -> list[int] | None:
    """"[166, 462, 209, 187]" (or a list) -> [166, 462, 209, 187]; [] for "[]"; None when not a list of ints."""
    if isinstance(v, str):
        s = v.strip()
        if not (s.startswith("[") and s.endswith("]")):
            return None
        parts = [p for p in s[1:-1].replace(" ", "").split(",") if p]
        v = parts
    if not isinstance(v, list) or len(v) > 1 << 16:
        return None
    out = [_int(x) for x in v]
    return None if any(x is None for x in out) else out  # type: ignore[return-value]


def local_peer(name: str, a: Any) -> int | None:
    """The peer of a point-to-point call, as a rank of its group: "Dst Rank" / "Src Rank"
    (record_param_comms) or the third "Concrete Inputs" of ``c10d::send`` / ``c10d::recv_``."""
    if a is None:
        return None
    for v in (a.dst_rank, a.src_rank):
        if v is not None and _int(v) is not None:
            return _int(v)
    if name.startswith("c10d::"):
        ci = concrete(a)
        return _int(ci[2]) if len(ci) > 2 else None
    return None


def _dims(a: Any) -> list[Any]:
    import orjson

    raw = bytes(a.input_dims) if a is not None and bytes(a.input_dims) else b""
    try:
        d = orjson.loads(raw) if raw else []
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return []
    return d if isinstance(d, list) else []


def _row_elems(shape: Any) -> int | None:
    """Elements of one row (dim 0) of a shape [n, a, b] -> a*b; None when not a shape."""
    if not (isinstance(shape, list) and shape and all(isinstance(x, int) and x >= 0 for x in shape)):
        return None
    return math.prod(shape[1:]) if len(shape) > 1 else 1


EVEN = "="  # split_out of an all_to_all whose split sizes were empty (even), until the group's size is known


def splits(name: str, a: Any, width: int) -> tuple[list[int], list[int]] | str:
    """Bytes sent to and received from each member of the group by one all_to_all call (group order);
    ``EVEN`` when the call gave no split sizes (an even split); ([], []) when the trace does not say."""
    if a is None or width <= 0:
        return [], []
    ci = concrete(a)
    if name.startswith("c10d::alltoall_base") and len(ci) > 4 and ci[3] == "[]" and ci[4] == "[]":
        return EVEN
    if a.in_split is not None or a.out_split is not None:  # record_param_comms (NCCL)
        ins, outs = int_list(a.in_split) or [], int_list(a.out_split) or []
        n_in, n_out = _int(a.in_nelems), _int(a.out_nelems)
        row_in = n_in // sum(ins) if ins and n_in is not None and sum(ins) else 0
        row_out = n_out // sum(outs) if outs and n_out is not None and sum(outs) else 0
        return [s * row_in * width for s in ins] if row_in else [], [s * row_out * width for s in outs] if row_out else []
    dims = _dims(a)
    if name.startswith("c10d::alltoall_base") and len(ci) > 4 and len(dims) > 1:
        outs, ins = int_list(ci[3]) or [], int_list(ci[4]) or []
        ro, ri = _row_elems(dims[0]), _row_elems(dims[1])
        return ([s * ri * width for s in ins] if ri is not None else [],
                [s * ro * width for s in outs] if ro is not None else [])
    if name.startswith("c10d::alltoall_") and len(dims) > 1 and all(isinstance(d, list) for d in dims[:2]):
        per = [[math.prod(t) if isinstance(t, list) and all(isinstance(x, int) for x in t) else -1
                for t in d] for d in dims[:2]]
        if all(x >= 0 for d in per for x in d):
            return [x * width for x in per[1]], [x * width for x in per[0]]
    return [], []


def tensor_sizes(a: Any) -> frozenset[int]:
    """Element counts of the tensors among an op's arguments ("Input Dims": shapes, or lists of shapes)."""
    out = set()
    for d in _dims(a):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            out.add(math.prod(d))
        elif isinstance(d, list) and d and isinstance(d[0], list) and all(isinstance(x, int) for x in d[0]):
            out.add(math.prod(d[0]))
    return frozenset(out)


LOOKAHEAD = 64  # issue ops a call may skip to find one of its size (another group's calls queued first)


def fifo_links(call_ts: np.ndarray, call_key: Sequence[str], issue_ts: np.ndarray, issue_key: Sequence[str],
               call_n: Sequence[int] | None = None, issue_n: Sequence[frozenset[int]] | None = None) -> np.ndarray:
    """For each call, the index of the issue op it came from (-1: none): per key, the oldest unused issue op
    that started before it and has a tensor of the call's size (gloo runs each group's collectives in issue
    order, on the group's own threads: groups interleave, so a call skips other groups' issue ops whose
    sizes differ; ``call_n`` -1 / empty ``issue_n``: size unknown, any fits)."""
    out = np.full(len(call_ts), -1, dtype=np.int64)
    issues: dict[str, list[int]] = {}
    for j in np.argsort(issue_ts, kind="stable").tolist():
        issues.setdefault(issue_key[j], []).append(j)
    used: set[int] = set()
    for i in np.argsort(call_ts, kind="stable").tolist():
        n = call_n[i] if call_n is not None else -1
        tried = 0
        for j in issues.get(call_key[i], ()):
            if j in used:
                continue
            if issue_ts[j] > call_ts[i] or tried >= LOOKAHEAD:
                break
            tried += 1
            sizes = issue_n[j] if issue_n is not None else frozenset()
            if n < 0 or not sizes or n in sizes:
                out[i] = j
                used.add(j)
                break
    return out


def same_thread_links(call_ts: np.ndarray, call_tid: np.ndarray, call_key: Sequence[str], issue_ts: np.ndarray,
                      issue_end: np.ndarray, issue_tid: np.ndarray, issue_key: Sequence[str]) -> np.ndarray:
    """For each call, the issue op of the same key on the same thread whose span holds the call's start
    (point-to-point: gloo creates the span inside the c10d op); -1 when none."""
    out = np.full(len(call_ts), -1, dtype=np.int64)
    by: dict[tuple[int, str], list[int]] = {}
    for j in np.lexsort((issue_ts, issue_tid)).tolist():
        by.setdefault((int(issue_tid[j]), issue_key[j]), []).append(j)
    cand = {k: np.asarray(v, dtype=np.int64) for k, v in by.items()}
    for i in range(len(call_ts)):
        js = cand.get((int(call_tid[i]), call_key[i]))
        if js is None:
            continue
        k = int(np.searchsorted(issue_ts[js], call_ts[i], side="right")) - 1
        if k >= 0 and issue_end[js[k]] + SLACK_NS >= call_ts[i]:
            out[i] = js[k]
    return out


def global_peer(local: int | None, pg_ranks: str) -> int:
    """A group rank -> the global rank (the group's member list; the rank itself when the list is absent)."""
    if local is None:
        return -1
    members = [p for p in pg_ranks.split(",") if p] if pg_ranks else []
    if not members:
        return local
    return int(members[local]) if local < len(members) and members[local].lstrip("-").isdigit() else -1


def as_text(xs: list[int]) -> str:
    return ",".join(map(str, xs))


# A group's description that names a pipeline: DeviceMesh's "mesh_pp", Megatron's "PIPELINE_MODEL_PARALLEL_GROUP".
_PIPE_DESC = re.compile(r"(^|[^a-z])(pp|pipe\w*)([^a-z]|$)")


def p2p_group(cfg: list[dict[str, Any]], layout: Any, rank: int | None) -> list[int] | None:
    """The members of the group this rank's sends and receives go through, where the trace does not say (gloo
    without the recorder names only the peer's rank in the group). Among this rank's proper sub-groups
    (``cfg``: pg_config), the one whose description names a pipeline (``pp``, ``pipeline``) when exactly one does;
    else the layout's pipeline group, when ``cfg`` lists it: with ``layout["pp"]`` = P over a world of W ranks, pp
    outermost (torch's DeviceMesh ("pp", "dp"), Megatron), stage s holds ranks s * W / P .. (s + 1) * W / P - 1,
    and rank r's pipeline is {s * W / P + r mod W / P}. None: the world, or unknown."""
    if rank is None or not cfg:
        return None
    world = max(len(g["ranks"]) for g in cfg)
    mine = [g for g in cfg if rank in g["ranks"] and 1 < len(g["ranks"]) < world]
    named = [g for g in mine if _PIPE_DESC.search(str(g.get("pg_desc") or g.get("desc") or "").lower())]
    if len(named) == 1:
        return list(named[0]["ranks"])
    try:
        pp = int((layout or {}).get("pp") or 0)
    except (TypeError, ValueError, AttributeError):
        return None
    if pp < 2 or world % pp or world == pp:
        return None
    per = world // pp
    want = [s * per + rank % per for s in range(pp)]
    return want if any(sorted(g["ranks"]) == want for g in mine) else None


def list_groups(groups: list[list[int]], limit: int = 4) -> str:
    """"[0, 1, 2, 3], [0, 2], [0, 1]" (the first ``limit``)."""
    shown = "; ".join(str(g if len(g) <= 8 else g[:8] + ["..."]) for g in groups[:limit])
    return shown + (f"; {len(groups) - limit} more" if len(groups) > limit else "")
