"""Job families: reading them, fitting with them, saving them, and the family baseline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from interplace.datasets import CoLocationData
from interplace.errors import InputError
from interplace.model import (
    Hyper,
    InterferenceModel,
    Query,
    colocated_rows,
    evaluate,
    family_lookup,
    fit,
    job_families,
)
from interplace.model._cells import (
    OFFSET_BOUND,
    _cells_log_mean_speed,
    _pair_terms,
    _solve_offsets,
    pair_log_speed,
)
from interplace.model._coldscale import below_array, readings_array
from interplace.model._counterkernel import floored
from interplace.model._fit import MEASURED_DRAWS


def _runs(jobs: list[str], model: list[object]) -> CoLocationData:
    runs = pd.DataFrame(
        {
            "run_id": [f"iso/{j}" for j in jobs],
            "job": jobs,
            "throughput": [1.0] * len(jobs),
            "model": model,
        }
    )
    return CoLocationData(runs, None, "toy")


# --------------------------------------------------------------------------- reading families


def test_families_come_from_a_column_or_a_map() -> None:
    data = _runs(["a", "b", "c", "d"], ["M", "M", None, " N "])
    assert job_families(data, ["a", "b", "c", "d"], "model") == ("M", "M", None, "N")
    assert job_families(data, ["a", "b", "c"], {"a": "X", "c": " X"}) == ("X", None, "X")
    # A pandas Series indexed by job is a map too, and a missing value in it means no family.
    series = pd.Series({"a": "X", "b": float("nan"), "c": "X"})
    assert job_families(data, ["a", "b", "c"], series) == ("X", None, "X")


def test_empty_and_nan_cells_mean_no_family() -> None:
    data = _runs(["a", "b", "c", "d"], ["M", "M", "", float("nan")])
    assert job_families(data, ["a", "b", "c", "d"], "model") == ("M", "M", None, None)


def test_numeric_family_codes_read_as_their_text() -> None:
    # A CSV column of codes with a gap is read as floats: 1.0 must still be family "1".
    data = _runs(["a", "b", "c"], [1.0, 1.0, float("nan")])
    assert job_families(data, ["a", "b", "c"], "model") == ("1", "1", None)
    assert job_families(data, ["a", "b"], {"a": 7, "b": 7}) == ("7", "7")


@pytest.mark.parametrize(
    ("family", "message"),
    [
        ("nosuch", "toy: runs table has no column 'nosuch' to take job families from"),
        ("job", "toy: column 'job' cannot name job families"),
        ({"a": ["x"], "b": "M"}, r"family of job 'a' is not a name: \['x'\]"),
        ({"a": True, "b": True}, "family of job 'a' is not a name: True"),
        (3, "family must be a column name or a job -> family mapping, not int"),
        ({"nosuch": "M"}, "toy: the family map gives no two jobs the same family"),
        ({"a": "M", "b": "N"}, "toy: the family map gives no two jobs the same family"),
    ],
)
def test_bad_families_are_refused(family: object, message: str) -> None:
    data = _runs(["a", "b"], ["M", "M"])
    with pytest.raises(InputError, match=message):
        job_families(data, ["a", "b"], family)  # type: ignore[arg-type]


def test_a_column_that_groups_nothing_or_holds_lists_is_refused() -> None:
    empty = _runs(["a", "b"], [None, None])
    with pytest.raises(InputError, match="toy: column 'model' gives no two jobs the same family"):
        job_families(empty, ["a", "b"], "model")
    lists = _runs(["a", "b"], [["M"], "M"])
    with pytest.raises(InputError, match=r"toy: runs row 1: family \['M'\] in column 'model'"):
        job_families(lists, ["a", "b"], "model")


def test_a_job_with_two_families_is_refused() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["iso/a", "iso/b", "p", "p"],
            "job": ["a", "b", "a", "b"],
            "throughput": [1.0, 1.0, 0.5, 0.5],
            "model": ["M", "M", "N", "M"],
        }
    )
    data = CoLocationData(runs, None, "toy")
    with pytest.raises(InputError, match=r"job 'a' has 2 families in column 'model' \('M', 'N'\)"):
        job_families(data, ["a", "b"], "model")


# ------------------------------------------------------------------------- fitting with them


SLOW, FAST = 0.6, 0.95
"""Speeds of family A's and family B's jobs next to anyone, in :func:`_family_data`."""


def _family_data(seed: int) -> tuple[CoLocationData, dict[str, str]]:
    """Two families of four jobs whose counters are identical and whose speeds differ.

    Every job reads 50% GPU and 30% memory utilisation alone. Family A's jobs run at
    :data:`SLOW` next to any co-runner, family B's at :data:`FAST` (times 2% noise). ``a3``
    has only its isolated run: from its counters it cannot be told from a B job; only its
    family says it is slow.
    """
    rng = np.random.default_rng(seed)
    jobs = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)]
    level = {j: SLOW if j.startswith("a") else FAST for j in jobs}
    runs = [(f"iso/{j}", j, 100.0) for j in jobs]
    samples = []
    for j in jobs:
        for t in range(6):
            samples.append((f"iso/{j}", float(t), "gpu_util_pct", 50 + rng.normal(0, 2)))
            samples.append((f"iso/{j}", float(t), "mem_util_pct", 30 + rng.normal(0, 2)))
    warm = [j for j in jobs if j != "a3"]
    for x in range(len(warm)):
        for y in range(x + 1, len(warm)):
            rid = f"pair/{warm[x]}|{warm[y]}"
            for j in (warm[x], warm[y]):
                runs.append((rid, j, 100.0 * level[j] * float(np.exp(rng.normal(0, 0.02)))))
    frame = pd.DataFrame(runs, columns=["run_id", "job", "throughput"])
    frame["model"] = [j[0].upper() for j in frame["job"]]
    sample_frame = pd.DataFrame(samples, columns=["run_id", "t_s", "metric", "value"])
    return CoLocationData(frame, sample_frame, "families"), {j: j[0].upper() for j in jobs}


@pytest.mark.slow  # two fits of 8 jobs at up to 600 steps: ~20 s on two cores
def test_a_cold_job_borrows_its_family() -> None:
    data, _ = _family_data(0)
    # 600 steps: the families' levels are far apart, so a short fit tells them apart (on
    # seeds 0-2 a3's prediction was 0.61-0.64 with families and 0.76-0.99 without).
    plain = fit(data, seed=0, steps=600)
    with_family = fit(data, seed=0, steps=600, family="model")
    queries = [Query("a3", (b,)) for b in ("b0", "b1", "b2", "b3")]
    cold_plain = float(plain.posterior_speed(queries).mean.mean())
    cold_family = float(with_family.posterior_speed(queries).mean.mean())
    # Without families, a3's counters match every job's, so nothing ties it to family A.
    # With them it must land on family A's side of the midpoint, and closer to A's level
    # than the plain model's prediction is.
    assert cold_family < (SLOW + FAST) / 2
    assert abs(cold_family - SLOW) < abs(cold_plain - SLOW)
    assert with_family.families == ("A",) * 4 + ("B",) * 4
    assert plain.families is None
    assert with_family.info["family"] == "model"


@pytest.fixture(scope="module")
def family_model() -> InterferenceModel:
    """One short family fit for the save/load tests (fitted once; each test saves its own),
    without the direct completion: it would rewrite the stored completion of the mates'
    unmeasured pairs after a3 borrowed from them, which the test of a3's pairs rebuilds."""
    data, fams = _family_data(1)
    fams = {j: f for j, f in fams.items() if j not in ("b2", "b3")}  # two jobs without one
    return fit(data, seed=0, steps=200, min_steps=200, family=fams,
               hyper=Hyper(direct_weight=0.0))


