"""RPC profiling (the collection side): switch and patches (``state``), the callee's runner
(``callee``), clock offsets (``offset``), call records (``calls``), the standalone profile
(``session``), the Node ID table (``table``), Chrome export (``chrome``), run files (``runfiles``).
The public face is :mod:`rankscope.rpc`.

The sending side (``calls``) uses the switch (``state``) and the callee's runner (``callee``); those two reach
it back only through ``state.connect``, wired here, so the modules import in one direction.
"""
from rankscope.collect.rpc import calls, state

state.connect(send=calls.send, send_remote=calls.send_remote, recorder=calls.Recorder)
