"""The ask/tell tuner and :func:`minimize` / :func:`maximize` for callables."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from interplace.errors import (
    InputError,
    check_count,
    check_seed,
    first_line,
    is_real,
    plain_number,
)
from interplace.placement.bo._space import Float, Int, Point, Space
from interplace.placement.bo._trials import Trial, TrialsFile

__all__ = ["Result", "Tuner", "maximize", "minimize"]

_SOBOL_MAX = 1 << 16  # Sobol draws tried for new feasible points before giving up
_GRID_LIMIT = 20_000  # a space of at most this many points is enumerated (_botorch's limit)


def _default_init(space: Space) -> int:
    return max(5, 2 * space.dim)


def _ask_seed(seed: int, issued: int) -> int:
    """The seed of the suggestion made after ``issued`` others (a pure function of both)."""
    return int(np.random.SeedSequence([seed, issued]).generate_state(1)[0])


def _value(value: object) -> tuple[float | None, str]:
    """A told value as (number or None, error)."""
    if value is None:
        return None, "no value"
    if isinstance(value, str):
        return None, first_line(Exception(value)) if value.strip() else "failed"
    value = plain_number(value)
    if not is_real(value, finite=False):
        raise InputError(f"a trial's value must be a number, None or an error message, not "
                         f"{value!r}")
    try:
        v = float(value)
    except OverflowError:  # an int past float's range
        v = math.inf if value > 0 else -math.inf
    if math.isnan(v):
        return None, "the objective is NaN"
    if not math.isfinite(v):
        return None, f"the objective is {v}"
    return v, ""


class Tuner:
    """Bayesian optimisation by ask/tell: :meth:`ask` for points, :meth:`tell` their values.

    ``maximize``: maximise (else minimise) the value; ``seed``: the only source of randomness
    (the initial design and every acquisition step); ``n_init``: points of the initial design
    (default ``max(5, 2 d)``); ``noisy``: the objective is noisy (always
    qLogNoisyExpectedImprovement, and points may be re-evaluated); ``budget``: the most trials
    :meth:`ask` hands out in all, finished and pending counted. See :mod:`interplace.placement.bo`
    for the method.

    >>> from interplace.placement.bo import Int, Space
    >>> t = Tuner(Space((Int("n", 0, 20),)), maximize=True, seed=0, n_init=3, budget=5)
    >>> for _ in range(5):
    ...     (p,) = t.ask()
    ...     _ = t.tell(p, -(p["n"] - 13) ** 2)
    >>> len(t.trials), t.ask()
    (5, [])
    """

    def __init__(self, space: Space, *, maximize: bool = False, seed: int = 0,
                 n_init: int | None = None, noisy: bool = False,
                 budget: int | None = None) -> None:
        if not isinstance(space, Space):
            raise InputError(f"space must be a Space, not {type(space).__name__}")
        check_seed(seed)
        if n_init is not None:
            check_count(n_init, "n_init")
        if budget is not None:
            check_count(budget, "budget", low=0)
        self.space = space
        self.maximize = bool(maximize)
        self.seed = seed
        self.n_init = _default_init(space) if n_init is None else n_init
        self.noisy = bool(noisy)
        self.budget = budget
        self._trials: list[Trial] = []
        self._pending: list[Point] = []
        self._grid: list[Point] | None = None
        self.notes: Counter[str] = Counter()
        """Acquisition functions used and BoTorch warnings handled, with counts."""

    # ------------------------------------------------------------------ state
    @classmethod
    def from_trials(cls, path: str | os.PathLike[str], space: Space, **kwargs: Any) -> Tuner:
        """A tuner that continues the trials file ``path`` (see :mod:`._trials`); keyword
        arguments as for :class:`Tuner`. A missing file is an empty history."""
        tuner = cls(space, **kwargs)
        for t in TrialsFile(path, space).read():
            tuner._trials.append(t)
        return tuner

    @property
    def trials(self) -> tuple[Trial, ...]:
        """The finished trials, in the order they were told."""
        return tuple(self._trials)

    @property
    def pending(self) -> tuple[Point, ...]:
        """Points asked and not told yet."""
        return tuple(dict(p) for p in self._pending)

    @property
    def remaining(self) -> int | None:
        """Trials :meth:`ask` may still hand out (None without a budget)."""
        if self.budget is None:
            return None
        return max(0, self.budget - len(self._trials) - len(self._pending))

    @property
    def best(self) -> Trial | None:
        """The best finished trial (the first of equals), None before the first success."""
        ok = [t for t in self._trials if t.value is not None]
        if not ok:
            return None
        sign = 1.0 if self.maximize else -1.0
        return max(ok, key=lambda t: sign * float(t.value))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ ask / tell
    def tell(self, params: Mapping[str, Any], value: object, error: str | None = None) -> Trial:
        """Record the outcome of ``params``: a number, or a failure (``None``, NaN, an
        infinity or an error message; ``error`` says why). Failed trials are kept in
        :attr:`trials` and out of the GP. A pending point with these params stops pending.
        """
        point = self.space.check(params)
        v, why = _value(value)
        if v is None and error:
            why = first_line(Exception(error))
        trial = Trial(point, v, why if v is None else "")
        key = self.space.key(point)
        for i, p in enumerate(self._pending):
            if self.space.key(p) == key:
                del self._pending[i]
                break
        self._trials.append(trial)
        return trial

    def ask(self, n: int = 1) -> list[Point]:
        """Up to ``n`` points to evaluate next (fewer only when the budget is short).

        The first ``n_init`` come from the seeded scrambled Sobol sequence (feasible points,
        no repeats); after that, and once two trials succeeded, the GP's acquisition picks
        them. Every point is inside the space and satisfies its constraints.
        """
        check_count(n, "n")
        if self.remaining is not None:
            n = min(n, self.remaining)
        out: list[Point] = []
        while len(out) < n:
            issued = len(self._trials) + len(self._pending)
            ok = sum(t.value is not None for t in self._trials)
            if issued < self.n_init or ok < 2:
                k = min(n - len(out), max(1, self.n_init - issued)) if ok >= 2 else n - len(out)
                pts = self._design(k)
            else:
                pts = self._model(n - len(out))
            self._pending += pts
            out += pts
        return [dict(p) for p in out]

    # ------------------------------------------------------------------ internals
    def _used(self, *, failed_too: bool = True) -> set[tuple[float, ...]]:
        keys = {self.space.key(t.params) for t in self._trials
                if failed_too or t.value is not None}
        return keys | {self.space.key(p) for p in self._pending}

    def _sobol(self) -> Iterator[list[float]]:
        """The unit-cube points of the scrambled Sobol sequence of ``seed``, in order."""
        import torch

        engine = torch.quasirandom.SobolEngine(  # type: ignore[no-untyped-call]
            self.space.dim, scramble=True, seed=self.seed)
        drawn = 0
        while drawn < _SOBOL_MAX:
            block = engine.draw(256, dtype=torch.float64).numpy()
            drawn += len(block)
            yield from block.tolist()

    def _stream(self) -> Iterator[Point]:
        """The feasible points of the scrambled Sobol sequence of ``seed``, in order."""
        for u in self._sobol():
            p = self.space.from_unit(u)
            if self.space.feasible(p):
                yield p

    def _repaired(self, anchor: Sequence[float]) -> Iterator[Point]:
        """The Sobol points of ``seed`` moved, where infeasible, toward the feasible unit
        point ``anchor`` to the farthest feasible point on the way (bisection): for tight
        constraints, where few points of the cube are feasible (eight jobs sharing 64 GPUs
        out of 0..64 each: about 1 in 40,000), rejection alone finds too few."""
        for u in self._sobol():
            p = self.space.from_unit(u)
            if not self.space.feasible(p):
                lo, hi = 0.0, 1.0
                for _ in range(30):
                    t = (lo + hi) / 2
                    mid = [a + t * (x - a) for a, x in zip(anchor, u, strict=True)]
                    lo, hi = (t, hi) if self.space.feasible(self.space.from_unit(mid)) \
                        else (lo, t)
                p = self.space.from_unit([a + lo * (x - a) for a, x in zip(anchor, u, strict=True)])
            yield p

    def _fresh(self, k: int, used: set[tuple[float, ...]]) -> list[Point]:
        """The first ``k`` Sobol points not in ``used``; where rejection finds too few
        (tight constraints), Sobol points repaired toward a feasible one; repeats only if the
        space runs out."""
        out: list[Point] = []
        seen = set(used)
        first: list[Point] = []
        grid = self._feasible_grid()
        if grid is not None and self._spent(seen):
            # A small space, every feasible point taken: repeats, in the grid's order (a
            # scan of every Sobol draw, and its repair, took seconds an ask to find none).
            if not grid:
                raise InputError("no point satisfying the space's constraints was found "
                                 f"(every one of its {self.space.size():.0f} points checked)")
            return [grid[i % len(grid)] for i in range(k)]

        def take(points: Iterator[Point]) -> bool:
            for p in points:
                if len(first) < k:
                    first.append(p)
                key = self.space.key(p)
                if key not in seen:
                    out.append(p)
                    seen.add(key)
                    if len(out) == k:
                        return True
            return False

        if take(self._stream()):
            return out
        corner = [0.0] * self.space.dim
        anchor = corner if self.space.feasible(self.space.from_unit(corner)) else None
        if anchor is None and first:
            anchor = self.space.to_unit(first[0])
        if anchor is None:  # constraints of the ">=" or "==" kind: a linear program finds one
            found = _feasible_point(self.space)
            if found is not None:
                first.append(found)
                anchor = self.space.to_unit(found)
        if anchor is not None and take(self._repaired(anchor)):
            return out
        if not first:
            raise InputError("no point satisfying the space's constraints was found (in "
                             f"{_SOBOL_MAX} Sobol draws, at its lower corner, nor by linear "
                             "programming)")
        while len(out) < k:  # every point is taken: repeat the design's own points
            out.append(first[len(out) % len(first)])
        return out

    def _feasible_grid(self) -> list[Point] | None:
        """Every feasible point of a space small enough to enumerate, else None."""
        if self.space.size() > _GRID_LIMIT:
            return None
        if self._grid is None:
            self._grid = list(self.space.grid())
        return self._grid

    def _spent(self, taken: set[tuple[float, ...]]) -> bool:
        """Whether every feasible point of a small space is in ``taken``."""
        grid = self._feasible_grid()
        return grid is not None and all(self.space.key(g) in taken for g in grid)

    def _design(self, k: int) -> list[Point]:
        self.notes["sobol"] += k
        return self._fresh(k, self._used())

    def _model(self, q: int) -> list[Point]:
        import torch

        from interplace.placement.bo._botorch import suggest

        ok = [t for t in self._trials if t.value is not None]
        sign = 1.0 if self.maximize else -1.0
        x = np.array([self.space.encode(t.params) for t in ok], dtype=np.float64)
        y = np.array([sign * float(t.value) for t in ok], dtype=np.float64)  # type: ignore[arg-type]
        d = self.space.dim
        pend = np.array([self.space.encode(p) for p in self._pending],
                        dtype=np.float64).reshape(-1, d)
        used = self._used(failed_too=True) if not self.noisy else (
            {self.space.key(p) for p in self._pending}
            | {self.space.key(t.params) for t in self._trials if t.value is None})
        avoid = np.array(sorted(used), dtype=np.float64).reshape(-1, d)
        issued = len(self._trials) + len(self._pending)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(_ask_seed(self.seed, issued))
                s = suggest(self.space, x, y, pend, avoid, q, noisy=self.noisy,
                            seed=_ask_seed(self.seed, issued) % (2**31))
        finally:
            torch.set_num_threads(threads)
        self.notes[s.acquisition] += max(len(s.rows), 1)
        self.notes.update(s.warnings)
        out: list[Point] = []
        taken = set(used)
        rejected = q - len(s.rows)  # a step whose GP failed suggests nothing
        for row in s.rows:
            if not np.isfinite(row).all():
                rejected += 1
                continue
            p = self.space.decode(row.tolist())
            key = self.space.key(p)
            if not self.space.feasible(p) or (key in taken and not self._spent(taken)):
                rejected += 1  # (a repeat is kept once every point of a small space is taken)
                continue
            out.append(p)
            taken.add(key)
        if rejected:
            # Rounding a relaxed integer can break a constraint, a continuous optimiser can
            # land on a tried point, a GP fit can fail: fresh Sobol points take their place.
            self.notes["sobol-fallback"] += rejected
            out += self._fresh(rejected, taken)
        return out


def _feasible_point(space: Space) -> Point | None:
    """A point of ``space`` satisfying its constraints, by a mixed-integer linear program
    (SciPy's HiGHS) over the constrained parameters, the others at their lower values; None
    when the program finds none, or a constraint names a choice (not a linear variable).

    >>> from interplace.placement.bo import Constraint
    >>> s = Space((Int("a", 0, 9), Int("b", 0, 9)),
    ...           (Constraint((("a", -1.0), ("b", -1.0)), -17),))  # a + b >= 17
    >>> p = _feasible_point(s)
    >>> p is not None and s.feasible(p) and p["a"] + p["b"] >= 17
    True
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    names = sorted({n for c in space.constraints for n, _ in c.terms})
    params = {p.name: p for p in space.params}
    if not names or any(not isinstance(params[n], Int | Float) for n in names):
        return None
    lo, hi, integral = [], [], []
    for n in names:
        p = params[n]
        lo.append(float(p.low))  # type: ignore[union-attr]
        hi.append(float(p.high))  # type: ignore[union-attr]
        integral.append(1 if isinstance(p, Int) else 0)
    col = {n: k for k, n in enumerate(names)}
    a = np.zeros((len(space.constraints), len(names)))
    for r, c in enumerate(space.constraints):
        for n, w in c.terms:
            a[r, col[n]] = w
    ub = np.array([c.max for c in space.constraints], dtype=float)
    res = milp(np.zeros(len(names)), constraints=LinearConstraint(a, -np.inf, ub),
               integrality=np.array(integral), bounds=Bounds(lo, hi))
    if res.x is None:
        return None
    point = space.from_unit([0.0] * space.dim)
    for n, v in zip(names, res.x, strict=True):
        point[n] = round(v) if integral[col[n]] else min(max(float(v), lo[col[n]]), hi[col[n]])
    return point if space.feasible(point) else None


@dataclass(frozen=True)
class Result:
    """What :func:`minimize` / :func:`maximize` found: every trial, and the best one."""

    trials: tuple[Trial, ...]
    best: Trial | None

    @property
    def best_params(self) -> Point | None:
        """The best trial's parameters (None when every trial failed)."""
        return None if self.best is None else dict(self.best.params)

    @property
    def best_value(self) -> float | None:
        """The best trial's value (None when every trial failed)."""
        return None if self.best is None else self.best.value


def _optimize(objective: Callable[[Point], object], space: Space, budget: int, seed: int,
              maximize: bool, n_init: int | None, batch: int, noisy: bool,
              catch: tuple[type[BaseException], ...], out: str | os.PathLike[str] | None,
              ) -> Result:
    check_count(budget, "budget", low=0)
    check_count(batch, "batch")
    kw: dict[str, Any] = {"maximize": maximize, "seed": seed, "n_init": n_init,
                          "noisy": noisy, "budget": budget}
    tuner = Tuner.from_trials(out, space, **kw) if out is not None else Tuner(space, **kw)
    log = TrialsFile(out, space) if out is not None else None
    while True:
        points = tuner.ask(batch)
        if not points:
            break
        for p in points:
            try:
                value = objective(dict(p))
            except catch as exc:
                value = f"{type(exc).__name__}: {first_line(exc)}"
            trial = tuner.tell(p, value)
            if log is not None:
                log.append(trial)
    return Result(tuner.trials, tuner.best)


def minimize(objective: Callable[[Point], object], space: Space, budget: int, seed: int = 0,
             *, n_init: int | None = None, batch: int = 1, noisy: bool = False,
             catch: tuple[type[BaseException], ...] = (),
             out: str | os.PathLike[str] | None = None) -> Result:
    """Minimise ``objective(point)`` over ``space`` with at most ``budget`` evaluations.

    ``objective`` returns a number, or None / NaN for a failed trial; exceptions of the types
    in ``catch`` also fail the trial (others propagate). ``batch`` points are asked at a time
    (as for trials run in parallel; they are evaluated in turn here). ``out``: a trials file
    to append to as trials finish and to continue from (its finished trials count against
    ``budget``). ``seed`` is the only source of randomness.

    >>> from interplace.placement.bo import Float, Space
    >>> r = minimize(lambda p: (p["x"] - 0.3) ** 2, Space((Float("x", 0.0, 1.0),)), 8, seed=1)
    >>> len(r.trials), r.best_value < 0.01
    (8, True)
    """
    return _optimize(objective, space, budget, seed, False, n_init, batch, noisy, catch, out)


def maximize(objective: Callable[[Point], object], space: Space, budget: int, seed: int = 0,
             *, n_init: int | None = None, batch: int = 1, noisy: bool = False,
             catch: tuple[type[BaseException], ...] = (),
             out: str | os.PathLike[str] | None = None) -> Result:
    """Maximise ``objective(point)``; otherwise as :func:`minimize`."""
    return _optimize(objective, space, budget, seed, True, n_init, batch, noisy, catch, out)
