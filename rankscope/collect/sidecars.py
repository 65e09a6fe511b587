"""What rides along with a ``rankscope.profile``: the collective recorder and RPC profiling.

:class:`rankscope.collect.profiler.profile` owns the step counter and the windows; these two
objects own the rest, so that the profiler calls ``start`` / ``window`` / ``dump`` / ``stop``
and nothing else. Both swallow their own failures: they may lose their data, never the job.

- :class:`CommsSidecar`: a :class:`rankscope.collect.comms.Recorder` whose dumps go to the run
  with the traces, and each window's collectives kept beside its trace
  (``ranks/<r>/window-NNNN.collectives.json.gz``). On by default for the window files (Flight Recorder
  costs ~4 µs per collective); dumps, SIGUSR1 and the watchdog only with ``comms=True`` /
  ``RANKSCOPE_COMMS``. meta.json says which recorder ran, or why none could.
- :class:`RpcSidecar`: while a window records, calls made with ``torch.distributed.rpc`` are
  profiled on the worker that runs them (:mod:`rankscope.rpc`); the calls are saved with the run.
"""
from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


# By default (comms not given, RANKSCOPE_COMMS unset) each window keeps the recorder's entries, so gloo's
# collectives get their group and sequence number; no dumps, no signal handler, no watchdog.
DEFAULT = {"watchdog_s": None, "at_exit": False, "on_signal": False, "default": True}


def comms_options(comms: bool | dict[str, Any] | None) -> dict[str, Any] | None:
    """``comms=True`` / ``{"watchdog_s": 300, "at_exit": True}`` / ``None`` (then RANKSCOPE_COMMS decides,
    else ``DEFAULT``) / ``False`` (off)."""
    from rankscope.collect import comms as _comms

    if comms is None:
        return _comms.from_env() or (None if os.environ.get("RANKSCOPE_COMMS", "").strip() else dict(DEFAULT))
    if comms is True:
        return {"watchdog_s": None, "at_exit": True}
    return dict(comms) if isinstance(comms, dict) and comms else None


OFF_WHY = ("Flight Recorder's ring must exist before the first collective (import rankscope before "
           "init_process_group, or TORCH_FR_BUFFER_SIZE=2000 in the job's environment), or the process group "
           "created with rankscope.comms.timed_backend()")


class CommsSidecar:
    """The collective recorder of one profile (off when ``opts`` is None)."""

    def __init__(self, opts: dict[str, Any] | None) -> None:
        self.opts = opts
        self.recorder: Any = None

    def start(self, collector: Any) -> None:
        """Start the recorder when asked; its dumps are spooled and uploaded with the run."""
        if not self.opts or collector is None:
            return
        from rankscope.collect import comms

        try:
            on = comms.recording()
            collector.extra["collectives_recorder"] = ("timed" if comms._timed() else "flight_recorder") if on else (
                "off: " + OFF_WHY)
            if not on:
                log.warning("rankscope: the collective recorder sees nothing, so gloo's collectives will carry no "
                            "process group or sequence number: %s", OFF_WHY)
                if self.opts.get("default"):
                    return
            out = os.path.join(collector.spool.dir, "comms-staging")
            self.recorder = comms.Recorder(out, watchdog_s=self.opts.get("watchdog_s"),
                                           on_signal=bool(self.opts.get("on_signal", True)),
                                           at_exit=bool(self.opts.get("at_exit", True)),
                                           on_dump=collector.add_comms)
            self.recorder.where = collector.run  # the watchdog's line names the run (`rankscope hang RUN`)
            self.recorder.start()
        except Exception:  # noqa: BLE001 - never the job
            log.warning("rankscope: the collective recorder could not start", exc_info=True)
            self.recorder = None

    def window(self, collector: Any, index: int, lo_ns: int, hi_ns: int) -> None:
        """Keep the recorder's entries of window ``index`` beside its trace (on the export thread)."""
        if self.recorder is None or collector is None:
            return

        def job() -> None:
            from rankscope.collect import comms

            data = comms.window_json_gz(lo_ns, hi_ns)
            if data is not None:
                collector.add_window_collectives(index, data)

        collector.exporter.call(job)

    def dump(self, collector: Any, reason: str) -> None:
        """A remote trigger asked for a dump (runs on the trigger thread, not the training one)."""
        if self.recorder is not None:
            self.recorder.dump(reason)
        elif collector is not None:
            collector.extra.setdefault("comms_dumps", []).append(
                {"reason": reason, "error": "the collective recorder is off (comms=True or RANKSCOPE_COMMS=1)"})

    def stop(self) -> None:
        """The exit dump (goes out with the run, before the uploads close), then the recorder stops."""
        rec, self.recorder = self.recorder, None
        if rec is None:
            return
        rec.stop()  # the watchdog thread first: its dumps (a request from another rank) are over
        if rec.at_exit:
            rec.dump("exit")  # `rankscope hang` reads "exit" as: this rank left


class RpcSidecar:
    """RPC profiling of one profile: patched in at start, on only while a window records."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.recorder: Any = None
        self.held = False
        self.calls: list[dict[str, Any]] = []

    def start(self, kw: dict[str, Any]) -> None:
        """Mark torch's profiler as ours in this process (a callee here starts no second one); patch RPC in."""
        from rankscope.collect.rpc import runfiles

        runfiles.hold(+1)
        self.held = True
        self.recorder = runfiles.start(kw) if self.on else None

    def follow(self, recording: bool) -> None:
        """Calls are profiled on their callee only while a window records here."""
        if self.recorder is not None:
            self.recorder.enabled = recording

    def stop(self, collector: Any) -> None:
        """Unpatch; the calls go to the run (``calls`` keeps them for a profile without ``run``)."""
        from rankscope.collect.rpc import runfiles

        if self.recorder is not None:
            rec, self.recorder = self.recorder, None
            doc = runfiles.stop(rec, collector)
            self.calls = doc["calls"] if doc else []
        if self.held:
            self.held = False
            runfiles.hold(-1)
