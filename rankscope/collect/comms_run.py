"""``python -m rankscope.collect.comms_run``: the recorder's no-code-change launcher, kept at its documented
name; it lives in :mod:`rankscope.collect.comms.run`."""
from __future__ import annotations

from rankscope.collect.comms.run import main

if __name__ == "__main__":
    main()
