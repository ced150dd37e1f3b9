"""Independent tasks in spawned worker processes; every layer may use it, like
``interplace.errors``."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

__all__ = ["spawn_map"]

T = TypeVar("T")
R = TypeVar("R")


def spawn_map(
    func: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    *,
    done: Callable[[], None] | None = None,
) -> list[R]:
    """``[func(t) for t in tasks]``, in ``min(workers, len(tasks))`` worker processes.

    The workers are *spawned* (a fresh interpreter each; forking a process that runs torch's
    threads is unsafe), so ``func`` and each task must be picklable: ``func`` a module-level
    function. With one worker or fewer, or one task, everything runs in this process. The
    results come back in the order of ``tasks`` whatever order the tasks finish in; ``done``
    (a progress bar's update, say) is called once as each task finishes. A task's exception
    is raised here (the first in ``tasks`` order), after the pool has shut down.

    A script that calls this with ``workers > 1`` must guard its own top level with ``if
    __name__ == "__main__":`` (Python's rule for spawned processes): each worker imports the
    script, and without the guard it runs the script's own call again and dies. A worker
    that dies so (or is killed, say for memory) raises :class:`RuntimeError` saying so, not
    the pool's bare ``BrokenProcessPool``.

    >>> spawn_map(abs, [-3, 1, -2], workers=2)
    [3, 1, 2]
    >>> spawn_map(abs, [-3, 1, -2], workers=1)
    [3, 1, 2]
    """
    if workers <= 1 or len(tasks) <= 1:
        out = []
        for t in tasks:
            out.append(func(t))
            if done is not None:
                done()
        return out
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx) as pool:
        futures: list[Future[R]] = [pool.submit(func, t) for t in tasks]
        if done is not None:
            callback = done
            for f in futures:
                f.add_done_callback(lambda _: callback())
        try:
            return [f.result() for f in futures]
        except BrokenProcessPool:
            raise RuntimeError(
                f"a worker process of {min(workers, len(tasks))} ended abruptly: a script "
                "that asks for workers must guard its top level with "
                "'if __name__ == \"__main__\":' (each spawned worker imports it), and a "
                "worker can be killed for memory; with workers=1 everything runs in this "
                "process"
            ) from None
