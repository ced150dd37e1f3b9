"""``pack``: best-fit bin packing, blind to interference.

Each new job (gangs first) goes to the feasible GPU with the fewest free slots (ties: the
lowest index); a gang to the machine with the fewest free slots that fits it, on its fullest
GPUs. It frees whole GPUs and machines for later jobs, and co-locates as much as it can.
Reserved slots (jobs the model cannot see) are not free. Complexity :math:`O(n g)`.
"""

from __future__ import annotations

from interplace.placement._problem import Problem, State

__all__ = ["pack"]


def pack(problem: Problem, *, seed: int = 0) -> State:
    """Best-fit packing (deterministic)."""
    del seed
    st = problem.empty_state()
    cap = problem.max_per_gpu
    for i in problem.order():
        n = problem.jobs[i].gpus
        if n == 1:
            options = problem.hosts(st, i)
            if options:
                g = min(options, key=lambda g: (cap - problem.taken(st, g), g))
                problem.assign(st, i, (g,))
            continue
        best = problem.one_machine_gang(
            st, i,
            gpu_key=lambda g: (cap - problem.taken(st, g), g),
            machine_key=lambda idx, _: sum(cap - problem.taken(st, g) for g in idx),
        )
        if best is None and n > problem.machine_size:
            whole = problem.gang_candidates(st, i, limit=1)
            best = whole[0] if whole else None
        if best is not None:
            problem.assign(st, i, best)
    return st
