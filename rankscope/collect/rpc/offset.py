"""Clock offset of a remote worker from one RPC's four timestamps (NTP's estimate, pure functions).

``t_send`` and ``t_done`` are read on the caller's clock, ``t_recv`` and ``t_reply`` on the callee's::

    offset = ((t_recv - t_send) + (t_reply - t_done)) / 2      # callee clock minus caller clock
    error  = ((t_done - t_send) - (t_reply - t_recv)) / 2      # half the round trip outside the callee

The true offset lies within ``offset ± error`` whenever the request and the reply each took a
non-negative time. A remote instant ``t`` is placed on the caller's clock at ``t - offset``; the
remote interval then lies inside the caller's span ``[t_send, t_done]`` (the estimate is clamped so
that it does when drift or rounding would push it out).

Example::

    >>> estimate(100, 1_150, 1_350, 400)    # callee clock 1000 ahead, 50 ns each way
    Estimate(offset_ns=1000, error_ns=50, remote_ns=200, network_ns=100)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """One call's offset (callee minus caller), its error bound, the callee's own time and the rest
    of the round trip (network, serialization and queueing, both ways)."""

    offset_ns: int
    error_ns: int
    remote_ns: int
    network_ns: int


def estimate(t_send: int, t_recv: int, t_reply: int, t_done: int) -> Estimate:
    """NTP offset of one call, bounded so that the callee's interval sits inside the caller's span."""
    round_trip = max(t_done - t_send, 0)
    remote = max(t_reply - t_recv, 0)
    if remote > round_trip:  # clocks running at different rates, or coarse timers: squeeze into the span
        remote = round_trip
    offset = ((t_recv - t_send) + (t_reply - t_done)) // 2
    # keep t_recv - offset >= t_send and t_recv + remote - offset <= t_done
    lo, hi = t_recv + remote - t_done, t_recv - t_send
    offset = min(max(offset, lo), hi)
    return Estimate(int(offset), int((round_trip - remote) // 2), int(remote), int(round_trip - remote))


def best(estimates: list[Estimate]) -> Estimate | None:
    """The estimate with the smallest error bound (NTP's minimum-delay filter), None for no calls."""
    return min(estimates, key=lambda e: e.error_ns) if estimates else None
