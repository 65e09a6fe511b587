"""Write a synthetic multi-rank run directory with known ground truth.

Example::

    from rankscope.synth import generate, Straggler
    run = generate("/tmp/run", ranks=8, steps=5, stragglers=["3:compute:1.3"], seed=1)
    # run/ranks/<r>/rank<r>.pt.trace.json.gz, run/run.json, run/synth_truth.json

Pass 1 (:func:`~rankscope.synth.simulate.simulate` over all ranks) resolves every collective
across its group; pass 2 re-simulates each rank alone from those results and writes its
files, one task per rank, optionally in a process pool (``jobs``).
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rankscope.errors import RankscopeError
from rankscope.synth.clock import T0_EPOCH_NS, rank_clocks
from rankscope.synth.config import ClockSkew, SlowLink, Straggler, SynthConfig
from rankscope.synth.emit import Emitter
from rankscope.synth.network import Network, Replay, group_factor
from rankscope.synth.program import Program, build_program
from rankscope.synth.rankinfo import RankIdentity, header, metadata_events
from rankscope.synth.simulate import SimResult, simulate

TORCH_VERSION = "2.5.1+cu124"


def generate(out: str | os.PathLike[str], *, ranks: int = 8, steps: int = 5, ops_per_step: int = 200,
             tp: int | None = None, seed: int = 0, stragglers: Iterable[Straggler | str] = (),
             slow_links: Iterable[SlowLink | str] = (), clock_skew_s: float = 0.0, clock_drift_ppm: float = 0.0,
             skews: Iterable[ClockSkew | str] = (), gpus_per_host: int = 8, first_step: int = 3,
             gzip_level: int = 1, jobs: int = 1, overwrite: bool = False) -> Path:
    """Generate a synthetic NCCL run of ``ranks`` ranks into ``out`` and return its path.

    Faults may be given as objects or in CLI syntax: stragglers ``"3:compute:1.3"``,
    slow links ``"0-1:3.0"`` / ``"pg:1:2.0"``, skews ``"3:-0.25[:ppm]"``. The same
    arguments always produce the same bytes. Ground truth goes to ``out/synth_truth.json``.
    """
    cfg = SynthConfig(
        ranks=ranks, steps=steps, ops_per_step=ops_per_step, tp=tp, gpus_per_host=gpus_per_host, seed=seed,
        first_step=first_step, gzip_level=gzip_level, clock_skew_s=clock_skew_s, clock_drift_ppm=clock_drift_ppm,
        stragglers=tuple(s if isinstance(s, Straggler) else Straggler.parse(s) for s in stragglers),
        slow_links=tuple(s if isinstance(s, SlowLink) else SlowLink.parse(s) for s in slow_links),
        skews=tuple(s if isinstance(s, ClockSkew) else ClockSkew.parse(s) for s in skews))
    return generate_config(out, cfg, jobs=jobs, overwrite=overwrite)


def generate_config(out: str | os.PathLike[str], cfg: SynthConfig, *, jobs: int = 1,
                    overwrite: bool = False) -> Path:
    """Like :func:`generate`, from a ready :class:`SynthConfig`."""
    cfg.validate()
    root = Path(out)
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise RankscopeError(f"synth: {root} is not empty; choose a new directory or pass --overwrite")
    root.mkdir(parents=True, exist_ok=True)
    prog = _program(cfg)
    net = Network(cfg, prog)
    res = simulate(cfg, prog, list(range(cfg.ranks)), net.resolve, keep=False)
    tasks = [(cfg, r, res.starts[:, :, r], res.ends[:, :, r], res.arrivals[:, :, r], str(root))
             for r in range(cfg.ranks)]
    if jobs > 1 and cfg.ranks > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            files = list(pool.map(_write_rank, *zip(*tasks), chunksize=max(1, cfg.ranks // (4 * jobs))))
    else:
        files = [_write_rank(*t) for t in tasks]
    _write_json(root / "run.json", _run_json(cfg))
    _write_json(root / "synth_truth.json", _truth(cfg, prog, res, files))
    return root


@functools.lru_cache(maxsize=4)
def _program(cfg: SynthConfig) -> Program:
    return build_program(cfg)


def run_id(cfg: SynthConfig) -> str:
    """Deterministic run id."""
    return cfg.run_id or f"synth-s{cfg.seed}-r{cfg.ranks}"


def _write_rank(cfg: SynthConfig, rank: int, starts: np.ndarray, ends: np.ndarray, arrivals: np.ndarray,
                root: str) -> dict[str, Any]:
    """Pass 2 for one rank: re-simulate, emit, write trace + meta.json + MANIFEST.json."""
    prog = _program(cfg)
    sim = simulate(cfg, prog, [rank], Replay(starts, ends).resolve, keep=True)
    if not np.array_equal(sim.arrivals[:, :, 0], arrivals):
        raise RuntimeError(f"synth: rank {rank} replay diverged from the joint simulation (bug)")
    ident = RankIdentity.make(cfg, rank)
    clock = rank_clocks(cfg)[rank]
    em = Emitter(cfg, prog, ident, clock)
    for s in range(cfg.steps):
        em.step(s, sim.steps[s], int(sim.step_end[s, 0]))
    t_first, t_last = int(sim.step_start[0, 0]) - 80_000, int(sim.step_end[-1, 0]) + 60_000
    span = clock.ts_us(np.array([t_first, t_last]))
    name = f"rank{rank}.pt.trace.json.gz"
    rank_dir = Path(root) / "ranks" / str(rank)
    rank_dir.mkdir(parents=True, exist_ok=True)
    trace_id = hashlib.blake2b(f"{cfg.seed}:{rank}".encode(), digest_size=16).hexdigest().upper()
    doc = header(cfg, ident, clock.base_ns, trace_id, f"/tmp/rankscope/{name}")
    doc["traceEvents"] = metadata_events(ident, float(span[0]), float(span[1])) + em.cpu + em.gpu
    raw = orjson.dumps(doc)
    blob = gzip.compress(raw, compresslevel=cfg.gzip_level, mtime=0)
    wall = clock.local(np.array([t_first, t_last]))
    meta = _meta_json(cfg, ident, name, int(wall[0]), int(wall[1]), clock.base_ns)
    meta_blob = orjson.dumps(meta, option=orjson.OPT_INDENT_2)
    _write_bytes(rank_dir / name, blob)
    _write_bytes(rank_dir / "meta.json", meta_blob)
    manifest = {"format": "rankscope.manifest/1", "rank": rank,
                "files": [{"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                          for p, b in ((name, blob), ("meta.json", meta_blob))]}
    _write_bytes(rank_dir / "MANIFEST.json", orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return {"rank": rank, "file": f"ranks/{rank}/{name}", "size": len(blob), "raw_size": len(raw),
            "events": len(doc["traceEvents"])}


def _write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _write_json(path: Path, obj: Any) -> None:
    _write_bytes(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2))


def _versions() -> dict[str, str]:
    from rankscope.version import __version__

    return {"rankscope": __version__, "torch": TORCH_VERSION}


def _groups_json(groups: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"name": g.name, "desc": g.desc, "ranks": list(g.ranks)} for g in groups]


def _meta_json(cfg: SynthConfig, ident: RankIdentity, name: str, start_wall: int, end_wall: int,
               base_ns: int) -> dict[str, Any]:
    groups = [g for g in cfg.process_groups() if ident.rank in g.ranks]
    return {"format": "rankscope.meta/1", "run_id": run_id(cfg), "rank": ident.rank, "local_rank": ident.local_rank,
            "world_size": cfg.ranks, "host": ident.host, "pid": ident.pid, "device": f"cuda:{ident.device}",
            "backend": "nccl", "process_groups": _groups_json(groups), "layout": cfg.layout(),
            "versions": _versions(),
            "clock": {"anchors": [{"when": "start", "wall_ns": start_wall, "mono_ns": start_wall - base_ns},
                                  {"when": "end", "wall_ns": end_wall, "mono_ns": end_wall - base_ns}],
                      "offset_to_rank0_ns": None, "offset_error_ns": None},
            "windows": [{"index": 0, "steps": [cfg.first_step + s for s in range(cfg.steps)], "file": name,
                         "start_wall_ns": start_wall, "end_wall_ns": end_wall}],
            "metadata": {"synthetic": True, "seed": cfg.seed}}


def _run_json(cfg: SynthConfig) -> dict[str, Any]:
    hosts = sorted({f"node-{r // cfg.gpus_per_host}" for r in range(cfg.ranks)}, key=lambda h: int(h[5:]))
    return {"format": "rankscope.run/1", "run_id": run_id(cfg), "world_size": cfg.ranks,
            "ranks_expected": list(range(cfg.ranks)), "created_ns": T0_EPOCH_NS, "hosts": hosts,
            "process_groups": _groups_json(cfg.process_groups()), "layout": cfg.layout(), "versions": _versions(),
            "synth": {"seed": cfg.seed, "truth": "synth_truth.json"}}


def _truth(cfg: SynthConfig, prog: Program, res: SimResult, files: list[dict[str, Any]]) -> dict[str, Any]:
    """Ground truth: injected faults, clocks, and per step x rank true-clock timings."""
    clocks = rank_clocks(cfg)
    per_pg: dict[str, int] = {}
    for g in cfg.process_groups():
        em = Emitter(cfg, prog, RankIdentity.make(cfg, g.ranks[0]), clocks[g.ranks[0]])
        per_pg[g.name] = sum(1 for m in em.coll_meta if m["pg"] == g.name)
    links = [{"pair": list(link.pair) if link.pair else None, "group": link.group, "factor": link.factor,
              "affected_groups": [g.name for g in cfg.process_groups() if group_factor(
                  SynthConfig(ranks=cfg.ranks, tp=cfg.tp, slow_links=(link,)), g) != 1.0]}
             for link in cfg.slow_links]
    def tab(a: np.ndarray) -> list[list[int]]:
        return a.tolist()
    return {"format": "rankscope.synth_truth/1", "run_id": run_id(cfg), "config": cfg.to_json(),
            "t0_epoch_ns": T0_EPOCH_NS, "time_base": "true clock ns since t0_epoch_ns; rows = steps, cols = ranks",
            "stragglers": [{"rank": s.rank, "kind": s.kind.value, "factor": s.factor} for s in cfg.stragglers],
            "slow_links": links,
            "clocks": [{"rank": c.rank, "offset_ns": c.offset_ns, "offset_to_rank0_ns": c.offset_ns - clocks[0].offset_ns,
                        "drift_ppm": c.drift_ppm, "base_time_ns": c.base_ns} for c in clocks],
            "process_groups": _groups_json(cfg.process_groups()), "collectives_per_step": per_pg,
            "steps": {"numbers": [cfg.first_step + s for s in range(cfg.steps)],
                      "start_ns": tab(res.step_start), "end_ns": tab(res.step_end),
                      "compute_ns": tab(res.compute_ns), "comm_ns": tab(res.comm_ns),
                      "wait_ns": tab(res.wait_ns), "host_ns": tab(res.host_ns)},
            "files": files}
