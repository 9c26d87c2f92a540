"""Worker processes re-import the script that started them: a one-line error where a script asks for workers
at its top level.

Why: kvsim's worker processes (a fleet's replicas, `run_simulation(workers=N)`; a sweep's points) start from a
fork server, and each imports the calling script again, as Python's ``spawn`` does. A script that calls
``run_simulation(..., workers=2)`` at its top level, outside ``if __name__ == "__main__":``, then calls it
again inside every worker while that worker starts; Python prints a page of text from each worker and the
caller sees only a broken process pool. These two checks say what happened and what to change.
"""

from __future__ import annotations

import multiprocessing

MAIN_GUARD = ('each worker process imports the calling script again, so a script that asks for workers must '
              'make that call under `if __name__ == "__main__":`')


def refuse_while_starting(what: str) -> None:
    """Raise a one-line error when this process is a worker still importing its parent's script (the script
    called ``what`` at its top level). Python's own check (``multiprocessing.spawn``) reads the same flag."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(f"{what} was called while a worker process was starting: {MAIN_GUARD}")


def worker_died(what: str, exc: BaseException) -> RuntimeError:
    """The error for a pool whose worker died (``BrokenProcessPool``): the likely causes, the main guard
    first (the worker's own error, if any, is above on stderr)."""
    why = str(exc).rstrip(".")
    return RuntimeError(f"a worker process of {what} died ({why}). If a script started it: {MAIN_GUARD}. "
                        "Otherwise the worker may have run out of memory; workers=1 runs in this process")