def test_families_round_trip_through_save_and_load(
    tmp_path: Path, family_model: InterferenceModel
) -> None:
    model = family_model
    # Jobs without a family keep the plain prior: only the two named families get effects.
    assert model.families == ("A",) * 4 + ("B", "B", None, None)
    assert tuple(model.posterior["family_effect"][0].shape[-2:]) == (2, 16)
    loaded = InterferenceModel.load(model.save(tmp_path / "m"))
    assert loaded.families == model.families
    assert set(loaded.posterior) == set(model.posterior)
    q = [Query("a3", ("b0",)), Query("b1", ("a0", "a3")), Query("b3", ("a1",))]
    np.testing.assert_array_equal(
        loaded.posterior_speed(q).speed.numpy(), model.posterior_speed(q).speed.numpy()
    )
    assert set(loaded.draws(4)) == set(model.posterior)


def test_a_family_fit_fills_its_cold_members_pairs(family_model: InterferenceModel) -> None:
    # a3 has only its isolated run: its row and its column of the second stage's effects
    # come from family A's measured members (interplace.model._cells.borrowed_effects); b2
    # and b3 have no family but are measured on both sides, so nothing else is filled.
    assert family_model.info["completion"]["borrowed_rows"] == 1
    assert family_model.info["completion"]["borrowed_columns"] == 1
    m = family_model.measured
    assert m is not None
    # Rebuild the measured members' effects as the stage does (the structure's mean log speed
    # of each pair from the same draws, the conjugate update), and check that a3's prior
    # mean effect against every co-runner but itself is their mean, to rounding.
    structure = dataclasses.replace(family_model, measured=None)
    mu = pair_log_speed(structure.draws(MEASURED_DRAWS, 0)).numpy()
    effect = m.expected.copy()
    effect[m.job, m.co] += m.weight() * (m.log_speed - mu[m.job, m.co] - m.expected[m.job, m.co])
    jobs = family_model.jobs
    a3, mates = jobs.index("a3"), [jobs.index(j) for j in ("a0", "a1", "a2")]
    others = [k for k in range(len(jobs)) if k != a3]
    borrowed = effect[mates][:, others].mean(0)
    # Then the speed the model reports for each pair averaged with the counter kernel's
    # (interplace.model._cells.speed_blended), on the readings the fit recorded: a3's pair at
    # the offset that meets the borrowed target reports a mean speed over the stage's draws
    # (a3 is not lifted, so its row's draws are the structure's), and at the stored offset
    # the geometric mean of that and the kernel's, to the offset solver's 1e-10 (1e-9 allowed).
    assert m.kernel is not None and m.kernel_weight == 0.5
    info = family_model.info
    readings = floored(
        readings_array(info["isolated_readings"], jobs, family_model.resources),
        below_array(info["isolated_below_floor"], jobs, family_model.resources),
    )
    g = m.kernel.log_speed(m.job, m.co, m.log_speed, m.n.astype(float), readings,
                           np.full(len(others), a3), np.asarray(others))
    draws = structure.draws(MEASURED_DRAWS, 0)
    terms = _pair_terms(draws)
    n = len(jobs)
    cells = torch.as_tensor(a3 * n + np.asarray(others))
    target = torch.as_tensor(mu + 0.0)
    target[a3, others] = torch.as_tensor(mu[a3, others] + borrowed)
    before = _cells_log_mean_speed(terms, _solve_offsets(draws, target, cells=cells), cells, n)
    after = _cells_log_mean_speed(terms, torch.as_tensor(m.offset), cells, n)
    want = 0.5 * before + 0.5 * torch.as_tensor(g)
    # A blend beyond a3's level (its co-runner's pressure all but off) stays at that level.
    level = m.offset[a3, others] == -OFFSET_BOUND
    assert level.sum() < len(others) and (want.numpy()[level] > after.numpy()[level]).all()
    np.testing.assert_allclose(after.numpy()[~level], want.numpy()[~level], rtol=0, atol=1e-9)
    # The stored completion is what the blended offsets reach.
    reached = pair_log_speed(draws, torch.as_tensor(m.offset))[a3, others]
    np.testing.assert_allclose(m.expected[a3, others], reached.numpy() - mu[a3, others],
                               rtol=0, atol=1e-9)


