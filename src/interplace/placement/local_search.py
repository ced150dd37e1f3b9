r"""``local-search``: start from ``greedy``, then improve by moves and swaps until none helps.

Each pass visits the new jobs in a seeded random order; for each it scores every move of the
job to another class of GPUs (:meth:`Problem.single_candidates`; gangs: their candidate sets)
and every swap with a single-GPU new job on another GPU, all on the same memoised posterior
draws, and takes the best one if it raises the objective by more than ``1e-9``. It stops after
a pass that gains less than :data:`REL_TOL` of the objective, or after ``max_passes``.
Where a job's speed depends only on its GPU partner (``sum``, at most two per GPU, no
cross-GPU contention scored), swaps are scored in one vectorised expression per job, and each
pass ends with an exact re-matching of seeded windows of :data:`WINDOW` GPUs (a large
neighbourhood search; on one such window it is the exact optimum). Complexity per pass
:math:`O(n (c + n) a)` memo look-ups (:math:`c` candidate classes, :math:`a` affected
instances per move) plus :math:`O(g / w \cdot (2w)^3)` for the windows.
"""

from __future__ import annotations

import numpy as np

from interplace.placement._problem import _FULL, Key, Problem, State
from interplace.placement.greedy import greedy

__all__ = ["local_search"]

MAX_PASSES = 8
"""Passes over the jobs at most (each pass visits every new job once)."""

LARGE = 256
"""Above this many new jobs, one pass only: on 544 jobs (64 DGX A100) the first pass takes
99.7% of the gain of two (objective 462.5 -> 493.6 -> 494.9) and the second doubles the time."""

REL_TOL = 1e-3
"""A pass that raises the objective by less than this share of it is the last one (on 544
jobs the first pass gains 8.5%, the second 0.09%, later ones nothing)."""


def local_search(problem: Problem, *, seed: int = 0, max_passes: int | None = None) -> State:
    """Greedy, then best-improvement moves and swaps (seeded visiting order).

    ``max_passes`` defaults to :data:`MAX_PASSES`, or 1 above :data:`LARGE` new jobs.
    """
    st = greedy(problem, seed=seed)
    if max_passes is None:
        max_passes = MAX_PASSES if len(problem.new_instances()) <= LARGE else 1
    return improve(problem, st, seed=seed, max_passes=max_passes)


def improve(problem: Problem, st: State, *, seed: int = 0, max_passes: int = MAX_PASSES) -> State:
    """Local moves and swaps from ``st`` (modified in place and returned)."""
    rng = problem.rng(seed)
    new = [i for i in problem.new_instances()]
    pair = _PairTable.build(problem, st)
    for _ in range(max_passes):
        improved = False
        start = problem.value(st)
        for k in rng.permutation(len(new)):
            i = new[int(k)]
            where = st.where[i]
            best_moves: dict[int, tuple[int, ...] | None] | None = None
            best_gain = 0.0 if where is not None or problem.min_gain is None else problem.min_gain
            options: list[dict[int, tuple[int, ...] | None]] = []
            if where is None:
                options += [{i: gpus} for gpus in problem.candidates(st, i)]
            else:
                options += [{i: gpus} for gpus in problem.candidates(st, i) if gpus != where]
                if len(where) == 1:
                    fast = pair.best_swap(problem, st, i) if pair is not None else None
                    if fast is not None:
                        options += fast
                    else:
                        options += _swaps(problem, st, i)
            for moves, g in zip(options, problem.move_gains(st, options), strict=True):
                if g > best_gain + 1e-9:
                    best_moves, best_gain = moves, g
            if best_moves is not None:
                problem.apply(st, best_moves)
                improved = True
        # The exact re-matching makes small instances optimal; on large ones (one pass) its
        # windows of 8 random GPUs gain little (462.5 -> 467 of 494.9 on 544 jobs) for a
        # quarter of the pass's time, so it is left out there.
        small = len(new) <= LARGE
        if pair is not None and small and _rematch(problem, st, rng):
            improved = True
        if not improved or problem.value(st) - start < REL_TOL * abs(start):
            break
    return st


