"""A minimal, vectorized encoder of Perfetto's ``Trace`` protobuf (TrackEvent subset).

No protobuf runtime is needed: the few messages used are written by hand from Perfetto's
``protos/perfetto/trace/trace_packet.proto`` (field numbers below). Slice and counter packets are
encoded for all events at once with NumPy (varints as byte matrices, rows concatenated by
scatter), so encoding costs no Python loop per event.

Messages and fields used:
  Trace.packet=1; TracePacket: timestamp=8, trusted_packet_sequence_id=10, track_event=11,
  interned_data=12, sequence_flags=13, track_descriptor=60; TrackDescriptor: uuid=1, name=2,
  process=3, thread=4, parent_uuid=5, counter=8; ProcessDescriptor: pid=1, process_name=6;
  ThreadDescriptor: pid=1, tid=2, thread_name=5; CounterDescriptor: unit=3 (2 = count, 3 = bytes);
  TrackEvent: type=9 (1 begin, 2 end, 4 counter), name_iid=10, track_uuid=11, counter_value=30,
  double_counter_value=44 (fixed64),
  flow_ids=47 (fixed64), terminating_flow_ids=48 (fixed64); InternedData.event_names=2;
  EventName: iid=1, name=2.
"""
from __future__ import annotations

import numpy as np

SEQ = 1
SEQ_CLEARED, SEQ_NEEDS = 1, 2
TYPE_BEGIN, TYPE_END, TYPE_COUNTER = 1, 2, 4

Piece = tuple[np.ndarray, np.ndarray]  # (n × width uint8 matrix, n lengths)


# ---- scalar encoding (descriptors, interned data: a few hundred messages at most) ----

