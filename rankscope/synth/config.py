"""Configuration of a synthetic run: layout, process groups and injected faults.

Everything here is plain, picklable data so that a process pool can rebuild the same
program from it. Parsers turn CLI strings (``3:compute:1.3``, ``0-1:3.0``) into these
dataclasses and raise :class:`~rankscope.errors.RankscopeError` with one clear line.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from rankscope.errors import RankscopeError


class StragglerKind(str, Enum):
    """What is slow on a straggling rank."""

    COMPUTE = "compute"  # GPU kernels run longer (thermal throttling, bad GPU)
    DATA = "data"  # the data loader takes longer at the start of each step
    HOST = "host"  # CPU ops (Python / dispatcher / launches) run longer
    COMM = "comm"  # every transfer this rank takes part in is slower (bad NIC)


@dataclass(frozen=True)
class Straggler:
    """One slow rank: ``rank`` slowed by ``factor`` in ``kind``."""

    rank: int
    kind: StragglerKind
    factor: float

    @classmethod
    def parse(cls, text: str) -> Straggler:
        """Parse ``RANK:KIND:FACTOR``, e.g. ``3:compute:1.3``."""
        parts = text.split(":")
        kinds = "|".join(k.value for k in StragglerKind)
        if len(parts) != 3:
            raise RankscopeError(f"--straggler {text!r}: expected RANK:KIND:FACTOR with KIND in {kinds}")
        try:
            return cls(int(parts[0]), StragglerKind(parts[1]), float(parts[2]))
        except ValueError:
            raise RankscopeError(
                f"--straggler {text!r}: expected RANK:KIND:FACTOR, e.g. 3:compute:1.3 (KIND in {kinds})"
            ) from None


@dataclass(frozen=True)
class SlowLink:
    """Transfers inflated by ``factor``: on every group holding both ranks of ``pair``,
    or on the process group named ``group``."""

    factor: float
    pair: tuple[int, int] | None = None
    group: str | None = None

    @classmethod
    def parse(cls, text: str) -> SlowLink:
        """Parse ``A-B:FACTOR`` (a rank pair) or ``pg:NAME:FACTOR`` (a process group name)."""
        try:
            if text.startswith("pg:"):
                _, name, factor = text.split(":")
                return cls(float(factor), group=name)
            pair, factor = text.split(":")
            a, b = pair.split("-")
            return cls(float(factor), pair=(int(a), int(b)))
        except ValueError:
            raise RankscopeError(
                f"--slow-link {text!r}: expected A-B:FACTOR (e.g. 0-1:3.0) or pg:NAME:FACTOR (e.g. pg:1:2.0)"
            ) from None


@dataclass(frozen=True)
class ClockSkew:
    """A rank's clock: ``local = true + offset_ns + drift_ppm * 1e-6 * (true - t0)``."""

    rank: int
    offset_ns: int
    drift_ppm: float = 0.0

    @classmethod
    def parse(cls, text: str) -> ClockSkew:
        """Parse ``RANK:OFFSET_S[:PPM]``, e.g. ``3:-0.25`` or ``3:0.1:20``."""
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError
            ppm = float(parts[2]) if len(parts) == 3 else 0.0
            return cls(int(parts[0]), round(float(parts[1]) * 1e9), ppm)
        except ValueError:
            raise RankscopeError(f"--skew {text!r}: expected RANK:OFFSET_SECONDS[:DRIFT_PPM], e.g. 3:-0.25:10") from None