@pytest.fixture
def saved_family_model(tmp_path: Path, family_model: InterferenceModel) -> Path:
    return family_model.save(tmp_path / "m")


def _rewrite(saved: Path, **changes: object) -> None:
    meta = json.loads((saved / "model.json").read_text())
    meta.update(changes)
    (saved / "model.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("families", "message"),
    [
        (["A"] * 4 + ["B"] * 3, "must be a tuple of one entry for each of 8 jobs"),
        ([1] * 4 + ["B"] * 4, r"model.json: families\[0\] must be a name or null, not 1"),
        (["A"] * 4 + ["B"] * 3 + [["B"]], r"families\[7\] must be a name or null"),
        ([" A"] * 4 + ["B"] * 4, "family of job 'a0' must be None or a non-empty name"),
        ([None] * 8, "families name no family"),
        (["A"] * 8, "posterior site family_effect has shape"),
        ("AB", "families must be a list"),
    ],
)
def test_tampered_families_are_refused_in_one_line(
    saved_family_model: Path, families: object, message: str
) -> None:
    _rewrite(saved_family_model, families=families)
    with pytest.raises(InputError, match=message) as info:
        InterferenceModel.load(saved_family_model)
    assert "\n" not in str(info.value)
    assert str(saved_family_model) in str(info.value)


