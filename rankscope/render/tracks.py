"""Tracks of the merged timeline, shared by its two writers (Perfetto in ``timeline``, Chrome JSON in
``timeline_json``): which number is which track, and the name each track is shown under."""
from __future__ import annotations

DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_user_annotation")
STREAM_BASE = 1 << 30  # track of a device stream: STREAM_BASE + stream id
RPC_BASE = 1 << 29  # track of the events a remote worker ran for this rank's RPC calls: RPC_BASE + worker id


def track_label(t: int, remote: dict[int, str] | None = None) -> str:
    """A track's name: a device stream, a remote worker's lane (RPC), or a host thread."""
    if t >= STREAM_BASE:
        return f"stream {t - STREAM_BASE}"
    if t >= RPC_BASE:
        return (remote or {}).get(t, f"remote worker {t - RPC_BASE}")
    return f"thread {t}"


def coll_label(lane: int) -> str:
    """Name of a collectives lane (lane 0 keeps the plain name)."""
    return "collectives" if lane == 0 else f"collectives {lane + 1}"
