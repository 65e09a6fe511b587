"""Synthetic multi-rank Kineto traces with known ground truth (``rankscope synth``).

Example::

    from rankscope.synth import generate
    run = generate("/tmp/run", ranks=8, steps=5, ops_per_step=200,
                   stragglers=["3:compute:1.3"], slow_links=["0-1:3.0"], clock_skew_s=0.5, seed=1)

This package imports numpy and orjson; it is not imported by ``import rankscope``.
"""
from __future__ import annotations

from rankscope.synth.config import ClockSkew, SlowLink, Straggler, StragglerKind, SynthConfig
from rankscope.synth.generator import generate, generate_config

__all__ = ["ClockSkew", "SlowLink", "Straggler", "StragglerKind", "SynthConfig", "generate", "generate_config"]
