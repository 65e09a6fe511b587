"""Sanity bounds on numbers read from files, and tolerant readers of small JSON side files.

A number from a file never sizes an allocation or a loop unchecked: a world size of 10**9 must not
build a list of 10**9 expected ranks. Each bound says what is plausible for a real training job;
a value outside is dropped (the field, never the rank) with one line saying so.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The largest jobs run today have ~10**5 ranks; 2**20 leaves room and keeps any per-rank list small.
MAX_WORLD = 1 << 20
# Epoch nanoseconds before year 2100 (4.1e18); base times and timestamps above are corrupt.
MAX_EPOCH_NS = 4_102_444_800 * 10**9
# Clock offsets between hosts of one job: a day is already absurd (NTP keeps them within ms).
MAX_CLOCK_OFFSET_NS = 86_400 * 10**9


def world_size(v: Any, where: str, problems: list[str]) -> int | None:
    """A world size in 1..MAX_WORLD, else None (and a problem line)."""
    if v is None:
        return None
    if type(v) is int and 1 <= v <= MAX_WORLD:
        return v
    problems.append(f"{where}: world size {_short(v)} ignored (expected an integer 1..{MAX_WORLD})")
    return None


def rank(v: Any, where: str, problems: list[str]) -> int | None:
    if v is None:
        return None
    if type(v) is int and 0 <= v < MAX_WORLD:
        return v
    problems.append(f"{where}: rank {_short(v)} ignored (expected an integer 0..{MAX_WORLD - 1})")
    return None


def base_time(v: Any, where: str, problems: list[str]) -> int:
    if v is None or v == 0:
        return 0
    if type(v) is int and 0 < v < MAX_EPOCH_NS:
        return v
    problems.append(f"{where}: baseTimeNanoseconds {_short(v)} ignored (not a plausible epoch time); "
                    "timestamps kept as written")
    return 0


def clock_offset(v: Any, where: str, problems: list[str]) -> int | None:
    if v is None:
        return None
    if type(v) is int and abs(v) <= MAX_CLOCK_OFFSET_NS:
        return v
    problems.append(f"{where}: clock offset {_short(v)} ns ignored (expected an integer within a day)")
    return None


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def read_object(path: Path, problems: list[str]) -> dict[str, Any]:
    """A small JSON object file (run.json, meta.json, MANIFEST.json); {} with one problem line when it is
    unreadable, not JSON, too deeply nested or not an object. Never raises."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        problems.append(f"{path}: cannot read ({exc.strerror or exc})")
        return {}
    if len(text) > 64 << 20:
        problems.append(f"{path}: {len(text) / 1e6:.0f} MB is too large for this small file; ignored")
        return {}
    try:
        got = json.loads(text.decode("utf-8-sig", errors="replace"))
    except RecursionError:
        problems.append(f"{path}: JSON nested too deeply; ignored")
        return {}
    except ValueError as exc:
        problems.append(f"{path}: not valid JSON ({exc}); ignored")
        return {}
    if not isinstance(got, dict):
        problems.append(f"{path}: expected a JSON object, found {type(got).__name__}; ignored")
        return {}
    return got


def typed(d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: Path, problems: list[str]) -> Any:
    """``d[key]`` when of type ``kind``, else None with a problem line (absent keys are silent)."""
    v = d.get(key)
    if v is None or (isinstance(v, kind) and not (kind is int and isinstance(v, bool))):
        return v
    problems.append(f"{where}: field {key!r} has the wrong type ({type(v).__name__}); ignored")
    return None
