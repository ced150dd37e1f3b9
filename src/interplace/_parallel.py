"""Independent tasks in spawned worker processes, and a limit on BLAS threads; every layer may
use it, like ``interplace.errors``."""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

__all__ = ["one_blas_thread", "spawn_map"]

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
    is raised here (the first in ``tasks`` order), after the pool has shut down; the tasks
    not yet started when it is seen are cancelled (those running finish first).

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
        except BaseException as exc:
            for f in futures:  # no more work for results that will not be returned
                f.cancel()
            if not isinstance(exc, BrokenProcessPool):
                raise
            raise RuntimeError(
                f"a worker process of {min(workers, len(tasks))} ended abruptly: a script "
                "that asks for workers must guard its top level with "
                "'if __name__ == \"__main__\":' (each spawned worker imports it), and a "
                "worker can be killed for memory; with workers=1 everything runs in this "
                "process"
            ) from None


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with numpy's BLAS (OpenBLAS, MKL...) on one thread, as before after it.

    For numpy work on small matrices in a loop (the completion's SVDs of at most a few hundred
    jobs a side), where a second BLAS thread gains nothing alone (Lucid's second stage: 5.4-6.2
    s either way, the same numbers to the bit) and costs everything beside another process:
    OpenBLAS threads wait for work by spinning, so two processes doing this at once on two
    cores, each with two BLAS threads, did not finish a stage within 100 s that takes 9-13 s
    each on one thread. torch's own threads are set where it runs
    (:func:`torch.set_num_threads`).

    >>> import numpy as np
    >>> with one_blas_thread():
    ...     s = np.linalg.svd(np.eye(3), compute_uv=False)
    >>> s.tolist()
    [1.0, 1.0, 1.0]
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
