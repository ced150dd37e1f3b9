"""Hypothesis properties of the tuner over small drawn spaces.

Every example runs a few real GP steps, so the settings are a fixed budget: few examples,
``derandomize=True`` (the same examples every run, no database), no deadline. The objective
is a fixed smooth function of the encoded point, so the tuner's path is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interplace.placement.bo import (
    Choice,
    Constraint,
    Float,
    Int,
    Param,
    Point,
    Space,
    Tuner,
    maximize,
)

FEW = settings(max_examples=4, derandomize=True, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow])


@st.composite
def spaces(draw: st.DrawFn) -> Space:
    """1-3 parameters of every kind, and sometimes a capacity constraint that leaves room."""
    n = draw(st.integers(1, 3))
    params: list[Param] = []
    for i in range(n):
        kind = draw(st.sampled_from(["int", "float", "ordinal", "categorical"]))
        name = f"p{i}"
        if kind == "int":
            lo = draw(st.integers(-5, 5))
            params.append(Int(name, lo, lo + draw(st.integers(0, 40))))
        elif kind == "float":
            lo = draw(st.floats(-3, 3))
            log = draw(st.booleans())
            lo = abs(lo) + 0.01 if log else lo
            params.append(Float(name, lo, lo + draw(st.floats(0.1, 5)), log=log))
        elif kind == "ordinal":
            vals = draw(st.lists(st.integers(0, 16), min_size=1, max_size=5, unique=True))
            params.append(Choice(name, tuple(vals)))
        else:
            params.append(Choice(name, tuple(draw(st.lists(st.sampled_from("abcde"), min_size=1,
                                                           max_size=4, unique=True)))))
    numeric = [p for p in params if isinstance(p, Int) or (isinstance(p, Float) and not p.log)
               or (isinstance(p, Choice) and p.ordinal)]
    cons: tuple[Constraint, ...] = ()
    if numeric and draw(st.booleans()):
        lows = [_low(p) for p in numeric]
        highs = [_high(p) for p in numeric]
        # a cap at the lows would leave a set of measure zero when a float takes part
        cap = sum(lows) + draw(st.floats(0.2, 1.0)) * (sum(highs) - sum(lows))
        cons = (Constraint(tuple((p.name, 1.0) for p in numeric), cap),)
    return Space(tuple(params), cons)


def _low(p: Param) -> float:
    return float(min(p.values)) if isinstance(p, Choice) else float(p.low)  # type: ignore[type-var,arg-type]


def _high(p: Param) -> float:
    return float(max(p.values)) if isinstance(p, Choice) else float(p.high)  # type: ignore[type-var,arg-type]


def objective(space: Space) -> Callable[[Point], float]:
    def f(point: Point) -> float:
        row = space.encode(point)
        return math.fsum(math.sin(1.7 * x + i) for i, x in enumerate(row))
    return f


@FEW
@given(space=spaces(), seed=st.integers(0, 2**16), batch=st.integers(1, 2))
def test_suggestions_stay_inside_the_space_and_the_budget_holds(space: Space, seed: int,
                                                                  batch: int) -> None:
    budget = 5
    f = objective(space)
    calls: list[Point] = []

    def counted(p: Point) -> float:
        assert space.check(p) == p  # inside the bounds, a value of each choice
        assert space.feasible(p)  # and within the constraints
        calls.append(p)
        return f(p)

    r = maximize(counted, space, budget, seed=seed, n_init=2, batch=batch)
    assert len(calls) == budget == len(r.trials)


@settings(FEW, max_examples=3)  # two runs per example
@given(space=spaces(), seed=st.integers(0, 2**16))
def test_the_same_seed_gives_the_same_trials(space: Space, seed: int) -> None:
    f = objective(space)
    a = maximize(f, space, 4, seed=seed, n_init=2)
    b = maximize(f, space, 4, seed=seed, n_init=2)
    assert a.trials == b.trials


@pytest.mark.slow  # about 65 s (three tuner runs an example); test_tuner.py's resume test
# checks the same on one space in the default run
@FEW
@given(space=spaces(), seed=st.integers(0, 2**16), stop=st.integers(1, 4))
def test_resuming_continues_rather_than_restarts(space: Space, seed: int, stop: int) -> None:
    f = objective(space)
    whole = maximize(f, space, 5, seed=seed, n_init=2)
    with TemporaryDirectory() as tmp:
        out = Path(tmp) / "trials.csv"
        maximize(f, space, stop, seed=seed, n_init=2, out=out)
        resumed = Tuner.from_trials(out, space, maximize=True, seed=seed, n_init=2, budget=5)
        assert len(resumed.trials) == stop and resumed.remaining == 5 - stop
        rest = maximize(f, space, 5, seed=seed, n_init=2, out=out)
    assert rest.trials == whole.trials
