"""Calls as people read them: ``all_reduce float32[1000]``, not ``all_reduce [[1000]] ['Float']``."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rankscope.analysis.hang.matching import Call
    from rankscope.model.readers.frdump import FrEntry, Shape

# c10d's scalar type names (what Flight Recorder writes) -> torch's dtype names
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128", "Float8_e4m3fn": "float8_e4m3fn",
           "Float8_e5m2": "float8_e5m2"}


def dtype(name: str) -> str:
    return _DTYPES.get(name, name)


def tensors(sizes: Shape, dtypes: tuple[str, ...]) -> str:
    """``((1000,),), ("Float",)`` -> ``float32[1000]``; several tensors joined by ``+``; none: ``""``."""
    out = []
    for i, s in enumerate(sizes):
        if not s and len(sizes) == 1 and not dtypes:
            continue  # a coalesced group's end marker: no tensor
        t = dtype(dtypes[i] if i < len(dtypes) else dtypes[0] if dtypes else "")
        out.append(f"{t}[{', '.join(str(d) for d in s)}]")
    return " + ".join(out)


def entry(e: FrEntry, out: bool = False) -> str:
    """``all_gather float32[1000] -> float32[3, 1000]`` (with ``out``), or ``all_gather float32[1000]``."""
    name = e.name or e.op
    ins = tensors(e.in_sizes, e.in_dtypes) if e.in_sizes else e.sizes if e.sizes not in ("None", "") else ""
    text = f"{name} {ins}".strip()
    if out and e.out_sizes:
        text += f" -> {tensors(e.out_sizes, e.out_dtypes)}"
    return text


def call(c: Call, out: bool = False) -> str:
    """One call; a coalesced block as ``coalesced(broadcast float32[4, 4], broadcast float32[4, 4])``."""
    if len(c.entries) == 1:
        return entry(c.head, out)
    body = [entry(e, out) for e in c.entries if (e.name or e.op) not in ("coalesced",)]
    return f"coalesced({', '.join(body)})"


def op_name(c: Call) -> str:
    """The op of a call: ``all_reduce``; a coalesced block: ``coalesced(_broadcast_oop x2)``."""
    if len(c.entries) == 1:
        return c.head.name or c.head.op
    names = [e.name or e.op for e in c.entries if (e.name or e.op) != "coalesced"]
    kinds = sorted(set(names), key=names.index)
    return "coalesced(" + ", ".join(f"{k} x{names.count(k)}" if names.count(k) > 1 else k for k in kinds) + ")"


def frame(frames: tuple[str, ...]) -> str:
    """The innermost frame of user code in a stack (innermost first): not torch's, not rankscope's recorder."""
    for f in frames:
        if not any(x in f for x in _LIBRARY):
            return _short(f)
    return _short(frames[0]) if frames else ""


_LIBRARY = ("/torch/", "\\torch\\", "c10d_logger", "/rankscope/collect/", "threading.py", "/contextlib.py")


def _short(f: str) -> str:
    """``/a/b/train.py:19 main`` -> ``train.py:19 main``."""
    path, _, rest = f.partition(":")
    return f"{path.rsplit('/', 1)[-1]}:{rest}" if rest else f
