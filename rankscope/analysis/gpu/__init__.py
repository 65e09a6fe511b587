"""GPU analyses at Holistic Trace Analysis's depth (HTA 0.5.0), each with rankscope's own definition
beside HTA's where they differ (docs/gpu.md). ``htaview`` turns one rank's events into the frame HTA
loads; the ``hta_*`` tables are computed on it and match HTA value by value (tests/hta_oracle.py)."""
