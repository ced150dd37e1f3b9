"""What is left of the model's error on Lucid: structure in its held-out errors, and what
predicts it.

Run: ``python benchmarks/lucid_residuals.py [--lucid PATH] [--splits random cold] [--seeds 0
1 2 3 4] [--families none model] [--workers 2] [--no-ebm] [--out results.json]``

For each split of ``evaluate`` (``random``: 30% of the co-located runs held out; ``cold``:
every co-located run of 8 jobs; seed ``seed``) the default fit (seed ``seed``, with the runs'
``model`` column as families or without) predicts the held-out speeds, and its errors
:math:`e = \\log y - \\log \\hat y` are taken apart:

- *Group oracles* (both splits). For a grouping of the held-out rows (victim job, co-runner
  job, victim family, co-runner family, family pair, family pair with both jobs' mixed
  precision), each row's error is predicted by the shrunk mean of the *other* held-out rows
  of its group, :math:`\\sum_{i' \\ne i} e_{i'} / (n_g - 1 + \\lambda)`, :math:`\\lambda` =
  :data:`RIDGE`, and subtracted. This reads the held-out errors themselves (leave one out), so
  it bounds from above what any term at that level could gain, whatever it learned from the
  training runs: a ratio (MAE after / before) near 1 says the errors hold nothing at that level.
  Also the row's *run partner* (the other job's speed in the same held-out run): 0.3 of its
  error added.
- *Cold start by side* (``cold``): the model's and the EBM's MAE and mean error on the rows
  whose victim is cold, whose co-runner is, and both; each cold victim's mean log error (per
  predictor), its spread, the two predictors' correlation, and the cold victims' MAE with
  each cold victim's mean error taken out (in sample: the part a per-job level would carry).
  The summary correlates the model's per-job mean errors, over all seeds, with the job's
  isolated readings (what a cold job is known by).

Data-level figures in the summary: the within-run noise floor, :math:`\\overline{|y_1 -
y_2|} / \\sqrt 2` over Lucid's self-pairs (two copies of a job in one run: the mean absolute
error of a predictor that knew each pair's true speed, if a new run's noise were the
within-run noise), and whether a job's isolated throughput, against its network's
batch-size trend (log throughput linear in log batch size within network and mixed precision,
leave one out), says anything of the job's level in its co-located speeds (its victim bias in
an additive fit of all pairs): a low record would make every co-located speed of the job high.

Lucid (non-commercial licence) is read from ``--lucid``; without it the script exits with a
one-line error. The EBM needs the ``peers`` extra (``--no-ebm`` leaves it out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from _lucid import add_lucid_options, lucid_split, require_lucid
from _results import report

from interplace._parallel import spawn_map
from interplace.datasets import load_lucid
from interplace.errors import InputError
from interplace.model import fit
from interplace.model._data import job_families
from interplace.model._evaluate import row_queries, solo_counters
from interplace.model._peers import fit_ebm
from interplace.model._softimpute import biases

RIDGE = 3.0
"""The group oracles' shrinkage: a group's other rows count as ``n - 1 + RIDGE``."""

PARTNER_WEIGHT = 0.3
"""The share of the run partner's error added to a row's prediction."""


def _families(train: Any) -> dict[str, str | None]:
    jobs = sorted(train.runs["job"].astype(str).unique())
    return dict(zip(jobs, job_families(train, jobs, "model"), strict=True))


def _groups(test: pd.DataFrame, fam: dict[str, str | None]) -> dict[str, list[pd.Series]]:
    job, co = test["job"].astype(str), test["co_runner"].astype(str)
    fv = job.map(lambda j: fam.get(j) or j)
    fc = co.map(lambda j: fam.get(j) or j)
    amp_v, amp_c = job.str.endswith(" amp"), co.str.endswith(" amp")
    return {
        "victim_job": [job], "co_runner_job": [co], "victim_family": [fv],
        "co_runner_family": [fc], "family_pair": [fv, fc],
        "family_pair_amp": [fv, fc, amp_v, amp_c],
    }


def _loo(err: pd.Series, keys: list[pd.Series]) -> np.ndarray[Any, Any]:
    g = err.groupby([k.to_numpy() for k in keys])
    total, count = g.transform("sum"), g.transform("count")
    return np.asarray((total - err) / (count - 1 + RIDGE), dtype=float)


def _split(path: str, kind: str, seed: int, families: bool, ebm: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    train, test, cold = lucid_split(path, kind, seed)
    fam = _families(train)
    model = fit(train, seed=seed, family="model" if families else None)
    y = test["speed"].to_numpy(float)
    pred = model.posterior_speed(row_queries(test), seed=seed).mean
    err = pd.Series(np.log(y) - np.log(pred), index=test.index)
    mae = float(np.abs(pred - y).mean())
    row: dict[str, Any] = {"split": kind, "seed": seed, "families": families,
                           "rows": len(y), "mae": mae, "oracle_ratio": {}}
    for name, keys in _groups(test, fam).items():
        adj = pred * np.exp(_loo(err, keys))
        row["oracle_ratio"][name] = float(np.abs(adj - y).mean()) / mae
    runs = test["run_id"].astype(str)
    partner_sum = err.groupby(runs.to_numpy()).transform("sum") - err
    partners = err.groupby(runs.to_numpy()).transform("count") - 1
    partner = np.where(partners > 0, partner_sum / partners.clip(lower=1), 0.0)
    adj = pred * np.exp(PARTNER_WEIGHT * partner)
    row["oracle_ratio"]["run_partner"] = float(np.abs(adj - y).mean()) / mae
    if kind == "cold":
        preds = {"model": pred}
        if ebm:
            try:
                preds["ebm"] = fit_ebm(train, families=fam if families else None,
                                       seed=seed).predict(test)
            except InputError as exc:
                print(f"cold seed {seed}: ebm unavailable ({exc})", file=sys.stderr)
        cv = test["job"].astype(str).isin(cold).to_numpy()
        cc = test["co_runner"].astype(str).isin(cold).to_numpy()
        sides = {"victim": cv & ~cc, "co_runner": cc & ~cv, "both": cv & cc}
        row["sides"] = {
            side: {"rows": int(sel.sum()), **{
                name: {"mae": float(np.abs(p[sel] - y[sel]).mean()),
                       "bias": float((p[sel] - y[sel]).mean())}
                for name, p in preds.items()}}
            for side, sel in sides.items() if sel.any()
        }
        sel = sides["victim"]
        victim = test["job"].astype(str).to_numpy()[sel]
        per_job = {}
        for name, p in preds.items():
            e = pd.Series(np.log(y[sel]) - np.log(p[sel]))
            means = e.groupby(victim).mean()
            level = e.groupby(victim).transform("mean").to_numpy()
            per_job[name] = means
            row[f"cold_victims_{name}"] = {
                "mae": float(np.abs(p[sel] - y[sel]).mean()),
                "job_mean_error_sd": float(means.std()),
                "mae_without_job_means": float(np.abs(p[sel] * np.exp(level) - y[sel]).mean()),
            }
        row["cold_victim_mean_errors"] = {j: float(v) for j, v in per_job["model"].items()}
        if "ebm" in per_job:
            row["cold_victim_errors_corr_model_ebm"] = float(
                np.corrcoef(per_job["model"], per_job["ebm"].loc[per_job["model"].index])[0, 1])
    return row


def _split_task(job: tuple[str, str, int, bool, bool]) -> dict[str, Any]:
    """:func:`_split` on one ``(path, kind, seed, families, ebm)``, for :func:`spawn_map`."""
    return _split(*job)


def _data_figures(path: str) -> dict[str, Any]:
    """The within-run noise floor and the isolated-throughput trend check (module docstring)."""
    d = pd.read_csv(Path(path, "colocate_info.csv"), index_col=0)
    s = pd.read_csv(Path(path, "single_data.csv"))

    def key(m: pd.Series, b: pd.Series, a: pd.Series) -> pd.Series:
        return m.astype(str) + "|" + b.astype(str) + "|" + a.astype(str)

    j1 = key(d["model1"], d["batchsize1"], d["amp1"]).to_numpy()
    j2 = key(d["model2"], d["batchsize2"], d["amp2"]).to_numpy()
    same = j1 == j2
    floor = float(np.abs(d["speed1"][same] - d["speed2"][same]).mean() / np.sqrt(2))
    jobs = sorted(set(j1) | set(j2))
    ix = {j: i for i, j in enumerate(jobs)}
    n = len(jobs)
    v = np.r_[[ix[x] for x in j1], [ix[x] for x in j2]]
    c = np.r_[[ix[x] for x in j2], [ix[x] for x in j1]]
    y = np.log(np.r_[d["speed1"].to_numpy(float), d["speed2"].to_numpy(float)])
    # An additive fit: victim level a, co-runner pressure b (least squares, no ridge).
    _, a, _ = biases(y, v, c, n, ridge=0.0, iters=200)
    s = s.assign(job=key(s["model"], s["batchsize"], s["amp"]),
                 logt=np.log(s["speed"].astype(float)), logbs=np.log(s["batchsize"].astype(float)))
    dev = {}
    for _, g in s.groupby(["model", "amp"]):
        for i in g.index:
            rest = g.drop(i)
            if len(rest) >= 2 and g.at[i, "job"] in ix:
                slope, icpt = np.polyfit(rest["logbs"], rest["logt"], 1)
                dev[g.at[i, "job"]] = g.at[i, "logt"] - (slope * g.at[i, "logbs"] + icpt)
    both = [j for j in dev if j in ix]
    r = float(np.corrcoef([dev[j] for j in both], [a[ix[j]] for j in both])[0, 1])
    return {"self_pairs": int(same.sum()), "within_run_noise_floor": floor,
            "isolated_trend_jobs": len(both), "isolated_trend_corr_with_victim_level": r}


def _summary(rows: list[dict[str, Any]], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"data": _data_figures(path)}
    for kind in sorted({r["split"] for r in rows}):
        for families in sorted({r["families"] for r in rows}):
            rs = [r for r in rows if r["split"] == kind and r["families"] == families]
            if not rs:
                continue
            med: dict[str, Any] = {
                "seeds": [r["seed"] for r in rs],
                "mae": float(np.median([r["mae"] for r in rs])),
                "oracle_ratio": {k: float(np.median([r["oracle_ratio"][k] for r in rs]))
                                 for k in rs[0]["oracle_ratio"]},
            }
            if kind == "cold":
                for name in ("model", "ebm"):
                    key = f"cold_victims_{name}"
                    if all(key in r for r in rs):
                        med[key] = {k: float(np.median([r[key][k] for r in rs]))
                                    for k in rs[0][key]}
                pooled = pd.Series({(r["seed"], j): e for r in rs
                                    for j, e in r["cold_victim_mean_errors"].items()})
                solo = solo_counters(load_lucid(path))  # every job's isolated runs
                feats = solo.reindex([j for _, j in pooled.index])
                med["cold_victim_error_corr_with_readings"] = {
                    str(col): float(np.corrcoef(pooled.to_numpy(),
                                                np.log(feats[col].to_numpy(float) + 1.0))[0, 1])
                    for col in feats.columns
                }
                corr = [r["cold_victim_errors_corr_model_ebm"] for r in rs
                        if "cold_victim_errors_corr_model_ebm" in r]
                if corr:
                    med["cold_victim_errors_corr_model_ebm"] = float(np.median(corr))
            out[f"{kind}_{'families' if families else 'none'}"] = med
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_lucid_options(ap)
    ap.add_argument("--families", nargs="+", choices=("none", "model"), default=["model"])
    ap.add_argument("--no-ebm", action="store_true", help="leave the EBM peer out (faster)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    require_lucid(args.lucid)
    jobs = [(args.lucid, kind, s, fam == "model", not args.no_ebm)
            for kind in args.splits for fam in args.families for s in args.seeds]
    rows = spawn_map(_split_task, jobs, args.workers)
    report(rows, _summary(rows, args.lucid), args.out, rows_key="splits", summary_key="summary")


if __name__ == "__main__":
    main()
