"""``interplace._parallel.spawn_map``: order, progress callbacks and errors, serial and spawned."""

from __future__ import annotations

import pytest

from interplace._parallel import spawn_map


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
