"""Clock alignment across ranks: explicit per-rank offsets and drift (``alignment``) from the clock anchors and
matched collectives, solved by weighted least squares on the graph of pairs (``edgesolve``)."""
