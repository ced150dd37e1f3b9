"""Calibration of the pair effects' credible intervals, on two kinds of synthetic truth.

Run: ``python benchmarks/pair_calibration.py [--seeds 21 22] [--truth generator model]
[--noise 0.03] [--draws 1000] [--nuts N [--chains K] [--workers W]
[--nuts-start default|plain|library]] [--map STEPS]
[--out results.json]``

Issue 15 asks that the posterior "cover the true pair effects at their nominal rate". For each
data seed (the recovery test's: ``synthetic(12, seed, pair_rank=2, pair_scale=0.7,
samples_per_run=10)``) and each kind of truth it fits the default model (``measured=False``:
the second stage does not touch the pair factors) and scores the 144 double-centred pair
effects :math:`z_{jk} = u_j \\cdot w_k` (less their row and column means, the part no per-job
term can absorb) against the truth:

- ``generator``: the synthetic generator's own pair effect, which scales a co-runner's demand
  by :math:`e^{z}` in the generator's contention curve (``tests/model/test_pair_recovery.py``).
- ``model``: the data set's co-located speeds replaced by draws from the *model's own*
  likelihood (:func:`interplace.model._net.log_speed`) at the posterior means of a rank-0 fit
  to the same data, plus a known rank-2 term (:math:`u \\sim \\mathcal N(0, 0.7^2)`,
  :math:`w \\sim \\mathcal N(0, 1)`, seeded) and ``--noise`` log-normal measurement noise; the
  counters are kept (they are what the rank-0 fit's demands came from). Here the truth is on
  the model's own scale.

Per case: the share of effects inside their central 90% interval (nominal 0.90), the spread
of the errors in posterior standard deviations (1 if calibrated), the slope of the posterior
means regressed on the truth (1: neither stretched nor shrunk) and their correlation; and how
closely the posterior fits the data it was fitted on: the fitted speed noise (the Student-t
scale's posterior median), and ``train_rms`` and ``train_mad``, the root mean square and the
median absolute value of the co-located speeds' log residuals at the posterior medians (with
``--truth model`` the data's noise, ``--noise``, is their floor: its median absolute value is
0.674 ``--noise``). On these 12-job sets the default fit is a mixture of four tempered
restarts (:func:`~interplace.model.fit`); the training residuals are then left out (None): the
components' pair factors need not align, so the latents' medians across them are no point of
the posterior.

``--nuts N`` also draws a reference posterior of the same model on the same data by NUTS
(``pyro.infer.NUTS`` on the fit's own :class:`~interplace.model._net.InterferenceNet`, one
chain, ``N`` warm-up and ``N`` kept draws, tree depth up to 8, seed 0, the log joint compiled
by ``torch.jit.trace``; ``benchmarks/_reference.py``) and scores it the same way: what the
exact posterior would give, against what the variational fit gives. Where the chains start,
``--nuts-start``: ``default``, the SVI posterior medians of the default mixture's first
component; ``plain``, those of one plain fit (``restarts=1, temper=1``); ``library``, the
library's own exact-inference fit, ``fit(nuts=Nuts(K, N, N))``, whose chain :math:`c` starts
at its own untempered SVI restart (its rows then also hold the fit's ``info["nuts"]``).
``--map STEPS`` scores the posterior mode (Adam on the log joint from the SVI medians; no
coverage or error spread). NUTS is slow: a chain of ``N = 300`` took about 830 s on one core
uncompiled from one plain fit (2026-11-25), about 470 s compiled (2026-11-27); from the
default mixture's first component (a tempered fit, noise 0.09) two uncompiled chains ran over
28 CPU-minutes each without finishing (2026-11-27).

With ``--chains K`` (K > 1) each case runs K NUTS chains, seeded 0 to K - 1 (all from the
same start but with ``library``), in ``--workers`` processes; each chain is scored alone
(``nuts``, with its ``chain``) and their draws pooled into one posterior (``nuts_pooled``;
single chains of this model settle in different modes, ``benchmarks/inference_gap.py``). Each
NUTS row also gives the pair components a chain keeps, ``rank``: how many shrinkage scales
``pair_scale`` have a posterior median above 0.3 (the recovery test's threshold); of a pooled
posterior, the list of its chains' (components may swap places between chains, so the pooled
scales' medians mean nothing).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _reference import medians, nuts, posterior_mode
from _results import save_json

from interplace.datasets import CoLocationData, synthetic
from interplace.model import InterferenceModel, Nuts, fit
from interplace.model._data import Observations, observations_from_runs
from interplace.model._net import constrained, log_speed, pressure, reference_level, sensitivity

_Array = np.ndarray[Any, Any]


def _double_centred(z: _Array) -> _Array:
    out: _Array = z - z.mean(-1, keepdims=True) - z.mean(-2, keepdims=True)
    out = out + z.mean((-1, -2), keepdims=True)
    return out


def _mean_log_speed(p: dict[str, torch.Tensor], obs: Observations, u: torch.Tensor,
                    w: torch.Tensor) -> torch.Tensor:
    """The model's log speed of each co-located observation in ``obs`` at the latent values
    ``p`` (constrained) and pair factors ``u``, ``w``: the likelihood's location."""
    job = torch.as_tensor(obs.job)
    return log_speed(
        pressure(p["log_demand"], p["log_intensity"]),
        sensitivity(p["log_demand"], p["sens_eps"], p["sens_loc"], p["sens_slope"],
                    p["sens_scale"]),
        p["threshold"], job, torch.as_tensor(obs.co), torch.as_tensor(obs.share), u, w,
    ) + reference_level(p["iso_bias"], job, torch.as_tensor(obs.share))


