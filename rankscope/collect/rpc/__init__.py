"""RPC profiling (the collection side): switch and patches (``state``), the callee's runner
(``callee``), clock offsets (``offset``), call records (``calls``), the standalone profile
(``session``), the Node ID table (``table``), Chrome export (``chrome``), run files (``runfiles``).
The public face is :mod:`rankscope.rpc`."""
