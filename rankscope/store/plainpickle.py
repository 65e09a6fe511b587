"""Pickles that hold plain data only (PyTorch Flight Recorder dumps): loading refuses every class, so a
dump read from shared storage can never run code. Used by the recorder (collect) and the reader (model)."""
from __future__ import annotations

import pickle
from typing import IO, Any


class PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a Flight Recorder dump holds plain data")


def load(fh: IO[bytes]) -> Any:
    """The plain data in ``fh`` (dicts, lists, strings, numbers); ``UnpicklingError`` on anything else."""
    return PlainUnpickler(fh).load()