@dataclass(frozen=True)
class ProcessGroup:
    """A process group as torch names it in ``distributedInfo.pg_config``."""

    name: str
    desc: str
    kind: str  # "world", "tp" or "dp"
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class SynthConfig:
    """All knobs of a synthetic run. See ``rankscope synth --help`` for their meaning."""

    ranks: int = 8
    steps: int = 5
    ops_per_step: int = 200
    tp: int | None = None
    gpus_per_host: int = 8
    seed: int = 0
    first_step: int = 3
    stragglers: tuple[Straggler, ...] = ()
    slow_links: tuple[SlowLink, ...] = ()
    clock_skew_s: float = 0.0
    clock_drift_ppm: float = 0.0
    skews: tuple[ClockSkew, ...] = ()
    gzip_level: int = 1
    run_id: str | None = None

    @property
    def tp_size(self) -> int:
        """Tensor-parallel degree: explicit, else 2 when the world size is even, else 1."""
        if self.tp is not None:
            return self.tp
        return 2 if self.ranks % 2 == 0 and self.ranks > 1 else 1

    @property
    def dp_size(self) -> int:
        """Data-parallel degree (ranks // tp)."""
        return self.ranks // self.tp_size

    @property
    def layers(self) -> int:
        """Transformer-like layers per step: each gives ~10 compute ops (fwd + bwd)."""
        return max(1, round((self.ops_per_step - 6) / 10))

    def validate(self) -> None:
        """Raise RankscopeError on an impossible combination."""
        if self.ranks < 1 or self.steps < 1 or self.ops_per_step < 1:
            raise RankscopeError("synth: --ranks, --steps and --ops-per-step must be >= 1")
        if self.tp_size < 1 or self.ranks % self.tp_size:
            raise RankscopeError(f"synth: --tp {self.tp_size} does not divide --ranks {self.ranks}")
        for s in self.stragglers:
            if not 0 <= s.rank < self.ranks or s.factor <= 0:
                raise RankscopeError(f"synth: straggler rank {s.rank} outside 0..{self.ranks - 1} or factor <= 0")
        for link in self.slow_links:
            if link.pair and not all(0 <= r < self.ranks for r in link.pair):
                raise RankscopeError(f"synth: slow link {link.pair} names a rank outside 0..{self.ranks - 1}")
            if link.group is not None and link.group not in {g.name for g in self.process_groups()}:
                names = ", ".join(g.name for g in self.process_groups())
                raise RankscopeError(f"synth: slow link on unknown process group {link.group!r} (known: {names})")
        for sk in self.skews:
            if not 0 <= sk.rank < self.ranks:
                raise RankscopeError(f"synth: --skew rank {sk.rank} outside 0..{self.ranks - 1}")

    def process_groups(self) -> list[ProcessGroup]:
        """World group "0", then one tp group per dp index, then one dp group per tp index.

        Names follow torch's counter naming: every rank calls ``new_group`` for every
        group in the same order, so the names agree across ranks.
        """
        tp, dp = self.tp_size, self.dp_size
        groups = [ProcessGroup("0", "default_pg", "world", tuple(range(self.ranks)))]
        if tp > 1:
            for d in range(dp):
                groups.append(ProcessGroup(str(len(groups)), "mesh_tp", "tp", tuple(range(d * tp, d * tp + tp))))
        if dp > 1 and tp > 1:
            for t in range(tp):
                groups.append(ProcessGroup(str(len(groups)), "mesh_dp", "dp", tuple(range(t, self.ranks, tp))))
        return groups

    def groups_of(self, rank: int) -> dict[str, ProcessGroup]:
        """The groups ``rank`` belongs to, by kind ("world", "tp", "dp").

        With tp == 1 the data-parallel group is the world group itself.
        """
        out = {g.kind: g for g in self.process_groups() if rank in g.ranks}
        out.setdefault("tp", ProcessGroup("", "", "tp", (rank,)))
        out.setdefault("dp", out["world"])
        return out

    def layout(self) -> dict[str, int]:
        """The parallel layout as written in run.json."""
        return {"dp": self.dp_size, "tp": self.tp_size, "pp": 1}

    def to_json(self) -> dict[str, Any]:
        """JSON-able form, written into synth_truth.json."""
        d = asdict(self)
        d["stragglers"] = [{"rank": s.rank, "kind": s.kind.value, "factor": s.factor} for s in self.stragglers]
        d["tp"], d["dp"], d["layers"] = self.tp_size, self.dp_size, self.layers
        return d
