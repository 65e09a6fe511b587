"""Print rankscope's version (and torch's, when installed)."""
from __future__ import annotations

import argparse
import importlib.util

HELP = "print versions"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from rankscope.version import __version__

    line = f"rankscope {__version__}"
    if importlib.util.find_spec("torch") is not None:
        from importlib.metadata import version

        line += f" (torch {version('torch')})"
    print(line)
    return 0