def test_a_saved_family_model_must_match_its_tensors(saved_family_model: Path) -> None:
    _rewrite(saved_family_model, families=None)  # the family tensors are now unexpected
    with pytest.raises(InputError, match="unexpected tensor 'family_"):
        InterferenceModel.load(saved_family_model)
    _rewrite(saved_family_model, families=["A"] * 4 + ["B"] * 4, format_version=2)
    with pytest.raises(InputError, match="a version 2 model has no families"):
        InterferenceModel.load(saved_family_model)


# ------------------------------------------------------------------------ the family baseline


def test_family_lookup_falls_back_from_families_to_job_to_global_mean() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["i/x", "i/y", "i/z", "i/w", "p", "p", "q", "q"],
            "job": ["x", "y", "z", "w", "x", "y", "x", "w"],
            "throughput": [10.0, 10.0, 10.0, 10.0, 5.0, 9.0, 7.0, 8.0],
        }
    )
    train = CoLocationData(runs, None, "toy")
    test = pd.DataFrame(
        {
            "job": ["z", "z", "x", "v"],
            "co_runner": ["y", "w", "z", "x"],
            "speed": [0.0, 0.0, 0.0, 0.0],
        }
    )
    fams = {"x": "F", "z": "F"}
    pred = family_lookup(train, test, fams).tolist()
    rows = colocated_rows(train)
    # z next to y: family F next to y's own family -> x next to y (0.5).
    # z next to w: F next to w -> x next to w (0.7).
    # x next to z: nothing of F next to F -> x's own mean; v: unknown -> the global mean.
    assert pred == pytest.approx([0.5, 0.7, 0.6, float(rows["speed"].mean())])


def test_evaluate_with_families_reports_the_family_baseline() -> None:
    data, _ = _family_data(2)
    # What is checked is the report's family fields, not the fit or the peers: one restart,
    # no peers.
    quick: dict[str, Any] = {"fit_kwargs": {"restarts": 1}, "peers": False}
    result = evaluate(data, cold_jobs=1, seed=0, steps=200, family="model", **quick)
    assert result["family"] == "model"
    assert "family_baseline" not in result["baselines"]
    # The cold job's family runs at one level next to everyone, so the family lookup nearly
    # knows its speeds, while the per-job mean can only offer the global mean for it.
    assert result["family_baseline"]["mae"] < result["baselines"]["per_job_mean"]["mae"]
    assert result["mae_ratio_to_family_baseline"] > 0
    plain = evaluate(data, cold_jobs=1, seed=0, steps=200, **quick)
    assert "family_baseline" not in plain


def test_renaming_families_in_their_order_gives_the_same_fit_exactly(
    small_data: CoLocationData,
) -> None:
    # Families are indexed by sorted name, so an order-keeping renaming keeps every index,
    # tensor and random number: the fits must agree bit for bit (as for job names).
    # Bit equality holds at any number of steps; 100 keep it quick, and two restarts (the
    # plain fit and a tempered one, pooled) exercise the mixture at half the default's cost.
    steps, restarts = 100, 2
    jobs = sorted(small_data.runs["job"].astype(str).unique())
    first = {j: "A" if i < 2 else "B" for i, j in enumerate(jobs)}
    second = {j: "fam-a" if i < 2 else "fam-b" for i, j in enumerate(jobs)}
    a = fit(small_data, seed=0, steps=steps, min_steps=steps, family=first, restarts=restarts,
            temper=1.5)
    b = fit(small_data, seed=0, steps=steps, min_steps=steps, family=second,
            restarts=restarts, temper=1.5)
    assert set(a.posterior) == set(b.posterior)
    for name, (loc, scale) in a.posterior.items():
        assert torch.equal(b.posterior[name][0], loc), name
        assert torch.equal(b.posterior[name][1], scale), name
    # ... and the families did reach the fit: without them it differs.
    plain = fit(small_data, seed=0, steps=steps, min_steps=steps, restarts=restarts,
                temper=1.5)
    assert not torch.equal(plain.posterior["sens_eps"][0], a.posterior["sens_eps"][0])
    assert "family_effect" in a.posterior and "family_effect" not in plain.posterior
