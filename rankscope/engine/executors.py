"""Where per-rank ingest runs: in this process, a local process pool, or a Dask distributed cluster.

Every backend maps the same picklable function (``ingest``) over the same picklable ``RankTask``s
and returns one small result per rank (a ``RankInfo`` summary or a ``TraceError``), never raw events:
the workers parse the traces and write the Parquet cache themselves. Progress counts tasks as they
complete; results are returned in task order, so every backend gives the same run (duplicate
ranks keep the same "first" file).

Dask (optional extra ``rankscope[dask]``): ``dask="local"`` starts a ``LocalCluster`` of worker
processes for this call (``jobs`` workers, one thread each: the parsers hold the GIL), any other
value is the address of a running scheduler (``tcp://host:8786``). A task whose worker dies is
rescheduled on another worker by the scheduler (``distributed.scheduler.allowed-failures``), so a
killed worker costs time, not ranks. The workers must see the run and the cache directory at the
same paths as the client (one machine, or a shared file system). Asked for Dask, the work runs on Dask
or the call fails with one line (no scheduler, no workers): never a silent fall back to the local pool.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
from typing import Any, Callable, Iterator, Sequence

from rankscope.errors import RankscopeError

Progress = Callable[[int, int], None]
# how long a scheduler with no worker yet is waited for (an adaptive cluster scaling up) before the call fails
WAIT_WORKERS_S = 60.0


def run_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], *, jobs: int, dask: str | None = None,
              progress: Progress | None = None) -> list[Any]:
    """``fn(task)`` for every task on the chosen backend, in task order."""
    if dask:
        it = _dask(fn, tasks, dask, jobs)
    elif jobs <= 1 or len(tasks) <= 1:
        it = ((k, fn(t)) for k, t in enumerate(tasks))
    else:
        it = _pool(fn, tasks, jobs)
    out: list[Any] = [None] * len(tasks)
    for done, (k, res) in enumerate(it, 1):
        out[k] = res
        if progress:
            progress(done, len(tasks))
    return out


def _pool(fn: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> Iterator[tuple[int, Any]]:
    from concurrent.futures import ProcessPoolExecutor, as_completed  # multiprocessing only where a pool runs

    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        futures = {pool.submit(fn, t): k for k, t in enumerate(tasks)}
        for f in as_completed(futures):
            yield futures[f], f.result()


_LOCAL: list[Any] = []  # (cluster, client) of this process's LocalCluster, started on first use


@contextlib.contextmanager
def dask_client(address: str, jobs: int) -> Iterator[Any]:
    """A ``distributed.Client``: this process's LocalCluster for ``"local"`` (started once, for the
    ingest and the per-rank analysis pass alike, closed at exit), else the given scheduler."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise RankscopeError("--dask needs Dask distributed: pip install 'rankscope[dask]'") from exc
    if address == "local":
        if not _LOCAL:
            # Dask logs every worker and connection at INFO; rankscope's own lines are what the user reads.
            if not logging.getLogger().isEnabledFor(logging.DEBUG):
                logging.getLogger("distributed").setLevel(logging.ERROR)
            cluster = LocalCluster(n_workers=max(1, min(jobs, 8)), threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=":0", silence_logs=logging.ERROR)
            # ":0": the scheduler's HTTP server (health, and the dashboard when bokeh is there) on a
            # free port of loopback; with None it still takes 8787 and warns when that is in use.
            _LOCAL.extend((cluster, Client(cluster)))
            atexit.register(close_local)
        yield _LOCAL[1]
        return
    try:
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise RankscopeError(f"no Dask scheduler answered at {address} ({exc}); start one with "
                             "`dask scheduler` or use --dask local") from exc
    with client:
        yield client


def close_local() -> None:
    """Stop this process's LocalCluster, if one was started."""
    if _LOCAL:
        cluster, client = _LOCAL
        _LOCAL.clear()
        client.close()
        cluster.close()


def _dask(fn: Callable[[Any], Any], tasks: Sequence[Any], address: str, jobs: int) -> Iterator[tuple[int, Any]]:
    from distributed import as_completed as dask_completed

    with dask_client(address, jobs) as client:
        _have_workers(client, address)
        threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()) or 1
        # Chunks of ranks, ~8 per worker thread: one task per rank costs the scheduler ~ms each and
        # made a 1,024-rank analysis 1.8x slower than the local pool on the same cores; 8 per
        # thread still balances uneven ranks and loses little to a killed worker.
        size = max(1, -(-len(tasks) // (8 * threads)))
        chunks = [(fn, list(range(k, min(k + size, len(tasks)))), list(tasks[k:k + size]))
                  for k in range(0, len(tasks), size)]
        # pure=False: a rank is ingested once per call even if two tasks look alike; the cache
        # (keyed by the files' sizes, mtimes and first bytes) makes a repeat cheap anyway.
        futures = client.map(_chunk, chunks, pure=False, retries=1)
        for f in dask_completed(futures):
            yield from f.result()


def _have_workers(client: Any, address: str) -> None:
    """Wait up to WAIT_WORKERS_S for a worker; a scheduler without any is an error (the tasks would wait forever)."""
    if client.scheduler_info()["workers"]:
        return
    try:
        client.wait_for_workers(1, timeout=WAIT_WORKERS_S)
    except TimeoutError as exc:  # distributed's WorkerStartTimeoutError is one
        raise RankscopeError(f"the Dask scheduler at {address} has no workers (waited {WAIT_WORKERS_S:g} s): start "
                             f"some with `dask worker {address}`, or use --dask local, or leave --dask out for the "
                             "local process pool") from exc


def _chunk(args: tuple[Callable[[Any], Any], list[int], list[Any]]) -> list[tuple[int, Any]]:
    """One Dask task: ``fn`` over a few consecutive tasks (module level: pickled by reference)."""
    fn, index, items = args
    return [(k, fn(t)) for k, t in zip(index, items)]
