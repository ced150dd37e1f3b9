"""``interplace._parallel``: ``spawn_map``'s order, progress callbacks and errors, serial and
spawned; ``one_blas_thread``'s limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interplace._parallel import one_blas_thread, spawn_map


@pytest.mark.parametrize("workers", [0, 1, 2, 5])
def test_results_keep_the_order_of_the_tasks_and_done_counts_each(workers: int) -> None:
    calls: list[None] = []
    tasks = [-5, 3, -1, 0, -8]
    # Builtins pickle by name, so a spawned worker needs nothing of this module.
    assert spawn_map(abs, tasks, workers, done=lambda: calls.append(None)) == [5, 3, 1, 0, 8]
    assert len(calls) == len(tasks)


def test_no_tasks_and_one_task() -> None:
    assert spawn_map(abs, [], 2) == []
    assert spawn_map(abs, [-2], 2) == [2]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_task_raises_its_own_exception(workers: int) -> None:
    with pytest.raises(ValueError, match="invalid literal"):
        spawn_map(int, ["1", "x", "3"], workers)


def _touch_or_fail(path: str) -> None:
    """Fail at once on ``"fail"``; else take a tenth of a second, then create ``path``."""
    if path == "fail":
        raise ValueError("the first task fails")
    time.sleep(0.1)
    Path(path).touch()


def test_a_failing_task_cancels_the_tasks_not_yet_started(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"{k}") for k in range(30)]
    with pytest.raises(ValueError, match="the first task fails"):
        spawn_map(_touch_or_fail, ["fail", *paths], 2)
    # Run to the end, the thirty would take three seconds on the one worker left; the pool
    # stops within a few of them (those already handed to a worker are not recalled).
    assert len(list(tmp_path.iterdir())) < len(paths)


def test_a_worker_that_dies_is_named_not_a_bare_broken_pool() -> None:
    # os._exit pickles by name and ends the worker at once, as a kill for memory would.
    with pytest.raises(RuntimeError, match="a worker process of 2 ended abruptly"):
        spawn_map(os._exit, [3, 3], 2)


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path) -> None:
    # Each spawned worker imports the script and, unguarded, runs its spawn_map again, which
    # Python refuses in a worker still starting: the caller must be told what to change.
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from interplace._parallel import spawn_map\nprint(spawn_map(abs, [-1, -2], 2))\n"
    )
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert run.returncode != 0
    # The caller's error ends its traceback (above it, the workers' own tracebacks);
    # multiprocessing's resource tracker may add a warning after it (semaphores of the
    # workers that died starting), and nothing else.
    lines = run.stderr.strip().splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("RuntimeError:"))
    error = lines[last]
    assert error.startswith("RuntimeError: a worker process of 2 ended abruptly"), run.stderr
    assert "if __name__ == \"__main__\":" in error
    after = lines[last + 1:]
    assert all("resource_tracker" in line or "warnings.warn" in line for line in after), after
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "from interplace._parallel import spawn_map\n"
        "if __name__ == \"__main__\":\n    print(spawn_map(abs, [-1, -2], 2))\n"
    )
    ok = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True,
                        timeout=300, cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.strip() == "[1, 2]"


def test_one_blas_thread_limits_blas_inside_and_restores_it_after() -> None:
    # The stage's SVDs run on one BLAS thread (two processes with spinning OpenBLAS threads
    # each stall on two cores); whatever numpy's BLAS had before comes back after.
    import numpy as np
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]

    np.linalg.svd(np.eye(4))  # numpy's BLAS is loaded
    before = blas_threads()
    assert before, "no BLAS library found under numpy"
    with one_blas_thread():
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before
