"""Where sweep points run: in this process, in local worker processes, or on a Dask distributed cluster.

All three take a picklable function and a list of payloads and yield ``Outcome``s as tasks finish, in
completion order; callers restore the grid's order. A task whose worker dies (a crash, the OOM killer, a
lost Dask worker) comes back as an outcome with an error rather than an exception, so the points finished
around it are still recorded.

Local worker processes start with ``forkserver`` rather than ``fork``: the parent may hold threads (the
progress bar's monitor, a Dask client) and forking a threaded process can deadlock a child.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from sim.kernel.worker_processes import refuse_while_starting, worker_died
from sim.sweep.point import describe_error

EXECUTORS = ("local", "dask")


@dataclass(frozen=True)
class Outcome:
    """One finished task: its position in the payload list, and its result or why there is none."""

    index: int
    result: Any = None
    error: str | None = None


def default_workers() -> int:
    """The cores this process may use (respecting CPU affinity, as in a container or under taskset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_tasks(fn: Callable[[Any], Any], payloads: Sequence[Any], *, workers: int = 1, executor: str = "local",
              scheduler: str | None = None) -> Iterator[Outcome]:
    """Run ``fn`` on every payload; ``workers=1`` with the local executor runs in this process."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if scheduler is not None and executor != "dask":
        raise ValueError("a scheduler address is only used with the dask executor (--executor dask)")
    if not payloads:
        return iter(())
    if executor == "dask":
        return _run_dask(fn, payloads, workers, scheduler)
    if min(workers, len(payloads)) == 1:  # a pool of one only adds start-up time
        return _run_inline(fn, payloads)
    return _run_processes(fn, payloads, workers)


def _run_inline(fn: Callable[[Any], Any], payloads: Sequence[Any]) -> Iterator[Outcome]:
    for i, payload in enumerate(payloads):
        try:
            yield Outcome(i, fn(payload))
        except Exception as exc:
            yield Outcome(i, error=describe_error(exc))


def _run_processes(fn: Callable[[Any], Any], payloads: Sequence[Any], workers: int) -> Iterator[Outcome]:
    refuse_while_starting(f"a sweep with workers={workers}")
    context = multiprocessing.get_context("forkserver")
    # The fork server imports the simulator once and every worker forks from it with the import done,
    # instead of each worker importing numpy, pandas and the simulator itself (a second each on a busy
    # machine). It only applies when the fork server first starts; a module that fails to import is skipped.
    context.set_forkserver_preload(["__main__", "sim.kernel.runner", "sim.sweep.point"])
    pool = ProcessPoolExecutor(max_workers=min(workers, len(payloads)), mp_context=context)
    finished = False
    try:
        pending = {pool.submit(fn, payload): i for i, payload in enumerate(payloads)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=pending.__getitem__):
                i = pending.pop(future)
                try:
                    yield Outcome(i, future.result())
                except BrokenProcessPool as exc:  # the worker died under this task
                    yield Outcome(i, error=describe_error(worker_died(f"a sweep with workers={workers}", exc)))
                except Exception as exc:
                    yield Outcome(i, error=describe_error(exc))
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _stop_now(pool)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Interrupted: end the workers rather than let them finish the points already queued to them (each
    worker holds one more than it runs), so Ctrl-C returns in a moment, not after a point's time."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def _import_dask() -> tuple[Any, Any, Any]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise RuntimeError("the dask executor needs dask.distributed: pip install 'kvsim[dist]' "
                           "(or pip install 'dask[distributed]')") from exc
    return Client, LocalCluster, as_completed


def _run_dask(fn: Callable[[Any], Any], payloads: Sequence[Any], workers: int,
              scheduler: str | None) -> Iterator[Outcome]:
    """Without a scheduler address, start a private LocalCluster of ``workers`` single-threaded processes.

    Workers of a remote cluster must have the same kvsim installed: the function travels by reference.
    """
    Client, LocalCluster, as_completed = _import_dask()
    cluster = None
    if scheduler is None:
        import dask

        # Dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536, which keeps long-lived workers'
        # memory low but makes the simulator's many small allocations about 10% slower; a private cluster
        # that lives for one sweep of short points is better off with glibc's default.
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout=30)
        except Exception as exc:
            raise RuntimeError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
    futures: list[Any] = []  # bound before the try: the finally reads it even if map itself fails
    try:
        futures = client.map(fn, list(payloads), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            i = index[future.key]
            try:
                yield Outcome(i, future.result())
            except Exception as exc:  # a task whose worker was lost, or a failure in fn itself
                yield Outcome(i, error=describe_error(exc))
            future.release()
        futures = []
    finally:
        if futures:
            client.cancel(futures)
        client.close()
        if cluster is not None:
            cluster.close()