def _model_truth(data: CoLocationData, seed: int, noise: float) -> tuple[CoLocationData, _Array]:
    """``data`` with its co-located speeds drawn from the model's likelihood (module
    docstring), and the planted ``(J, J)`` pair effect."""
    # One plain fit (restarts=1), as before the default became a mixture on small data: the
    # truth it generates stays the same.
    base = fit(data, seed=0, rank=0, measured=False, restarts=1)
    p = medians(base)
    rng = np.random.default_rng([seed, 7])
    u = torch.as_tensor(rng.normal(0.0, 0.7, (len(base.jobs), 2)))
    w = torch.as_tensor(rng.normal(0.0, 1.0, (len(base.jobs), 2)))
    obs = observations_from_runs(data, base.jobs, base.resources, None)
    mean = _mean_log_speed(p, obs, u, w)
    speed = np.exp(mean.numpy() + rng.normal(0.0, noise, mean.shape))
    # Observation rows follow the runs' rows run by run (observations_from_runs).
    runs = data.runs.copy()
    groups: dict[str, list[int]] = {}
    for pos, rid in enumerate(runs["run_id"].astype(str).tolist()):
        groups.setdefault(rid, []).append(pos)
    order = [pos for rows in groups.values() if len(rows) > 1 for pos in rows]
    iso = data.isolated_throughput()
    throughput = runs["throughput"].to_numpy(dtype=float).copy()
    for i, pos in enumerate(order):
        throughput[pos] = speed[i] * float(iso[runs["job"].iloc[pos]])
    runs["throughput"] = throughput
    new = CoLocationData(runs, data.samples, f"{data.name}-model-truth")
    check = observations_from_runs(new, base.jobs, base.resources, None)
    if not np.allclose(np.log(check.speed), mean.numpy(), atol=8 * noise + 1e-12):
        raise SystemExit("pair_calibration: simulated speeds landed on the wrong rows")
    return new, (u @ w.T).numpy()


class _Draws:
    """Fixed draws in the shape :func:`_score` reads from a model."""

    def __init__(self, draws: dict[str, torch.Tensor], components: int = 1) -> None:
        self._draws = draws
        self.components = components  # pooled chains: no common medians (see _score)
        self.info = {"steps": None}

    def draws(self, num_samples: int, seed: int) -> dict[str, torch.Tensor]:
        return self._draws


def _train_residuals(d: dict[str, torch.Tensor], obs: Observations) -> _Array:
    """The co-located speeds' log residuals at the draws' medians (the training data's misfit;
    the noise of the data is its floor)."""
    p = {k: v.median(0).values for k, v in d.items()}
    loc = _mean_log_speed(p, obs, p["pair_u"], p["pair_w"])
    out: _Array = np.log(obs.speed) - loc.numpy()
    return out


def _score(model: InterferenceModel | _Draws, truth: _Array, draws: int,
           obs: Observations) -> dict[str, Any]:
    """The module docstring's figures; a point estimate (one draw) has no coverage or spread."""
    d = model.draws(draws, seed=1)
    eff = _double_centred(torch.einsum("sjl,skl->sjk", d["pair_u"], d["pair_w"]).numpy())
    true = _double_centred(truth)
    lo, hi = np.quantile(eff, [0.05, 0.95], axis=0)
    mean, sd = eff.mean(0).ravel(), eff.std(0).ravel()
    point = eff.shape[0] == 1
    # A mixture's components need not align their factors (u and w are identified only up to
    # rotation), so the latents' medians across components are no point of the posterior.
    mixture = getattr(model, "components", 1) > 1
    resid = None if mixture else _train_residuals(d, obs)
    return {
        "coverage_90": None if point else float(((true >= lo) & (true <= hi)).mean()),
        "error_spread_sd": None if point else float(((mean - true.ravel()) / sd).std()),
        "slope": float(np.polyfit(true.ravel(), mean, 1)[0]),
        "correlation": float(np.corrcoef(mean, true.ravel())[0, 1]),
        "speed_noise": float(d["speed_noise"].median()),
        "train_rms": None if resid is None else float(np.sqrt(np.mean(resid**2))),
        "train_mad": None if resid is None else float(np.median(np.abs(resid))),
        "steps": model.info["steps"],
    }


