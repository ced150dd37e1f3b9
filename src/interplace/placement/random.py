"""``random``: each new job, in a seeded random order, on a uniformly random feasible slot.

The floor every other policy must clear. A gang takes a random feasible GPU set inside one
machine (or whole machines when it is larger than one). Complexity :math:`O(n g)` for
:math:`n` jobs and :math:`g` GPUs.
"""

from __future__ import annotations

from interplace.placement._problem import Problem, State

__all__ = ["random_policy"]


def random_policy(problem: Problem, *, seed: int = 0) -> State:
    """Random feasible placement (seeded)."""
    rng = problem.rng(seed)
    st = problem.empty_state()
    new = list(problem.new_instances())
    order = [new[k] for k in rng.permutation(len(new))]
    order.sort(key=lambda i: -problem.jobs[i].gpus)  # gangs first, or they rarely fit
    for i in order:
        n = problem.jobs[i].gpus
        options: list[tuple[int, ...]]
        if n == 1:
            options = [(g,) for g in problem.hosts(st, i)]
        else:
            options = []
            for idx in problem.machines.values():
                free = [g for g in idx if problem.can_host(st, i, g)]
                if len(free) >= n:
                    pick = rng.choice(len(free), size=n, replace=False)
                    options.append(tuple(sorted(free[k] for k in pick)))
            if not options and n > problem.machine_size:
                options = problem.gang_candidates(st, i)
        if options:
            problem.assign(st, i, options[int(rng.integers(len(options)))])
    return st
