"""``interplace.model.stability``: the perturbations, the z-scores, the flag rule, the report.

The fits here are tiny (3 jobs, 40 steps or fewer): the report's plumbing, determinism and rules are
what is tested, not the statistics of a converged fit (those are the properties of
``test_stability_properties.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import CoLocationData, synthetic
from interplace.errors import InputError
from interplace.model import (
    PERTURBATIONS,
    InterferenceModel,
    Replicate,
    StabilityReport,
    fit,
    stability,
)
from interplace.model._stability import MIN_RUNS, _judge_jobs, _perturb

STEPS = 40


@pytest.fixture(scope="module")
def data3() -> CoLocationData:
    return synthetic(3, seed=4, samples_per_run=3)


@pytest.fixture(scope="module")
def report(data3: CoLocationData) -> StabilityReport:
    # Every perturbation once: 8 fits of 3 jobs at 40 steps, in this process.
    return stability(data3, n=1, steps=STEPS, workers=1)


# ------------------------------------------------------------------- the perturbations


def _rng(k: int = 0) -> np.random.Generator:
    return np.random.default_rng(k)


def test_drop_samples_drops_about_the_fraction(data3: CoLocationData) -> None:
    assert data3.samples is not None
    out, mapping, detail = _perturb("drop_samples", data3, _rng(), 0.2, 0.05)
    assert mapping is None and out.runs.equals(data3.runs)
    assert out.samples is not None
    n, kept = len(data3.samples), len(out.samples)
    # Binomial(n, 0.8) kept: within 5 sds of its mean (a false failure has p < 1e-6).
    assert abs(kept - 0.8 * n) <= 5 * math.sqrt(n * 0.2 * 0.8), (kept, n)
    assert f"of {n} samples" in detail


@pytest.mark.parametrize("k", range(5))
def test_drop_runs_keeps_every_job_and_a_co_located_run(k: int) -> None:
    data = synthetic(3, seed=k, samples_per_run=2, pairs="random")
    out, _, _ = _perturb("drop_runs", data, _rng(k), 0.9, 0.05)
    # The result is valid data (CoLocationData validates it), keeps every job and one
    # co-located run, and drops the samples of dropped runs.
    assert set(out.runs["job"]) == set(data.runs["job"])
    assert (out.run_sizes() >= 2).any() or not (data.run_sizes() >= 2).any()
    assert out.samples is not None
    assert set(out.samples["run_id"]) <= set(out.runs["run_id"])
    assert len(out.runs) < len(data.runs)


def test_duplicate_runs_repeats_runs_with_their_samples(data3: CoLocationData) -> None:
    out, _, detail = _perturb("duplicate_runs", data3, _rng(), 0.2, 0.05)
    new = sorted(set(out.runs["run_id"]) - set(data3.runs["run_id"]))
    assert new and all("#dup" in r for r in new)
    assert data3.samples is not None and out.samples is not None
    for r in new:
        orig = r.split("#dup")[0]
        a = out.runs.loc[out.runs["run_id"] == r, ["job", "throughput"]].reset_index(drop=True)
        b = data3.runs.loc[data3.runs["run_id"] == orig, ["job", "throughput"]]
        pd.testing.assert_frame_equal(a, b.reset_index(drop=True))
        assert (out.samples["run_id"] == r).sum() == (data3.samples["run_id"] == orig).sum()
    assert detail.startswith(f"duplicated {len(new)} of")


def test_bootstrap_keeps_isolated_runs_and_the_number_of_co_located_runs(
    data3: CoLocationData,
) -> None:
    out, _, _ = _perturb("bootstrap_runs", data3, _rng(3), 0.2, 0.05)
    size_in, size_out = data3.run_sizes(), out.run_sizes()
    assert (size_out == 1).sum() == (size_in == 1).sum()
    assert (size_out >= 2).sum() == (size_in >= 2).sum()
    assert set(out.runs["run_id"]) != set(data3.runs["run_id"])  # some run drawn twice


def test_jitter_multiplies_throughputs_by_lognormal_noise() -> None:
    data = synthetic(12, seed=0, samples_per_run=0)
    out, _, _ = _perturb("jitter", data, _rng(), 0.2, 0.1)
    ratio = np.log(out.runs["throughput"].to_numpy() / data.runs["throughput"].to_numpy())
    n = len(ratio)
    # n = 90 log ratios from N(0, 0.1^2): the sample sd is within 0.1 * (1 +- 5/sqrt(2n)).
    assert abs(ratio.std(ddof=1) - 0.1) <= 0.1 * 5 / math.sqrt(2 * n), ratio.std()
    assert abs(ratio.mean()) <= 5 * 0.1 / math.sqrt(n)


def test_relabel_is_a_bijection_and_a_row_permutation(data3: CoLocationData) -> None:
    out, mapping, _ = _perturb("relabel", data3, _rng(1), 0.2, 0.05)
    assert mapping is not None
    assert sorted(mapping) == sorted(set(data3.runs["job"]))
    assert len(set(mapping.values())) == len(mapping)
    back = {v: k for k, v in mapping.items()}
    restored = out.runs.assign(job=out.runs["job"].map(back))
    key = ["run_id", "job", "throughput"]
    pd.testing.assert_frame_equal(
        restored[key].sort_values(key).reset_index(drop=True),
        data3.runs[key].sort_values(key).reset_index(drop=True),
    )
    assert not out.runs["run_id"].equals(data3.runs["run_id"])  # rows were permuted


# ------------------------------------------------------------------------- the report


def test_report_has_one_replicate_per_perturbation_and_every_job(
    report: StabilityReport, data3: CoLocationData
) -> None:
    assert report.perturbations == PERTURBATIONS
    assert [(r.perturbation, r.replicate) for r in report.replicates] == [
        (p, 0) for p in PERTURBATIONS
    ]
    jobs = sorted(set(data3.runs["job"]))
    assert sorted(j.job for j in report.jobs) == jobs
    for r in report.replicates:
        assert sorted(r.job_z) == jobs
        for v in (r.prediction_z_median, r.prediction_z_max, r.latent_z_median, r.latent_z_max):
            assert math.isfinite(v) and v >= 0
        assert r.prediction_z_median <= r.prediction_z_max
        assert r.latent_z_median <= r.latent_z_max
        assert r.coverage_90 is not None and 0 <= r.coverage_90 <= 1
        # The largest latent move is some job's largest; a job's RMS move over its
        # predictions lies within the range of the prediction moves.
        assert max(r.job_latent_z.values()) == r.latent_z_max
        assert sorted(r.job_latent_z) == jobs
        assert all(0 <= z <= r.prediction_z_max + 1e-12 for z in r.job_z.values())
    assert report.reference["holdout_rows"] > 0
    assert report.stable == (not report.flagged and all(report.coverage_kept.values()))


def test_each_job_flag_follows_the_documented_rule(report: StabilityReport) -> None:
    for j in report.jobs:
        moves = {
            p: float(np.median([r.job_z[j.job] for r in report.replicates if r.perturbation == p]))
            for p in report.perturbations
        }
        assert j.worst_z == max(moves.values())
        assert moves[j.worst_perturbation] == j.worst_z
        assert j.flagged == (j.worst_z > report.threshold)
        assert bool(j.reasons) == j.flagged
        assert j.suggestion is not None and j.job in j.suggestion


def test_summary_fits_one_screen_and_json_round_trips(report: StabilityReport) -> None:
    text = report.summary()
    lines = text.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 120
    assert lines[0].startswith("interplace stability: ")
    assert any(line.startswith("verdict: ") for line in lines)
    for p in report.perturbations:
        assert any(line.startswith(p) for line in lines), p
    back = json.loads(report.to_json())
    assert back["stable"] == report.stable
    assert back["flagged"] == list(report.flagged)
    assert len(back["replicates"]) == len(report.replicates)
    assert set(back["by_perturbation"]) == set(report.perturbations)


def test_plot_writes_two_pngs(report: StabilityReport, tmp_path: Path) -> None:
    paths = report.plot(tmp_path)
    assert sorted(p.name for p in paths) == ["stability_jobs.png", "stability_moves.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A results folder is created with its parents (as the simulator's plots are).
    made = report.plot(tmp_path / "new" / "plots")
    assert [p.parent for p in made] == [tmp_path / "new" / "plots"] * 2
    with pytest.raises(InputError, match=r"plot directory .* exists and is not a directory"):
        report.plot(paths[0])


def test_the_same_seed_gives_the_same_report_and_workers_do_not_matter(
    data3: CoLocationData,
) -> None:
    # Two seed refits in two spawned processes against the same two in this process: every
    # fit seeds its own RNG, so the figures agree bit for bit.
    kw = {"perturbations": ("seed", "relabel"), "n": 1, "steps": 30}
    one = stability(data3, workers=1, **kw)  # type: ignore[arg-type]
    two = stability(data3, workers=2, **kw)  # type: ignore[arg-type]
    assert one.to_dict() == two.to_dict()


def test_progress_shows_a_bar_of_fits_on_stderr(
    data3: CoLocationData, capsys: pytest.CaptureFixture[str]
) -> None:
    stability(data3, perturbations=("seed",), n=2, steps=10, workers=1, progress=True)
    err = capsys.readouterr().err
    assert "stability" in err and "2/2" in err
    stability(data3, perturbations=("seed",), n=1, steps=10, workers=1)
    assert capsys.readouterr().err == ""


def test_a_subset_of_perturbations_reproduces_the_full_run(
    report: StabilityReport, data3: CoLocationData
) -> None:
    # Replicate k of perturbation p is seeded by (seed, position of p, k): choosing fewer
    # perturbations changes none of the others.
    sub = stability(data3, perturbations=("jitter",), n=1, steps=STEPS, workers=1)
    full = next(r for r in report.replicates if r.perturbation == "jitter")
    assert sub.replicates[0] == full


def test_relabel_with_a_family_map_maps_the_families_too(data3: CoLocationData) -> None:
    fam = {"job0": "A", "job1": "A"}
    rep = stability(data3, perturbations=("relabel",), n=1, steps=30, workers=1, family=fam)
    assert rep.replicates[0].perturbation == "relabel"
    assert all(math.isfinite(v) for v in rep.replicates[0].job_z.values())


# --------------------------------------------------------------------- the flag rule


def _replicates(job_z: dict[str, list[float]], p: str = "drop_runs") -> list[Replicate]:
    n = len(next(iter(job_z.values())))
    return [
        Replicate(
            perturbation=p,
            replicate=k,
            detail="",
            prediction_z_median=0.0,
            prediction_z_max=0.0,
            latent_z_median=0.0,
            latent_z_max=0.0,
            coverage_90=None,
            still_covered=None,
            fit_steps=1,
            job_z={j: z[k] for j, z in job_z.items()},
            job_latent_z=dict.fromkeys(job_z, 0.0),
        )
        for k in range(n)
    ]


def _pair_data(extra: list[tuple[str, str, float, float]]) -> CoLocationData:
    rows = [("iso/a", "a", 10.0), ("iso/b", "b", 10.0), ("iso/c", "c", 10.0)]
    for rid, other, ta, tb in extra:
        rows += [(rid, "a", ta), (rid, other, tb)]
    return CoLocationData(pd.DataFrame(rows, columns=["run_id", "job", "throughput"]), None, "t")


@pytest.fixture(scope="module")
def abc() -> tuple[CoLocationData, InterferenceModel]:
    # "a" is in three runs with "b" that disagree (speeds 0.9, 0.3, 0.9); "c" in one run.
    data = _pair_data(
        [("p1", "b", 9.0, 6.0), ("p2", "b", 3.0, 6.0), ("p3", "b", 9.0, 6.0), ("p4", "c", 7, 7)]
    )
    return data, fit(data, seed=0, steps=STEPS, min_steps=STEPS)


def test_a_job_is_flagged_by_the_median_over_replicates(
    abc: tuple[CoLocationData, InterferenceModel],
) -> None:
    data, model = abc
    reps = _replicates({"a": [5.0, 4.0, 0.1], "b": [9.0, 0.2, 0.1], "c": [0.1, 0.1, 0.1]})
    out = {j.job: j for j in _judge_jobs(model, data, reps, ["drop_runs"], 3.0, 0.05, 200)}
    assert out["a"].flagged and out["a"].worst_z == 4.0
    assert not out["b"].flagged  # one wild replicate of three is not enough
    assert not out["c"].flagged
    first = _judge_jobs(model, data, reps, ["drop_runs"], 3.0, 0.05, 200)[0]
    assert first.job == "a"  # flagged jobs come first


def test_flagged_jobs_say_why(abc: tuple[CoLocationData, InterferenceModel]) -> None:
    data, model = abc
    reps = _replicates({"a": [5.0], "b": [0.1], "c": [5.0]})
    # Noise sd 0.05: a's repeats differ by log 3 = 1.1, i.e. 15 noise sds: contradictory.
    out = {j.job: j for j in _judge_jobs(model, data, reps, ["drop_runs"], 3.0, 0.05, 200)}
    assert any(r.startswith("contradictory measurements") for r in out["a"].reasons)
    assert any("repeats" in r and "noise sd apart" in r for r in out["a"].reasons)
    assert out["c"].co_located_runs == 1 < MIN_RUNS
    assert any(r.startswith("too few runs") for r in out["c"].reasons)
    # The suggestion is the most uncertain pair that involves the job.
    for j in out.values():
        assert j.suggestion is not None and j.job in j.suggestion
        assert j.suggestion_sd is not None and j.suggestion_sd > 0


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"perturbations": ("shake",)}, "unknown perturbation 'shake'"),
        ({"perturbations": "seed"}, "not a string"),
        ({"perturbations": ()}, "no perturbation chosen"),
        ({"perturbations": ("seed", "seed")}, "repeat a name"),
        ({"n": 0}, "n must be an integer >= 1"),
        ({"workers": 0}, "workers must be an integer >= 1"),
        ({"fraction": 1.0}, "fraction must be in"),
        ({"threshold": -1.0}, "threshold must be"),
        ({"holdout_frac": 0.0}, "holdout fraction"),
    ],
)
def test_bad_options_are_one_line_errors(
    data3: CoLocationData, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        stability(data3, steps=10, **kwargs)  # type: ignore[arg-type]


def test_too_few_co_located_runs_to_hold_out_is_refused() -> None:
    # One co-located run: nothing was held out, coverage "-", and the verdict said STABLE.
    data = synthetic(3, seed=0, samples_per_run=0)
    pair = data.runs["run_id"].str.startswith("pair/")
    first = data.runs.loc[pair, "run_id"].iloc[0]
    one = CoLocationData(data.runs[~pair | (data.runs["run_id"] == first)], None, "one")
    with pytest.raises(InputError, match="one: needs at least two co-located runs to hold"):
        stability(one, perturbations=("seed",), n=1, steps=10)


def test_drop_samples_without_samples_is_refused_and_left_out_by_default() -> None:
    data = synthetic(3, seed=0, samples_per_run=0)
    with pytest.raises(InputError, match="drop_samples needs counter samples"):
        stability(data, perturbations=("drop_samples",), steps=10)
    rep = stability(data, perturbations=None, n=1, steps=20, workers=1, holdout_frac=None)
    assert "drop_samples" not in rep.perturbations
    assert rep.reference["coverage_90"] is None and not rep.coverage_kept


def test_dropped_runs_leave_every_job_an_isolated_run() -> None:
    # A job with two isolated runs could lose both at once: a co-located job then had no
    # reference (the perturbed data was invalid) and a job only ever run alone vanished.
    base = synthetic(4, seed=3).runs
    extra = base[base.run_id == "iso/job0"].assign(run_id="iso2/job0")
    lonely = pd.DataFrame({"run_id": ["solo/a", "solo/b"], "job": ["lonely", "lonely"],
                           "throughput": [10.0, 11.0]})
    data = CoLocationData(pd.concat([base, extra, lonely], ignore_index=True)[base.columns],
                          None, "x")
    for seed in range(60):
        out, _, _ = _perturb("drop_runs", data, np.random.default_rng(seed), 0.9, 0.0)
        size = out.run_sizes()
        alone = out.runs.loc[out.runs["run_id"].map(size).eq(1), "job"]
        assert set(alone) == set(data.runs["job"]), seed  # CoLocationData checked the rest