def _rank(d: dict[str, torch.Tensor]) -> int:
    """Pair components kept by one chain's draws: shrinkage scales with median above 0.3."""
    return int((d["pair_scale"].median(0).values > 0.3).sum())


def _library_chains(data: CoLocationData, n: int, chains: int,
                    workers: int) -> tuple[list[dict[str, torch.Tensor]], dict[str, Any]]:
    """The chains of the library's exact-inference fit, ``fit(nuts=Nuts(chains, n, n))``
    (seed 0, each chain from its own untempered SVI restart), as ``(n, *shape)`` draws per
    chain, and the fit's ``info["nuts"]``."""
    model = fit(data, seed=0, measured=False, nuts=Nuts(chains=chains, warmup=n, draws=n),
                workers=workers)
    flat = {k: constrained(k, loc).to(torch.float64)
            for k, (loc, _) in model.posterior.items()}
    # Component i of the pooled model is draw i // chains of chain i % chains.
    runs = [{k: v[c::chains] for k, v in flat.items()} for c in range(chains)]
    return runs, model.info["nuts"]


def _nuts_rows(model: InterferenceModel, data: CoLocationData, truth: _Array,
               obs: Observations, n: int, chains: int, workers: int,
               library: bool = False) -> list[dict[str, Any]]:
    """The NUTS rows of one case: each chain alone, and pooled when there are several; with
    ``library`` the chains of :func:`_library_chains` (``model`` unused)."""
    diagnostics: dict[str, Any] = {}
    if library:
        runs, diagnostics = _library_chains(data, n, chains, workers)
    elif chains == 1:
        runs = [nuts(model, data, n)]
    else:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, chains), mp_context=ctx) as pool:
            # One chain per task; nuts itself runs torch on one thread.
            futures = [pool.submit(nuts, model, data, n, c) for c in range(chains)]
            runs = [f.result() for f in futures]
    rows = [{"posterior": "nuts", "chain": c, "rank": _rank(d), **_score(_Draws(d), truth, n, obs)}
            for c, d in enumerate(runs)]
    if chains > 1:
        both = {k: torch.cat([d[k] for d in runs]) for k in runs[0]}
        rows.append({"posterior": "nuts_pooled", "chains": list(range(chains)),
                     "rank": [_rank(d) for d in runs], **({"nuts": diagnostics} if library else {}),
                     **_score(_Draws(both, chains), truth, n * chains, obs)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[21, 22])
    ap.add_argument("--truth", nargs="+", choices=("generator", "model"),
                    default=["generator", "model"])
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--nuts", type=int, default=0, metavar="N",
                    help="also score a NUTS reference posterior (N warm-up and N kept draws)")
    ap.add_argument("--chains", type=int, default=1, metavar="K",
                    help="NUTS chains per case, scored alone and pooled (default 1)")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes for the NUTS chains (default 1)")
    ap.add_argument("--nuts-start", choices=("default", "plain", "library"), default="default",
                    help="start the NUTS chains at the default fit's medians (its first "
                         "component's), at one plain fit's (restarts=1, temper=1), or run "
                         "the library's fit(nuts=...) (each chain from its own restart)")
    ap.add_argument("--map", type=int, default=0, metavar="STEPS",
                    help="also score the posterior mode (STEPS Adam steps from the SVI medians)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results: dict[str, Any] = {"seeds": args.seeds, "noise": args.noise, "cases": []}
    for seed in args.seeds:
        data = synthetic(12, seed=seed, pair_rank=2, pair_scale=0.7, samples_per_run=10)
        for kind in args.truth:
            if kind == "generator":
                assert data.truth is not None
                fitted_on, truth = data, np.asarray(data.truth["pair_effect"])
            else:
                fitted_on, truth = _model_truth(data, seed, args.noise)
            model = fit(fitted_on, seed=0, measured=False)
            obs = observations_from_runs(fitted_on, model.jobs, model.resources, None)
            rows = [{"seed": seed, "truth": kind, "posterior": "svi",
                     **_score(model, truth, args.draws, obs)}]
            if args.map:
                mode = _Draws(posterior_mode(model, fitted_on, args.map))
                rows.append({"seed": seed, "truth": kind, "posterior": "map",
                             **_score(mode, truth, 1, obs)})
            if args.nuts:
                start = model if args.nuts_start != "plain" else fit(
                    fitted_on, seed=0, measured=False, restarts=1, temper=1.0)
                rows += [{"seed": seed, "truth": kind, "start": args.nuts_start, **row}
                         for row in _nuts_rows(start, fitted_on, truth, obs, args.nuts,
                                               args.chains, args.workers,
                                               library=args.nuts_start == "library")]
            for row in rows:
                results["cases"].append(row)
                print(json.dumps(row), file=sys.stderr)
    if args.out:
        save_json(results, args.out)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