WINDOW = 8
"""GPUs per window of the exact re-matching step (16 jobs at most: a few ms each)."""


def _rematch(problem: Problem, st: State, rng: np.random.Generator) -> bool:
    """Large-neighbourhood step: re-solve windows of :data:`WINDOW` GPUs exactly.

    Where a job's speed depends only on its GPU partner, the best arrangement of the jobs of
    a few GPUs among those GPUs is a maximum-weight matching (:func:`.exact.pair_units`).
    GPUs that hold only new single-GPU jobs are shuffled (seeded) into windows and each window
    is re-matched; an instance of at most :data:`WINDOW` GPUs is one window, so this step
    alone makes local search exact there. Returns whether anything improved.
    """
    from interplace.placement.exact import pair_units

    eligible = [
        g for g, occ in enumerate(st.occ)
        if not problem.reserved[g]
        and all(k >= problem.n_running and problem.jobs[k].gpus == 1 for k in occ)
    ]
    order = [eligible[int(k)] for k in rng.permutation(len(eligible))]
    improved = False
    for w in range(0, len(order), WINDOW):
        gpus = sorted(order[w : w + WINDOW])
        pending = [
            i for i in problem.new_instances()
            if st.where[i] is None and problem.jobs[i].gpus == 1 and problem.min_gain is None
        ]
        here = [k for g in gpus for k in st.occ[g]]
        room = problem.max_per_gpu * len(gpus) - len(here)
        insts = sorted(here + pending[: max(room, 0)])
        if len(insts) < 2:
            continue
        units = pair_units(problem, st, insts, len(gpus))
        placed_now = sum(1 for k in insts if st.where[k] is not None)
        if sum(len(u) for u in units) < placed_now:
            continue
        moves: dict[int, tuple[int, ...] | None] = {k: None for k in insts}
        for g, unit in zip(gpus, units, strict=False):
            for k in unit:
                moves[k] = (g,)
        if all(st.where[k] == moves[k] for k in moves):
            continue
        if sum(len(u) for u in units) > placed_now or problem.move_gain(st, moves) > 1e-9:
            problem.apply(st, moves)
            improved = True
    return improved


def _swaps(problem: Problem, st: State, i: int) -> list[dict[int, tuple[int, ...] | None]]:
    """Swaps of single-GPU new job ``i`` with each single-GPU new job on another GPU."""
    where = st.where[i]
    assert where is not None
    gi = where[0]
    out: list[dict[int, tuple[int, ...] | None]] = []
    seen: set[tuple[object, ...]] = set()
    ti = problem.inst_type
    for j in problem.new_instances():
        wj = st.where[j]
        if j == i or wj is None or len(wj) != 1 or wj[0] == gi:
            continue
        gj = wj[0]
        # Without cross-GPU contention a swap's effect depends only on the types involved.
        sig: tuple[object, ...] = (
            (ti[j], tuple(sorted(ti[k] for k in st.occ[gj] if k != j)))
            if not problem.cross_gpu else (gj, ti[j])
        )
        if sig in seen:
            continue
        seen.add(sig)
        if not _fits(problem, st, i, gj, j) or not _fits(problem, st, j, gi, i):
            continue
        out.append({i: (gj,), j: (gi,)})
    return out


def _fits(problem: Problem, st: State, i: int, g: int, leaving: int) -> bool:
    """Whether ``i`` may take ``leaving``'s place on GPU ``g``."""
    others = [k for k in st.occ[g] if k != leaving]
    return all(problem.can_pair(i, k) for k in others)


