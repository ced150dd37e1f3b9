"""The network's own densities (:mod:`interplace.model._net`)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from interplace.model._net import student_t_log_prob


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    batch=st.sampled_from([(), (3,)]),
    df=st.sampled_from([1.0, 2.5, 4.0, 30.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_student_t_density_is_torchs_bit_for_bit(
    n: int, batch: tuple[int, ...], df: float, seed: int
) -> None:
    # The fit's Lucid figures rest on this being the same numbers, not close ones: every
    # entry of the value and of the gradients in loc and in scale must be equal (the
    # scale's gradient sums the per-entry terms of a broadcast scale, as torch's does).
    g = torch.Generator().manual_seed(seed)
    loc = torch.randn(*batch, n, dtype=torch.float64, generator=g)
    raw = torch.randn(*batch, 1, dtype=torch.float64, generator=g)
    y = 3 * torch.randn(n, dtype=torch.float64, generator=g)
    nu = torch.tensor(df, dtype=torch.float64)
    out = {}
    for name in ("torch", "ours"):
        mu = loc.clone().requires_grad_()
        s_raw = raw.clone().requires_grad_()
        scale = torch.nn.functional.softplus(s_raw)
        if name == "torch":
            lp = torch.distributions.StudentT(nu, mu, scale, validate_args=False).log_prob(y)
        else:
            lp = student_t_log_prob(nu, mu, scale, y)
        (lp * torch.linspace(0.5, 1.5, n, dtype=torch.float64)).sum().backward()
        out[name] = (lp.detach(), mu.grad, s_raw.grad)
    for a, b in zip(out["torch"], out["ours"], strict=True):
        assert a is not None and b is not None
        assert torch.equal(a, b)


def test_the_student_t_density_takes_a_constant_df_only() -> None:
    one = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="constant, 0-dim df"):
        student_t_log_prob(torch.tensor(4.0, requires_grad=True), one, one, one)
    with pytest.raises(ValueError, match="constant, 0-dim df"):
        student_t_log_prob(4 * one, one, one, one)
