"""Per-rank clocks: true time -> the rank's own epoch clock and Kineto's base/ts split."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.synth.config import SynthConfig

T0_EPOCH_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z: true clock 0 of every run


@dataclass(frozen=True)
class RankClock:
    """``local_epoch_ns = T0 + true + offset_ns + drift_ppm * 1e-6 * true``."""

    rank: int
    t0_ns: int
    offset_ns: int
    drift_ppm: float
    base_ns: int  # Kineto baseTimeNanoseconds (whole seconds, host uptime back)

    def local(self, true_ns: np.ndarray) -> np.ndarray:
        """Epoch ns on this rank's clock for true-clock ns (int64 arrays)."""
        drift = np.rint(true_ns * (self.drift_ppm * 1e-6)).astype(np.int64) if self.drift_ppm else 0
        return self.t0_ns + true_ns + self.offset_ns + drift

    def ts_us(self, true_ns: np.ndarray) -> np.ndarray:
        """Kineto ``ts`` (float us since ``baseTimeNanoseconds``) for true-clock ns."""
        return (self.local(true_ns) - self.base_ns) / 1000.0


def rank_clocks(cfg: SynthConfig) -> list[RankClock]:
    """One clock per rank: random offsets within +-clock_skew_s (rank 0 exact), explicit overrides."""
    rng = np.random.default_rng([cfg.seed, 11])
    n = cfg.ranks
    offsets = np.rint(rng.uniform(-cfg.clock_skew_s, cfg.clock_skew_s, n) * 1e9).astype(np.int64)
    drifts = rng.uniform(-cfg.clock_drift_ppm, cfg.clock_drift_ppm, n)
    offsets[0], drifts[0] = 0, 0.0
    explicit = {s.rank: s for s in cfg.skews}
    hosts = -(-n // cfg.gpus_per_host)
    uptime = np.random.default_rng([cfg.seed, 12]).integers(86_400, 60 * 86_400, hosts) * 1_000_000_000
    clocks = []
    for r in range(n):
        off, ppm = int(offsets[r]), float(drifts[r])
        if r in explicit:
            off, ppm = explicit[r].offset_ns, explicit[r].drift_ppm
        base = (T0_EPOCH_NS + off - int(uptime[r // cfg.gpus_per_host])) // 1_000_000_000 * 1_000_000_000
        clocks.append(RankClock(r, T0_EPOCH_NS, off, round(ppm, 6), base))
    return clocks
