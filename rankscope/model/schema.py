"""Arrow schemas of the per-rank tables (the source of truth; see docs/contract.md)."""
from __future__ import annotations


import enum
import functools
import re

import pyarrow as pa

FORMAT_VERSION = 1


class Kind(str, enum.Enum):
    """Normalized event category."""

    CPU_OP = "cpu_op"
    USER_ANNOTATION = "user_annotation"
    GPU_USER_ANNOTATION = "gpu_user_annotation"
    KERNEL = "kernel"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    RUNTIME = "runtime"
    PYTHON = "python_function"
    OTHER = "other"


# Kineto category (current and legacy schema) -> Kind.
CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP, "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_USER_ANNOTATION,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY, "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET, "memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME, "cuda_driver": Kind.RUNTIME, "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME, "privateuse1_runtime": Kind.RUNTIME, "mtia_runtime": Kind.RUNTIME,
    "python_function": Kind.PYTHON,
    # torch_npu's task queue (trace_view.json): "enqueue" on the op's thread, "dequeue" on the thread
    # that launches the kernels; host runtime work, like cudaLaunchKernel
    "enqueue": Kind.RUNTIME, "dequeue": Kind.RUNTIME,
}
# An Enqueue and its Dequeue share a ``correlation`` from here up (``readers/ascend/flows.queue_links``): above any
# launch link's id (one per task), so that no host op meets a device op by one
QUEUE_IDS = 1 << 40

DEVICE_KINDS = (Kind.KERNEL.value, Kind.MEMCPY.value, Kind.MEMSET.value)

_dict = pa.dictionary(pa.int32(), pa.string())

EVENTS = pa.schema([
    ("name", _dict), ("cat", _dict), ("kind", _dict),
    ("ts", pa.int64()), ("dur", pa.int64()),
    ("pid", pa.int64()), ("tid", pa.int64()),
    ("stream", pa.int64()), ("device", pa.int32()),
    ("correlation", pa.int64()), ("external_id", pa.int64()),
    ("depth", pa.int16()), ("is_comm", pa.bool_()),
    ("input_dims", _dict),
    # memcpy / memset: the bytes moved and Kineto's "memory bandwidth (GB/s)" (-1 elsewhere);
    # cuda_profiler_range (CUPTI range profiler): its counters as one JSON object ("" elsewhere)
    ("bytes", pa.int64()), ("bandwidth", pa.float64()), ("counters", _dict),
])
# What a reader that does not know a column of EVENTS writes there (one value per event).
EVENT_FILL: dict[str, object] = {"bytes": -1, "bandwidth": -1.0, "counters": ""}

COLLECTIVES = pa.schema([
    ("op", _dict), ("name", _dict),
    ("ts", pa.int64()), ("dur", pa.int64()),
    ("dev_ts", pa.int64()), ("dev_dur", pa.int64()),
    ("pg_name", _dict), ("pg_ranks", _dict), ("group_size", pa.int32()),
    ("seq", pa.int64()),
    ("nelems_in", pa.int64()), ("nelems_out", pa.int64()), ("dtype", _dict),
    ("bytes_in", pa.int64()), ("bytes_out", pa.int64()),
    ("external_id", pa.int64()),
    # point-to-point: the other side's global rank (-1: not p2p, or unknown); when the training thread
    # issued the call (gloo runs collectives on its own threads; -1: unknown); all_to_all: bytes sent to /
    # received from each member of the group, in group order ("166,462,209,187"; "": even or unknown)
    ("peer", pa.int64()), ("issue_ts", pa.int64()), ("split_out", _dict), ("split_in", _dict),
])
# What a reader that does not know a column of COLLECTIVES writes there.
COLLECTIVE_FILL: dict[str, object] = {"peer": -1, "issue_ts": -1, "split_out": "", "split_in": ""}

MEMORY = pa.schema([
    ("ts", pa.int64()), ("device", pa.int32()), ("bytes_delta", pa.int64()),
    ("total_allocated", pa.int64()), ("total_reserved", pa.int64()),
])

STEPS = pa.schema([
    ("step", pa.int64()), ("ts", pa.int64()), ("end", pa.int64()),
    ("host_end", pa.int64()), ("complete", pa.bool_()),
])

# Ascend summary files as written by torch_npu (model/readers/ascend/files.py); empty for other readers.
COMM_OPS = pa.schema([("step", pa.string()), ("kind", pa.string()), ("name", pa.string()),
                      ("group", pa.string()), ("info", pa.string())])
COMM_LINKS = pa.schema([("step", pa.string()), ("kind", pa.string()), ("name", pa.string()),
                        ("group", pa.string()), ("link", pa.string()), ("info", pa.string())])
STEP_TIMES = pa.schema([("step", pa.string()), ("row", pa.string())])

TABLES: dict[str, pa.Schema] = {
    "events": EVENTS, "collectives": COLLECTIVES, "memory": MEMORY, "steps": STEPS,
    "comm_ops": COMM_OPS, "comm_links": COMM_LINKS, "step_times": STEP_TIMES,
}

# Normalized collective names from the many spellings (record_param_comms "Collective name",
# nccl:*/gloo:* op names, NCCL kernel names).
COLLECTIVE_OPS: dict[str, str] = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_coalesced": "all_gather", "allgather_base": "all_gather",
    "reduce_scatter_base": "reduce_scatter",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_all_single": "all_to_all", "alltoallv": "all_to_all",
    "send": "send", "recv": "recv", "recvanysource": "recv", "sendrecv": "send", "receive": "recv",
    "batchsendrecv": "send",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter",
}

DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "float64": 8, "double": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "int64": 8, "long": 8, "int8": 1, "uint8": 1, "byte": 1, "char": 1,
    "bool": 1, "short": 2, "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8,
    # as torch's profiler writes "Input type" (C++ type names, lower-cased here)
    "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "c10::half": 2, "c10::bfloat16": 2,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}


def empty(name: str) -> pa.Table:
    """An empty table with the schema of ``name``."""
    return TABLES[name].empty_table()


_OP_RE = re.compile(r"^(?:nccl|gloo|hccl|rccl|c10d)(?:[:_]+)(.*)$", re.I)


@functools.lru_cache(maxsize=4096)
def normalize_op(name: str) -> str:
    """'allreduce', 'nccl:all_reduce', 'gloo:all_reduce' -> 'all_reduce'."""
    m = _OP_RE.match(name)
    key = (m.group(1) if m else name).lower().strip("_")
    return COLLECTIVE_OPS.get(key, COLLECTIVE_OPS.get(key.replace("_", ""), "other"))
