"""The ask/tell tuner, minimize/maximize and the trials file."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from interplace.errors import InputError
from interplace.placement.bo import (
    Choice,
    Constraint,
    Float,
    Int,
    Space,
    Trial,
    TrialsFile,
    Tuner,
    maximize,
    minimize,
)

MIXED = Space((Int("n", 0, 30), Float("x", -1.0, 1.0), Choice("opt", ("adam", "sgd", "rms"))))


def mixed_objective(p: dict[str, object]) -> float:
    """Maximum 3.0 at n=20, x=0.5, opt='sgd'."""
    bonus = {"adam": 0.0, "sgd": 1.0, "rms": 0.5}[str(p["opt"])]
    return 2.0 - ((float(p["n"]) - 20) / 10) ** 2 - (float(p["x"]) - 0.5) ** 2 + bonus  # type: ignore[arg-type]


def test_initial_design_is_seeded_sobol_without_repeats() -> None:
    space = Space((Int("a", 0, 3), Int("b", 0, 3)))
    t1, t2, t3 = (Tuner(space, seed=s, n_init=16) for s in (5, 5, 6))
    pts1, pts2, pts3 = t1.ask(16), t2.ask(16), t3.ask(16)
    assert pts1 == pts2 and pts1 != pts3
    # 16 points of a 4 x 4 grid without repeats: all of them
    assert sorted((p["a"], p["b"]) for p in pts1) == [(a, b) for a in range(4) for b in range(4)]
    assert t1.notes["sobol"] == 16 and len(t1.pending) == 16


def test_maximize_finds_the_mixed_optimum_region_and_uses_log_ei() -> None:
    r = maximize(mixed_objective, MIXED, budget=12, seed=0)
    assert len(r.trials) == 12
    assert r.best_value is not None and r.best_value > 2.5  # the optimum is 3.0
    assert r.best_params is not None and r.best_params["opt"] == "sgd"


def test_minimize_and_maximize_agree() -> None:
    space = Space((Float("x", 0.0, 4.0),))
    lo = minimize(lambda p: (float(p["x"]) - 3.0) ** 2, space, 8, seed=3)  # type: ignore[arg-type]
    hi = maximize(lambda p: -((float(p["x"]) - 3.0) ** 2), space, 8, seed=3)  # type: ignore[arg-type]
    assert [t.params for t in lo.trials] == [t.params for t in hi.trials]
    assert lo.best is not None and abs(float(lo.best.params["x"]) - 3.0) < 0.1  # type: ignore[arg-type]


def test_failed_trials_are_recorded_and_kept_out_of_the_gp() -> None:
    space = Space((Float("x", 0.0, 1.0),))
    calls = []

    def f(p: dict[str, object]) -> float | None:
        x = float(p["x"])  # type: ignore[arg-type]
        calls.append(x)
        if x > 0.7:
            return None
        if x < 0.13:  # the first 8 Sobol points stratify [0, 1] by eighths: one is here
            raise ValueError("too small")
        return -((x - 0.5) ** 2)

    with pytest.raises(ValueError, match="too small"):  # not caught unless asked
        maximize(f, space, 10, seed=1, n_init=20)
    calls.clear()
    r = maximize(f, space, 10, seed=1, catch=(ValueError,))
    failed = [t for t in r.trials if t.status == "failed"]
    assert failed and all(t.value is None for t in failed)
    assert {t.error for t in failed} <= {"no value", "ValueError: too small"}
    assert len(r.trials) == 10 == len(calls)
    assert r.best is not None and r.best.value is not None and r.best.value > -0.01


def test_tell_reads_failures_in_every_form() -> None:
    t = Tuner(Space((Int("a", 0, 9),)), seed=0)
    assert t.tell({"a": 1}, math.nan).error == "the objective is NaN"
    assert t.tell({"a": 2}, math.inf).status == "failed"
    assert t.tell({"a": 3}, "exit status 1: boom").error == "exit status 1: boom"
    assert t.tell({"a": 4}, None, error="timed out").error == "timed out"
    assert t.tell({"a": 5}, 2).value == 2.0
    assert t.best is not None and t.best.params == {"a": 5}
    with pytest.raises(InputError, match="parameter 'a': 10 is outside"):
        t.tell({"a": 10}, 1.0)
    with pytest.raises(InputError, match="must be a number"):
        t.tell({"a": 1}, [1.0])


def test_budget_counts_pending_and_finished_trials() -> None:
    t = Tuner(Space((Int("a", 0, 99),)), seed=0, budget=5)
    first = t.ask(3)
    assert len(first) == 3 and t.remaining == 2
    assert len(t.ask(10)) == 2 and t.ask() == [] and t.remaining == 0
    t.tell(first[0], 1.0)
    assert t.ask() == [] and len(t.trials) == 1


def test_batches_are_distinct_and_pending_points_are_not_repeated() -> None:
    space = Space((Choice("g0", (0, 1, 2, 4, 8)), Choice("g1", (0, 1, 2, 4, 8))),
                  (Constraint((("g0", 1), ("g1", 1)), 8),))
    t = Tuner(space, maximize=True, seed=2, n_init=4)
    for p in t.ask(4):
        t.tell(p, float(p["g0"]) * 1.5 + float(p["g1"]))  # type: ignore[arg-type]
    batch = t.ask(3)  # the GP's batch, with qLogNEI
    keys = {(p["g0"], p["g1"]) for p in batch}
    tried = {(tr.params["g0"], tr.params["g1"]) for tr in t.trials}
    assert len(keys) == 3 and not keys & tried
    assert all(space.feasible(p) for p in batch)
    assert t.notes["qLogNoisyExpectedImprovement"] == 3
    more = t.ask(1)  # pending points stay pending: qLogNEI with X_pending, not a repeat
    assert (more[0]["g0"], more[0]["g1"]) not in keys | tried


def test_a_small_space_is_exhausted_then_repeats() -> None:
    space = Space((Choice("c", ("x", "y")),))
    r = maximize(lambda p: 1.0 if p["c"] == "y" else 0.0, space, 4, seed=0)
    assert [t.params["c"] for t in r.trials][:2] in (["x", "y"], ["y", "x"])
    assert len(r.trials) == 4 and r.best_value == 1.0


def test_trials_file_round_trip_and_torn_tail(tmp_path: Path) -> None:
    space = Space((Choice("c", ("a,b", 'q"', 3)), Float("x", 0.0, 1.0)))
    f = TrialsFile(tmp_path / "t.csv", space)
    trials = [Trial({"c": "a,b", "x": 0.1 + 0.2}, 1 / 3), Trial({"c": 3, "x": 1.0}, None, "x"),
              Trial({"c": 'q"', "x": 0.0}, -2.5)]
    for tr in trials:
        f.append(tr)
    assert f.read() == trials  # floats come back exactly
    with open(f.path, "a") as fh:
        fh.write("3,0.5,1.")  # a crash in the middle of a row
    assert f.read() == trials
    f.append(trials[0])
    assert f.read() == [*trials, trials[0]]
    torn = TrialsFile(tmp_path / "torn.csv", space)
    torn.path.write_text("c,x,val")  # a crash while the header was written
    assert torn.read() == []
    torn.append(trials[0])
    assert torn.read() == [trials[0]]
    other = TrialsFile(f.path, Space((Int("n", 0, 1),)))
    with pytest.raises(InputError, match="do not match the space"):
        other.read()
    bad = tmp_path / "bad.csv"
    bad.write_text("c,x,value,status,error\n3,0.5,1.0,maybe,\n")
    with pytest.raises(InputError, match="line 2: status must be ok or failed"):
        TrialsFile(bad, space).read()
    bad.write_text("c,x,value,status,error\n7,0.5,1.0,ok,\n")
    with pytest.raises(InputError, match=r"line 2: parameter 'c': 7\.0 is not one of"):
        TrialsFile(bad, space).read()


ORDINAL = Space((Int("n", 0, 30), Float("x", -1.0, 1.0), Choice("g", (0, 1, 2, 4, 8))))


def ordinal_objective(p: dict[str, object]) -> float:
    return -((float(p["n"]) - 20) / 10) ** 2 - (float(p["x"]) - 0.5) ** 2 + float(p["g"]) ** 0.5  # type: ignore[arg-type]


def test_resume_from_the_trials_file_continues(tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    whole = maximize(ordinal_objective, ORDINAL, 9, seed=4, n_init=5)
    part = maximize(ordinal_objective, ORDINAL, 7, seed=4, n_init=5, out=out)
    assert [t.params for t in part.trials] == [t.params for t in whole.trials[:7]]
    rest = maximize(ordinal_objective, ORDINAL, 9, seed=4, n_init=5, out=out)
    assert rest.trials == whole.trials
    assert TrialsFile(out, ORDINAL).read() == list(whole.trials)
    again = maximize(ordinal_objective, ORDINAL, 9, seed=4, n_init=5, out=out)
    assert again.trials == whole.trials  # the budget is spent: nothing runs


def test_arguments_are_checked() -> None:
    space = Space((Int("a", 0, 1),))
    seed_range = r"seed must be an integer in \[0, 2\*\*63\)"
    for kw, msg in [({"seed": -1}, "seed"), ({"seed": 2**63}, seed_range),
                    ({"n_init": 0}, "n_init"), ({"budget": -1}, "budget")]:
        with pytest.raises(InputError, match=msg):
            Tuner(space, **kw)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="n must be"):
        Tuner(space).ask(0)
    with pytest.raises(InputError, match="batch"):
        minimize(lambda p: 0.0, space, 3, batch=0)
    none = Space((Int("a", 0, 3),), (Constraint((("a", 1),), -1),))
    with pytest.raises(InputError, match="no point satisfying the space's constraints was found"):
        Tuner(none).ask()


def test_gp_failures_fall_back_to_sobol_and_handled_warnings_are_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    from interplace.placement.bo import _botorch

    _botorch._import_botorch()  # the guarded first import (linear_operator's jit warnings)
    from botorch.exceptions.errors import ModelFittingError
    from gpytorch.utils.warnings import NumericalWarning

    space = Space((Float("x", 0.0, 1.0),))
    t = Tuner(space, seed=0, n_init=2)
    for p in t.ask(2):
        t.tell(p, float(p["x"]))  # type: ignore[arg-type]

    def broken(*args: object, **kwargs: object) -> object:
        raise ModelFittingError("all attempts to fit the model have failed")

    monkeypatch.setattr(_botorch, "_suggest", broken)
    (p,) = t.ask()
    assert space.check(p) == p and t.notes["sobol-fallback"] == 1
    assert t.notes["gp-failed (ModelFittingError)"] == 1
    monkeypatch.undo()

    real = _botorch._suggest

    def jittery(*args: object, **kwargs: object) -> object:
        warnings.warn("A not p.d., added jitter of 1.0e-08 to the diagonal", NumericalWarning,
                      stacklevel=1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_botorch, "_suggest", jittery)
    t.ask()  # pytest turns warnings into errors: a handled one must not escape
    assert t.notes["NumericalWarning"] == 1

    def odd(*args: object, **kwargs: object) -> object:
        warnings.warn("something else", UserWarning, stacklevel=1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_botorch, "_suggest", odd)
    with pytest.raises(UserWarning, match="something else"):
        t.ask()


def test_an_objective_of_huge_finite_values_is_tuned() -> None:
    # 1e160 squared overflows the GP's standardisation: the fit ended in a RuntimeError.
    space = Space((Float("x", 0.0, 1.0), Int("n", 0, 20)))
    result = minimize(lambda p: 1e160 * float(p["x"]), space, 5, n_init=3)  # type: ignore[arg-type]
    assert len(result.trials) == 5 and result.best is not None


def test_a_tight_constraint_still_gets_a_varied_feasible_design() -> None:
    # Eight jobs sharing 64 GPUs (0..64 each): about 1 Sobol point in 40,000 is feasible, so
    # rejection found one design point (repeated), and with ten jobs sharing 32, none ("no
    # point satisfies"), though the all-zero point does.
    for n, total in ((8, 64), (10, 32)):
        names = [f"g{i}" for i in range(n)]
        space = Space(tuple(Int(g, 0, total) for g in names),
                      (Constraint(tuple((g, 1.0) for g in names), total),))
        tuner = Tuner(space, seed=0, n_init=4, budget=4)
        design = tuner.ask(4)
        assert all(space.feasible(p) for p in design)
        assert len({space.key(p) for p in design}) == 4, design


def test_an_objective_of_tiny_values_is_tuned_as_at_its_own_scale() -> None:
    # A spread below 1e-8 reached the GP unscaled (BoTorch's Standardize leaves it), which
    # read it as noise: 1e-9 times an objective was tuned as at random (the corners).
    space = Space((Float("x", 0.0, 1.0), Float("y", 0.0, 1.0)))

    def f(p: dict[str, object]) -> float:
        return (float(p["x"]) - 0.3) ** 2 + (float(p["y"]) - 0.7) ** 2  # type: ignore[arg-type]

    big = minimize(f, space, 9, seed=0, n_init=5)
    tiny = minimize(lambda p: 1e-9 * f(p), space, 9, seed=0, n_init=5)
    flat = [[float(t.params[k]) for k in ("x", "y")] for t in tiny.trials]  # type: ignore[arg-type]
    want = [[float(t.params[k]) for k in ("x", "y")] for t in big.trials]  # type: ignore[arg-type]
    assert np.asarray(flat) == pytest.approx(np.asarray(want), abs=1e-3)


def test_a_wide_integer_is_never_listed() -> None:
    # An integer of 10^9 values was listed whole before being relaxed to a real (MemoryError).
    space = Space((Int("bytes", 1, 10**9), Float("x", 0.0, 1.0)))
    result = maximize(lambda p: -abs(float(p["x"]) - 0.5), space, 4, n_init=3)  # type: ignore[arg-type]
    assert len(result.trials) == 4
    assert all(1 <= int(t.params["bytes"]) <= 10**9 for t in result.trials)  # type: ignore[call-overload]


def test_names_and_values_with_line_breaks_are_refused() -> None:
    # A trials file keeps a trial a line; a value with a carriage return was written unquoted
    # and the file could not be read back (a csv traceback on resume).
    with pytest.raises(InputError, match="holds a line break"):
        Choice("c", ("a", "c\rd"))
    with pytest.raises(InputError, match="control characters"):
        Int("n\r", 0, 3)


def test_constraints_of_the_at_least_kind_get_a_design() -> None:
    # "Exactly 32 GPUs among eight jobs" (<= 32 and >= 32) or "at least 448 of 8 x 64": no
    # Sobol draw and not the lower corner satisfies them, and the tuner said no point does.
    names = [f"g{i}" for i in range(8)]
    up = Constraint(tuple((g, 1.0) for g in names), 32)
    down = Constraint(tuple((g, -1.0) for g in names), -32)
    for space in (Space(tuple(Int(g, 0, 32) for g in names), (up, down)),
                  Space(tuple(Int(g, 0, 64) for g in names),
                        (Constraint(tuple((g, -1.0) for g in names), -448),))):
        points = Tuner(space, seed=0, n_init=4).ask(4)
        assert len({space.key(p) for p in points}) == 4
        assert all(space.feasible(p) for p in points)


def test_a_spent_small_space_repeats_the_models_choice_at_once() -> None:
    # Two jobs splitting two GPUs: six feasible points. Once all were tried, the GP's repeat
    # was thrown out as tried and each ask scanned every Sobol draw (and repaired them) for
    # seconds, to repeat the first design point instead.
    from interplace.placement.bo import GpuSplit, gavel_scaleout
    from interplace.placement.bo._botorch import ENUMERATE_LIMIT
    from interplace.placement.bo._tuner import _GRID_LIMIT

    assert _GRID_LIMIT == ENUMERATE_LIMIT
    g = gavel_scaleout("v100")
    split = GpuSplit(g, tuple(sorted(g))[:2], capacity=2)
    space = split.space()
    t = Tuner(space, maximize=True, seed=0, budget=9)
    for _ in range(9):
        (p,) = t.ask()
        t.tell(p, split(p))
    assert t.notes["sobol-fallback"] == 0
    best = max(split(p) for p in space.grid())
    assert split(t.trials[-1].params) == best  # the repeat is the model's pick, the best


def test_tell_takes_numpy_numbers_and_huge_ints() -> None:
    # numpy parameter values were refused ("0.5 is not a finite number"), and a Python int
    # past float's range escaped as OverflowError (as a value or a parameter).
    import numpy as np

    space = Space((Int("a", 0, 9), Float("x", 0.0, 1.0)))
    t = Tuner(space)
    assert t.tell({"a": np.int64(1), "x": np.float32(0.5)}, 1.0).params == {"a": 1, "x": 0.5}
    assert t.tell({"a": 2, "x": 0.5}, 10**400).error == "the objective is inf"
    with pytest.raises(InputError, match="is outside"):
        t.tell({"a": 1, "x": 10**400}, 1.0)
