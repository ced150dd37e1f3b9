"""``spread``: load balancing, blind to interference.

Each new job (gangs first) goes to the feasible GPU with the fewest jobs, in the machine with
the fewest jobs (ties: the lowest index); a gang to the least loaded machine that fits it, on
its least loaded GPUs. It co-locates only when every GPU is busy. Reserved slots (jobs the
model cannot see) count as jobs. Complexity :math:`O(n g)`.
"""

from __future__ import annotations

from interplace.placement._problem import Problem, State

__all__ = ["spread"]


def spread(problem: Problem, *, seed: int = 0) -> State:
    """Least-loaded placement (deterministic)."""
    del seed
    st = problem.empty_state()

    for i in problem.order():
        n = problem.jobs[i].gpus
        if n == 1:
            options = problem.hosts(st, i)
            if options:
                machine_load = {  # once per job, not once per candidate GPU
                    m: sum(problem.taken(st, h) for h in idx) for m, idx in problem.machines.items()
                }
                of = problem.machine_of
                g = min(options, key=lambda g: (problem.taken(st, g), machine_load[of[g]], g))
                problem.assign(st, i, (g,))
            continue
        best = problem.one_machine_gang(
            st, i,
            gpu_key=lambda g: (problem.taken(st, g), g),
            machine_key=lambda idx, _: sum(problem.taken(st, g) for g in idx),
        )
        if best is None and n > problem.machine_size:
            whole = problem.gang_candidates(st, i, limit=1)
            best = whole[0] if whole else None
        if best is not None:
            problem.assign(st, i, best)
    return st
