"""Read-only local web UI over a directory of runs (``rankscope serve``)."""