def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (negative int64 as two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def f_varint(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def f_bytes(field: int, data: bytes | str) -> bytes:
    b = data.encode("utf-8") if isinstance(data, str) else data
    return varint((field << 3) | 2) + varint(len(b)) + b


def packet(body: bytes) -> bytes:
    """One ``Trace.packet`` entry."""
    return f_bytes(1, body)


def process_track(uuid: int, pid: int, name: str) -> bytes:
    proc = f_varint(1, pid) + f_bytes(6, name)
    return packet(f_bytes(60, f_varint(1, uuid) + f_bytes(3, proc)))


def thread_track(uuid: int, parent: int, pid: int, tid: int, name: str) -> bytes:
    th = f_varint(1, pid) + f_varint(2, tid) + f_bytes(5, name)
    return packet(f_bytes(60, f_varint(1, uuid) + f_varint(5, parent) + f_bytes(4, th)))


def counter_track(uuid: int, parent: int, name: str, unit: int = 3) -> bytes:
    """A counter track; ``unit``: CounterDescriptor.Unit (0 unspecified, 2 count, 3 bytes)."""
    desc = f_varint(3, unit) if unit else b""
    return packet(f_bytes(60, f_varint(1, uuid) + f_varint(5, parent) + f_bytes(2, name) + f_bytes(8, desc)))


def interned_names(names: list[str]) -> bytes:
    """The first packet of the sequence: clears incremental state and interns event names (iid = index + 1)."""
    data = b"".join(f_bytes(2, f_varint(1, i + 1) + f_bytes(2, s)) for i, s in enumerate(names))
    return packet(f_varint(10, SEQ) + f_varint(13, SEQ_CLEARED) + f_bytes(12, data))


# ---- vectorized encoding (one row per event) ----

def v_varint(v: np.ndarray) -> Piece:
    """Varints of a uint64 column as a (n × 10) byte matrix and per-row lengths."""
    v = np.asarray(v).astype(np.uint64)
    lens = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        lens += v >= np.uint64(1) << np.uint64(7 * k)
    shifts = np.arange(10, dtype=np.uint64) * np.uint64(7)
    groups = ((v[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    cont = np.arange(10)[None, :] < (lens[:, None] - 1)
    return groups | (cont.astype(np.uint8) << 7), lens


def v_const(data: bytes, n: int, present: np.ndarray | None = None) -> Piece:
    """The same bytes on every row (a tag), or only on rows where ``present``."""
    m = np.broadcast_to(np.frombuffer(data, dtype=np.uint8), (n, len(data)))
    lens = np.full(n, len(data), dtype=np.int64)
    return m, (lens if present is None else np.where(present, lens, 0))


def v_fixed64(v: np.ndarray, present: np.ndarray) -> Piece:
    m = np.asarray(v).astype("<u8").view(np.uint8).reshape(-1, 8)
    return m, np.where(present, 8, 0).astype(np.int64)


def v_field_varint(field: int, v: np.ndarray, present: np.ndarray | None = None) -> list[Piece]:
    tag_m, tag_l = v_const(varint(field << 3), len(v), present)
    m, lens = v_varint(v)
    return [(tag_m, tag_l), (m, lens if present is None else np.where(present, lens, 0))]


def rows_length(pieces: list[Piece]) -> np.ndarray:
    return np.sum([p[1] for p in pieces], axis=0)


def concat_rows(pieces: list[Piece]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the pieces of every row, rows one after another: (bytes, row lengths)."""
    total = rows_length(pieces)
    starts = np.concatenate(([0], np.cumsum(total)[:-1]))
    out = np.zeros(int(total.sum()), dtype=np.uint8)
    off = starts.copy()
    for m, lens in pieces:
        w = m.shape[1]
        mask = np.arange(w)[None, :] < lens[:, None]
        dest = off[:, None] + np.arange(w)[None, :]
        out[dest[mask]] = np.broadcast_to(m, (len(lens), w))[mask]
        off = off + lens
    return out, total


def as_piece(data: np.ndarray, lens: np.ndarray) -> Piece:
    """Rows of a concatenated buffer back as a (n × max_len) matrix piece."""
    w = int(lens.max(initial=0))
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    idx = starts[:, None] + np.arange(w)[None, :]
    mask = np.arange(w)[None, :] < lens[:, None]
    m = np.zeros((len(lens), w), dtype=np.uint8)
    m[mask] = data[idx[mask]]
    return m, lens


def nested(field: int, inner: list[Piece]) -> list[Piece]:
    """A length-delimited field whose rows are the concatenation of ``inner``."""
    data, lens = concat_rows(inner)
    tag = v_const(varint((field << 3) | 2), len(lens))
    return [tag, v_varint(lens), as_piece(data, lens)]


CHUNK = 65536


def track_events(ts: np.ndarray, typ: np.ndarray, track: np.ndarray, name_iid: np.ndarray,
                 flow: np.ndarray, flow_end: np.ndarray, counter: np.ndarray,
                 dcounter: np.ndarray | None = None) -> bytes:
    """Encoded ``Trace.packet`` entries, one per row. ``flow`` < 0: no flow; ``name_iid`` 0: none;
    rows of type COUNTER carry ``counter`` as counter_value, or ``dcounter`` (where not NaN) as
    double_counter_value (field 44). Encoded in chunks to bound memory."""
    dc = np.full(len(ts), np.nan) if dcounter is None else np.asarray(dcounter, dtype=np.float64)
    cols = (ts, typ, track, name_iid, flow, flow_end, counter, dc)
    return b"".join(_track_events(*(c[i:i + CHUNK] for c in cols)) for i in range(0, len(ts), CHUNK))


def _track_events(ts: np.ndarray, typ: np.ndarray, track: np.ndarray, name_iid: np.ndarray,
                  flow: np.ndarray, flow_end: np.ndarray, counter: np.ndarray, dcounter: np.ndarray) -> bytes:
    n = len(ts)
    if n == 0:
        return b""
    is_slice = typ != TYPE_COUNTER
    has_flow = flow >= 0
    ev = (v_field_varint(9, typ) + v_field_varint(11, track) + v_field_varint(10, name_iid, name_iid > 0)
          + [v_const(varint((47 << 3) | 1), n, has_flow & ~flow_end), v_fixed64(flow, has_flow & ~flow_end),
             v_const(varint((48 << 3) | 1), n, has_flow & flow_end), v_fixed64(flow, has_flow & flow_end)]
          + v_field_varint(30, counter, ~is_slice & np.isnan(dcounter))
          + [v_const(varint((44 << 3) | 1), n, ~is_slice & ~np.isnan(dcounter)),
             v_fixed64(np.nan_to_num(dcounter).view(np.uint64), ~is_slice & ~np.isnan(dcounter))])
    pkt = (v_field_varint(8, ts) + v_field_varint(10, np.full(n, SEQ)) + v_field_varint(13, np.full(n, SEQ_NEEDS))
           + nested(11, ev))
    data, _ = concat_rows(nested(1, pkt))
    return data.tobytes()