class _PairTable:
    """Vectorised swap search where a job's speed depends only on its GPU partner's type.

    That holds for the ``sum`` objective with at most two jobs per GPU and no cross-GPU
    contention scored: then swapping single-GPU jobs ``i`` (partner ``p``) and ``j``
    (partner ``q``) changes the objective by

    .. math:: v(t_j|p) + v(p|t_j) + v(t_i|q) + v(q|t_i) - v(t_i|p) - v(p|t_i)
              - v(t_j|q) - v(q|t_j),

    with :math:`v(a|b)` the memoised mean speed of type :math:`a` next to :math:`b` (and
    alone when :math:`b` is nobody, whose own term is 0). All swaps of one job are scored in
    one numpy expression; the best is re-scored exactly before it is taken.
    """

    def __init__(self, speed: np.ndarray, allowed: np.ndarray) -> None:
        self.speed = speed  # (T + 1, T + 1): row/column T = nobody
        self.allowed = allowed  # (T + 1, T + 1) bool

    @classmethod
    def build(cls, problem: Problem, st: State) -> _PairTable | None:
        if problem.objective != "sum" or problem.cross_gpu or problem.max_per_gpu > 2:
            return None
        used = sorted({problem.inst_type[i] for i in range(len(problem.jobs))})
        n_types = len(problem.types)
        ok = problem._share_ok
        keys: list[Key] = [(a, ((b, _FULL),)) for a in used for b in used if ok(a, b)]
        keys += [(a, ()) for a in used]
        missing = [k for k in keys if k not in problem._memo]
        if missing:
            problem._answer(missing)
        speed = np.zeros((n_types + 1, n_types + 1))
        allowed = np.zeros((n_types + 1, n_types + 1), dtype=bool)
        for a in used:
            speed[a, n_types] = problem.mean(problem._memo[(a, ())])
            allowed[a, n_types] = allowed[n_types, a] = True
            for b in used:
                allowed[a, b] = ok(a, b)
                if allowed[a, b]:
                    speed[a, b] = problem.mean(problem._memo[(a, ((b, _FULL),))])
        allowed[n_types, n_types] = True
        return cls(speed, allowed)

    def best_swap(
        self, problem: Problem, st: State, i: int
    ) -> list[dict[int, tuple[int, ...] | None]] | None:
        """The best swap of ``i`` by the pair table (or [] if none gains), None if it
        does not apply to ``i`` (a gang or running job shares its GPU)."""
        nobody = len(problem.types)
        where = st.where[i]
        assert where is not None
        gi = where[0]
        p = _partner(problem, st, i, gi)
        if p is None:
            return None
        cand, partners, gpus = [], [], []
        for j in problem.new_instances():
            wj = st.where[j]
            if j == i or wj is None or len(wj) != 1 or wj[0] == gi:
                continue
            q = _partner(problem, st, j, wj[0])
            if q is None:
                continue
            cand.append(j)
            partners.append(q)
            gpus.append(wj[0])
        if not cand:
            return []
        t = problem.inst_type
        ti = t[i]
        tp = t[p] if p >= 0 else nobody
        tj = np.asarray([t[j] for j in cand])
        tq = np.asarray([t[q] if q >= 0 else nobody for q in partners])
        v, ok = self.speed, self.allowed
        before = v[ti, tp] + v[tp, ti] + v[tj, tq] + v[tq, tj]
        after = v[tj, tp] + v[tp, tj] + v[ti, tq] + v[tq, ti]
        gain = np.where(ok[tj, tp] & ok[ti, tq], after - before, -np.inf)
        k = int(np.argmax(gain))
        if not gain[k] > 1e-9:
            return []
        j = cand[k]
        return [{i: (gpus[k],), j: (gi,)}]


def _partner(problem: Problem, st: State, i: int, g: int) -> int | None:
    """``i``'s partner on GPU ``g``: -1 for nobody, None if it is a gang or running job."""
    others = [k for k in st.occ[g] if k != i]
    if not others:
        return -1
    k = others[0]
    if k < problem.n_running or problem.jobs[k].gpus != 1:
        return None
    return k
