"""The model's public calls refuse what they cannot use with the project's one-line
InputError, not Python's, numpy's or torch's own errors (a model API audit's findings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import CoLocationData
from interplace.errors import InputError
from interplace.model import (
    InterferenceModel,
    Query,
    cold_split,
    evaluate,
    fit,
    holdout_split,
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
