"""The model's public calls refuse what they cannot use with the project's one-line
InputError, not Python's, numpy's or torch's own errors (a model API audit's findings)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from interplace.datasets import CoLocationData
from interplace.errors import InputError
from interplace.model import (
    InterferenceModel,
    Query,
    SpeedPosterior,
    best_baseline,
    co_runner_lists,
    cold_split,
    colocated_rows,
    evaluate,
    fit,
    holdout_split,
    row_queries,
    score,
)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # Was "'Query' object is not iterable".
        (lambda m, d: m.posterior_speed(Query("job0", ("job1",))),
         "queries must be a list of Query, not Query"),
        (lambda m, d: m.predict("job0", None), "co_runners must be a sequence of names"),
        (lambda m, d: m.predict_frame({"job": ["job0"]}),
         "pairs must be a pandas DataFrame, not dict"),
        # pd.NA was "co_runner <NA> is not a job name", NaN "has no co_runner".
        (lambda m, d: m.predict_frame(pd.DataFrame({"job": ["job0"], "co_runner": [pd.NA]})),
         "pairs row 0 has no co_runner"),
        (lambda m, d: holdout_split(d, seed=-1), r"seed must be an integer in \[0, 2\*\*63\)"),
        (lambda m, d: cold_split(d, cold_jobs=1, seed=2.5), "seed must be an integer"),
        (lambda m, d: fit(d, full_scale=[100.0]), "full_scale must map metric names"),
        (lambda m, d: evaluate(d, fit_kwargs={"bogus": 1}),
         "fit_kwargs: fit takes no argument 'bogus'"),
        (lambda m, d: Query("a", ("b",), shares=[("gpu_compute",)]),  # unhashable, accepted
         "shares must be a tuple"),
        # The fiftieth session's API audit: each was a TypeError, an AttributeError, a KeyError
        # or a ValueError; the empty and NaN tables scored as nan with numpy's warnings.
        (lambda m, d: m.predict("job0", ["job1"], shares=[None]), "shares must be a sequence"),
        (lambda m, d: m.predict("job0", ["job1"], shares=5), "shares must be a sequence"),
        (lambda m, d: SpeedPosterior(torch.ones(3, 2), torch.ones(5, 4)), "differ in shape"),
        (lambda m, d: SpeedPosterior(torch.ones(3), torch.ones(3)), r"must be an \(S, Q\)"),
        (lambda m, d: SpeedPosterior(torch.full((2, 2), -1.0), torch.ones(2, 2)),
         "negative or NaN"),
        (lambda m, d: SpeedPosterior(torch.full((2, 2), float("nan")), torch.ones(2, 2)),
         "negative or NaN"),
        (lambda m, d: holdout_split("data"), "data must be a CoLocationData .*, not a str"),
        (lambda m, d: cold_split(None), "data must be a CoLocationData .*, not a NoneType"),
        (lambda m, d: colocated_rows("data"), "data must be a CoLocationData"),
        (lambda m, d: best_baseline({}, 0.1), "no baseline has an MAE"),
        (lambda m, d: score(m, holdout_split(d, seed=0)[1].iloc[:0]), "none to score"),
        (lambda m, d: score(m, holdout_split(d, seed=0)[1].drop(columns="speed")),
         r"lacks column\(s\) speed"),
        (lambda m, d: score(m, holdout_split(d, seed=0)[1].assign(speed=np.nan)),
         "speed\\(s\\) missing"),
        (lambda m, d: score(m, [("job0", "job1", 0.5)]), "must be a pandas DataFrame"),
        (lambda m, d: row_queries(pd.DataFrame({"job": ["job0"]})), r"lacks column\(s\) co_runner"),
        (lambda m, d: co_runner_lists(pd.DataFrame({"job": ["job0"]})), "lacks column"),
        (lambda m, d: dataclasses.replace(m, jobs="abcd"), "jobs must be a tuple of names"),
        (lambda m, d: dataclasses.replace(m, resources=m.resources[:1] * 2),
         "each named once"),
        (lambda m, d: dataclasses.replace(m, hyper=None), "hyper must be a Hyper"),
        (lambda m, d: dataclasses.replace(m, full_scale=(float("nan"),) * len(m.metrics)),
         "full_scale must be a tuple of numbers > 0"),
    ],
)
def test_a_call_it_cannot_use_is_one_input_error(
    small_model: InterferenceModel, small_data: CoLocationData,
    call: Callable[[InterferenceModel, CoLocationData], Any], message: str,
) -> None:
    with pytest.raises(InputError, match=message) as info:
        call(small_model, small_data)
    assert "\n" not in str(info.value)


def test_a_quantile_level_may_be_a_numpy_number(small_model: InterferenceModel) -> None:
    # np.float32(0.3) was "quantile must be in [0, 1], not np.float32(0.3)"
    post = small_model.posterior_speed([Query("job0", ("job1",))], num_samples=64)
    assert post.quantile(np.float32(0.3)) == pytest.approx(post.quantile(0.3), rel=1e-6)
