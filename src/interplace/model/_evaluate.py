"""Held-out evaluation of the model against simple baselines, on seeded splits."""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from interplace.datasets.runs import CoLocationData
from interplace.errors import InputError, check_count, check_seed, is_real
from interplace.model._data import FamilySpec, device_of, select_mode, subset_runs
from interplace.model._fit import fit
from interplace.model._fitted import InterferenceModel, Query, SpeedPosterior
from interplace.model._topo import share_table
from interplace.topology import Topology

__all__ = [
    "baselines",
    "best_baseline",
    "co_runner_lists",
    "cold_split",
    "colocated_rows",
    "evaluate",
    "family_lookup",
    "holdout_split",
    "row_queries",
    "score",
    "solo_gpu_util",
]


def colocated_rows(data: CoLocationData) -> pd.DataFrame:
    """One row per job instance of every run with two or more rows, in runs-table order.

    Columns: ``run_id``, ``job``, ``co_runner`` (the other instances' jobs joined by ``+``,
    sorted), ``speed`` (throughput over the job's isolated throughput) and ``co_runners``
    (the same jobs as a tuple: a job's own name may hold a ``+``, so the joined text is for
    reading, the tuple for computing; :func:`co_runner_lists`). Where the runs table has a
    ``device`` column, also ``device`` (the row's; ``""`` where missing) and ``co_devices``
    (the co-runners', in ``co_runners``' order), from which :func:`row_queries` tells what
    each co-runner shares with the job.

    >>> runs = pd.DataFrame({"run_id": ["a", "b", "p", "p"], "job": ["x", "y", "x", "y"],
    ...                      "throughput": [10.0, 4.0, 5.0, 3.0]})
    >>> colocated_rows(CoLocationData(runs, None, "toy")).values.tolist()
    [['p', 'x', 'y', 0.5, ('y',)], ['p', 'y', 'x', 0.75, ('x',)]]
    """
    _check_data(data)
    runs = data.runs
    iso = data.isolated_throughput()
    rid = runs["run_id"].astype(str).tolist()
    job = runs["job"].astype(str).tolist()
    tput = runs["throughput"].to_numpy(dtype=float)
    placed = "device" in runs.columns
    device = device_of(runs)
    members: dict[str, list[int]] = {}
    for pos, r in enumerate(rid):
        members.setdefault(r, []).append(pos)
    out = []
    for pos, r in enumerate(rid):
        rows = members[r]
        if len(rows) < 2:
            continue
        others = sorted((job[q], device[q]) for q in rows if q != pos)
        co = tuple(j for j, _ in others)
        row: tuple[Any, ...] = (r, job[pos], "+".join(co), tput[pos] / float(iso[job[pos]]), co)
        out.append((*row, device[pos], tuple(d for _, d in others)) if placed else row)
    columns = ["run_id", "job", "co_runner", "speed", "co_runners"]
    return pd.DataFrame(out, columns=[*columns, "device", "co_devices"] if placed else columns)


def co_runner_lists(
    rows: pd.DataFrame, known: Collection[str] | None = None
) -> list[tuple[str, ...]]:
    """Each row's co-runners, as a tuple of job names.

    Rows of :func:`colocated_rows` carry them (``co_runners``). A table with only a
    ``co_runner`` column (names joined by ``+``) is split at ``+``, except that a cell which
    is itself a name in ``known`` is that one job (as
    :meth:`~interplace.model.InterferenceModel.queries_from_frame` reads it).

    >>> t = pd.DataFrame({"job": ["a", "a"], "co_runner": ["b+c", "gemm+memcpy"]})
    >>> co_runner_lists(t, known={"a", "b", "c", "gemm+memcpy"})
    [('b', 'c'), ('gemm+memcpy',)]
    """
    _check_rows(rows, (), "co-located rows")
    if "co_runners" in rows.columns:
        return [tuple(c) for c in rows["co_runners"]]
    names = set(known or ())
    return [
        (c,) if c in names else tuple(c.split("+")) for c in rows["co_runner"].astype(str)
    ]


def _check_data(data: object) -> None:
    if not isinstance(data, CoLocationData):
        raise InputError("data must be a CoLocationData (interplace.datasets loads one), not a "
                         f"{type(data).__name__}")


def _check_rows(rows: object, need: Sequence[str], what: str) -> pd.DataFrame:
    """``rows`` if it is a table with the columns ``need`` (and ``co_runner`` or
    ``co_runners``); otherwise an :class:`InputError` naming what is wrong."""
    if not isinstance(rows, pd.DataFrame):
        raise InputError(f"{what} must be a pandas DataFrame, not a {type(rows).__name__}")
    missing = [c for c in need if c not in rows.columns]
    if "co_runner" not in rows.columns and "co_runners" not in rows.columns:
        missing.append("co_runner")
    if missing:
        raise InputError(f"{what} lacks column(s) {', '.join(missing)}")
    return rows


def _colocated_runs(data: CoLocationData) -> list[str]:
    _check_data(data)
    size = data.run_sizes()
    return sorted(str(r) for r in size.index[size >= 2])


def holdout_split(
    data: CoLocationData, *, holdout_frac: float = 0.3, seed: int = 0
) -> tuple[CoLocationData, pd.DataFrame]:
    """Hold out a seeded ``holdout_frac`` share of the co-located runs.

    Every isolated run (and its counters) stays in training. Returns the training data and the
    held-out rows as :func:`colocated_rows` gives them.

    >>> from interplace.datasets import synthetic
    >>> train, test = holdout_split(synthetic(5, seed=0), holdout_frac=0.3, seed=1)
    >>> test["run_id"].nunique(), len(_colocated_runs(train))
    (4, 11)
    """
    if not (is_real(holdout_frac) and 0 < holdout_frac < 1):
        raise InputError(f"holdout fraction must be in (0, 1), not {holdout_frac!r}")
    runs = _colocated_runs(data)
    if len(runs) < 2:
        raise InputError(f"{data.name}: needs at least two co-located runs to hold some out")
    rng = np.random.default_rng(check_seed(seed))
    n_out = min(max(1, round(holdout_frac * len(runs))), len(runs) - 1)
    out = set(rng.permutation(runs)[:n_out].tolist())
    keep = set(data.runs["run_id"].astype(str)) - out
    rows = colocated_rows(data)
    test = rows.loc[rows["run_id"].isin(out)].reset_index(drop=True)
    return subset_runs(data, keep, f"{data.name} (train)"), test


def cold_split(
    data: CoLocationData, *, cold_jobs: int = 8, seed: int = 0
) -> tuple[CoLocationData, pd.DataFrame, list[str]]:
    """Hold out every co-located run of ``cold_jobs`` seeded jobs (cold start).

    Their isolated runs and counters stay in training, so the model knows them only from
    running alone. Returns the training data, the held-out rows and the cold jobs.
    """
    _check_data(data)
    check_count(cold_jobs, "cold jobs")
    rows = colocated_rows(data)
    candidates = sorted(rows["job"].unique().tolist())
    if cold_jobs >= len(candidates):
        raise InputError(
            f"{data.name}: {cold_jobs} cold jobs asked for, but only {len(candidates)} jobs run "
            "co-located; some must stay warm"
        )
    rng = np.random.default_rng(check_seed(seed))
    cold = sorted(rng.permutation(candidates)[:cold_jobs].tolist())
    cold_set = set(cold)
    runs_with = {
        r
        for r, j, c in zip(rows["run_id"], rows["job"], rows["co_runners"], strict=True)
        if j in cold_set or any(x in cold_set for x in c)
    }
    keep = set(data.runs["run_id"].astype(str)) - runs_with
    test = rows.loc[rows["run_id"].isin(runs_with)].reset_index(drop=True)
    if len(test) == len(rows):
        raise InputError(f"{data.name}: holding out {cold_jobs} jobs leaves no co-located run")
    return subset_runs(data, keep, f"{data.name} (train)"), test, cold


def solo_counters(data: CoLocationData) -> pd.DataFrame:
    """Mean of each counter metric over each job's isolated runs: the mean of each run's
    samples, then the mean over the job's runs (rows: jobs with any; columns: metrics).

    >>> from interplace.datasets import synthetic
    >>> solo_counters(synthetic(3, seed=0)).shape[0]
    3
    """
    if data.samples is None or len(data.samples) == 0:
        return pd.DataFrame()
    size = data.run_sizes()
    alone = data.runs.loc[data.runs["run_id"].map(size).eq(1), ["run_id", "job"]]
    job_of = dict(zip(alone["run_id"].astype(str), alone["job"].astype(str), strict=True))
    s = data.samples
    frame = pd.DataFrame({
        "run": s["run_id"].astype(str),
        "metric": s["metric"].astype(str),
        "value": pd.to_numeric(s["value"], errors="coerce"),
    }).dropna()
    per_run = frame.groupby(["run", "metric"])["value"].mean().reset_index()
    per_run["job"] = per_run["run"].map(job_of)
    per_run = per_run.dropna(subset=["job"])
    if per_run.empty:
        return pd.DataFrame()
    return per_run.pivot_table(index="job", columns="metric", values="value", aggfunc="mean")


def solo_gpu_util(data: CoLocationData) -> pd.Series:
    """Mean ``gpu_util_pct`` of each job's isolated runs (jobs without one are absent)."""
    c = solo_counters(data)
    if "gpu_util_pct" not in c.columns:
        return pd.Series(dtype=float, name="gpu_util_pct")
    return c["gpu_util_pct"].dropna().rename("gpu_util_pct")


def baselines(train: CoLocationData, test: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """MAE of the simple predictors on ``test`` (rows of :func:`colocated_rows`).

    ``no_interference`` predicts 1; ``global_mean`` the mean training speed; ``per_job_mean``
    the job's mean training speed (the global mean for a job with none); ``util_sum``
    :math:`\\min(1, 100 / \\sum \\text{solo GPU util})` over the job and its co-runners, where
    every one has solo ``gpu_util_pct`` counters (``mae`` is None otherwise).
    """
    rows = colocated_rows(train)
    y = test["speed"].to_numpy(dtype=float)
    global_mean = float(rows["speed"].mean()) if len(rows) else 1.0
    per_job = rows.groupby("job")["speed"].mean()
    preds: dict[str, np.ndarray[Any, Any] | None] = {
        "no_interference": np.ones_like(y),
        "global_mean": np.full_like(y, global_mean),
        "per_job_mean": test["job"].map(per_job).fillna(global_mean).to_numpy(dtype=float),
    }
    util = solo_gpu_util(train)
    total = []
    known = set(train.runs["job"].astype(str))
    for job, co in zip(test["job"], co_runner_lists(test, known), strict=True):
        names = [job, *co]
        if all(n in util.index for n in names):
            total.append(float(sum(util[n] for n in names)))
        else:
            total.append(math.nan)
    tot = np.asarray(total)
    preds["util_sum"] = (
        None
        if len(tot) == 0 or np.isnan(tot).any()
        else np.minimum(1.0, 100.0 / np.maximum(tot, 1e-9))
    )
    out: dict[str, dict[str, Any]] = {}
    for name, p in preds.items():
        out[name] = {"mae": None if p is None else float(np.mean(np.abs(p - y)))}
    return out


def family_lookup(
    train: CoLocationData, test: pd.DataFrame, families: Mapping[str, str | None]
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A baseline that knows job families: the mean training speed of the same families.

    For a test row (job ``j`` next to co-runners ``C``) it predicts the mean training speed of
    rows whose job has ``j``'s family and whose co-runners have the families of ``C``; failing
    that, ``j``'s own mean training speed, then its family's, then the global mean. A job
    without a family (None, or absent from ``families``) is a family of its own. This is the
    yardstick for a model fitted with families: it uses the same information.

    >>> runs = pd.DataFrame({"run_id": ["a", "b", "c", "p", "p", "q", "q"],
    ...                      "job": ["x", "y", "z", "x", "y", "z", "z"],
    ...                      "throughput": [10.0, 4.0, 2.0, 5.0, 3.0, 1.5, 1.0]})
    >>> test = pd.DataFrame({"job": ["z", "x"], "co_runner": ["y", "y"], "speed": [0.6, 0.5]})
    >>> family_lookup(CoLocationData(runs, None, "toy"), test, {"x": "F", "z": "F"}).tolist()
    [0.5, 0.5]
    """
    rows = colocated_rows(train)

    def fam(job: str) -> str:
        f = families.get(job)
        return f"job:{job}" if f is None else f"family:{f}"

    def key(job: str, co: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        return fam(job), tuple(sorted(fam(c) for c in co))

    global_mean = float(rows["speed"].mean()) if len(rows) else 1.0
    by_key: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    by_job: dict[str, list[float]] = {}
    by_fam: dict[str, list[float]] = {}
    for job, co, speed in zip(rows["job"], rows["co_runners"], rows["speed"], strict=True):
        by_key.setdefault(key(job, co), []).append(float(speed))
        by_job.setdefault(job, []).append(float(speed))
        by_fam.setdefault(fam(job), []).append(float(speed))
    out = []
    known = set(train.runs["job"].astype(str))
    for job, co in zip(test["job"], co_runner_lists(test, known), strict=True):
        found = by_key.get(key(job, co)) or by_job.get(job) or by_fam.get(fam(job))
        out.append(float(np.mean(found)) if found else global_mean)
    return np.asarray(out, dtype=float)


def row_queries(
    rows: pd.DataFrame,
    known: Collection[str] | None = None,
    *,
    topology: Topology | None = None,
    resources: Sequence[str] | None = None,
) -> list[Query]:
    """One :class:`Query` per row of :func:`colocated_rows` (co-runners as
    :func:`co_runner_lists` reads them).

    A row whose co-runners ran on other devices (``device``, ``co_devices``) is queried with
    what each shares with the job, as :func:`~interplace.model.fit` reads the run: a
    co-runner on the job's device shares every one of ``resources`` (the model's), one on
    another device what :func:`~interplace.model.shared_resources` of ``topology`` lists
    (without a topology such a row is an :class:`InputError`, as in the fit). Rows all on one
    device are queried without ``shares`` (everything shared).
    """
    _check_rows(rows, ("job",), "co-located rows")
    lists = co_runner_lists(rows, known)
    if "co_devices" not in rows.columns:
        return [Query(j, c) for j, c in zip(rows["job"], lists, strict=True)]
    table: Mapping[tuple[str, str], Sequence[str]] | None = None  # as the fit reads runs
    out = []
    for j, c, dev, co_devs in zip(rows["job"], lists, rows["device"], rows["co_devices"],
                                  strict=True):
        if all(d == dev for d in co_devs):
            out.append(Query(j, c))
            continue
        if topology is None or resources is None:
            raise InputError(f"a held-out run places {j!r} on device {dev!r} and a co-runner "
                             "on another: pass the topology so its query knows what they share")
        if table is None:
            table = share_table(topology, {d for ds in rows["co_devices"] for d in ds}
                                | set(rows["device"]))
        shares = tuple(tuple(r for r in resources if d == dev or r in table[dev, d])
                       for d in co_devs)
        out.append(Query(j, c, shares=shares))
    return out


def best_baseline(base: dict[str, dict[str, Any]], mae: float) -> tuple[str, float | None]:
    """The baseline of :func:`baselines` with the lowest MAE, and ``mae`` over its MAE.

    The ratio is None when that baseline is exact (MAE 0).

    >>> best_baseline({"a": {"mae": 0.2}, "b": {"mae": 0.1}, "c": {"mae": None}}, 0.05)
    ('b', 0.5)
    """
    available = {k: v["mae"] for k, v in base.items() if v["mae"] is not None}
    if not available:
        raise InputError("no baseline has an MAE to compare with")
    bad = [k for k, v in available.items() if not (is_real(v) and v >= 0)]
    if bad:
        raise InputError(f"baseline {bad[0]}'s MAE is {available[bad[0]]!r}, not a number >= 0")
    best = min(available, key=lambda k: available[k])
    return best, (mae / available[best] if available[best] > 0 else None)


def score(
    model: InterferenceModel,
    test: pd.DataFrame,
    *,
    seed: int = 0,
    posterior: SpeedPosterior | None = None,
    topology: Topology | None = None,
) -> dict[str, Any]:
    """MAE, 90% interval coverage and mean interval width of ``model`` on ``test`` rows.

    ``posterior`` (of :func:`row_queries` of ``test``) is used when given instead of drawing
    a new one; ``topology`` tells what co-runners on other devices share (:func:`row_queries`).
    """
    _check_rows(test, ("job", "speed"), "test rows")
    if len(test) == 0:
        raise InputError("test rows: none to score")
    y = pd.to_numeric(test["speed"], errors="coerce").to_numpy(dtype=float)
    if not bool((np.isfinite(y) & (y >= 0)).all()):
        raise InputError(
            f"test rows: {int((~(np.isfinite(y) & (y >= 0))).sum())} speed(s) missing, not a "
            "number, infinite or negative"
        )
    post = posterior
    if post is None:
        queries = row_queries(test, model.jobs, topology=topology, resources=model.resources)
        post = model.posterior_speed(queries, seed=seed)
    if post.speed.shape[1] != len(test):
        raise InputError(f"posterior has {post.speed.shape[1]} queries for {len(test)} rows")
    lo, hi = post.q05, post.q95
    return {
        "mae": float(np.mean(np.abs(post.mean - y))),
        "coverage_90": float(np.mean((y >= lo) & (y <= hi))),
        "interval_width_90": float(np.mean(hi - lo)),
    }


def evaluate(
    data: CoLocationData,
    *,
    holdout_frac: float | None = 0.3,
    cold_jobs: int | None = None,
    seed: int = 0,
    steps: int = 3000,
    topology: Topology | None = None,
    progress: bool = False,
    fit_kwargs: dict[str, Any] | None = None,
    mode: str | None = None,
    family: FamilySpec | None = None,
    peers: bool = True,
) -> dict[str, Any]:
    """Fit on a seeded split of ``data`` and score held-out speeds against the baselines.

    With ``peers`` (default) the result also holds the peers' MAE on the same split
    (:func:`~interplace.model.peer_maes`: matrix completion, boosted trees, EBM; given the
    families when ``family`` is given; a peer whose optional extra is missing is listed as
    unavailable), the best of them (``best_peer``) and the model's ratio to it
    (``mae_ratio_to_best_peer``).

    ``cold_jobs`` (when given) holds out every co-located run of that many jobs; otherwise
    ``holdout_frac`` of the co-located runs are held out. The result is JSON-ready: the split,
    the model's MAE / coverage / width and fit time, each baseline's MAE, and the ratio of the
    model's MAE to the best available baseline. ``mode`` selects one sharing mode first
    (:func:`~interplace.model._data.select_mode`). ``family`` (a runs-table column or a job ->
    family map) fits with job families (:func:`~interplace.model.fit`) and adds the
    :func:`family_lookup` baseline, which knows them too, as ``family_baseline`` with the
    model's ratio to it; ``best_baseline`` stays the best of :func:`baselines`.
    """
    check_seed(seed)
    taken = {"seed", "steps", "topology", "progress", "family"} & set(fit_kwargs or {})
    if taken:
        raise InputError(f"fit_kwargs may not set {', '.join(sorted(taken))}: evaluate's own "
                         "arguments of that name do")
    unknown = sorted(set(fit_kwargs or {}) - set(inspect.signature(fit).parameters))
    if unknown:  # refused before the split and the fit, not as fit's TypeError
        raise InputError(f"fit_kwargs: fit takes no argument {unknown[0]!r}")
    data = select_mode(data, mode)
    if cold_jobs is not None:
        train, test, cold = cold_split(data, cold_jobs=cold_jobs, seed=seed)
        split: dict[str, Any] = {"kind": "cold_start", "cold_jobs": cold}
    else:
        if holdout_frac is None:
            raise InputError("give a holdout fraction or a number of cold jobs")
        train, test = holdout_split(data, holdout_frac=holdout_frac, seed=seed)
        split = {"kind": "random_runs", "holdout_frac": holdout_frac}
    split.update({"seed": seed, "test_rows": len(test), "test_runs": int(test["run_id"].nunique())})
    start = time.perf_counter()
    model = fit(
        train,
        seed=seed,
        steps=steps,
        topology=topology,
        progress=progress,
        family=family,
        **(fit_kwargs or {}),
    )
    fit_s = time.perf_counter() - start
    result = score(model, test, seed=seed, topology=topology)
    # steps: summed over the fit's SVI restarts (each capped by ``steps``).
    result.update({"fit_seconds": fit_s, "steps": model.info["steps"],
                   "restarts": int(model.info.get("restarts", 1))})
    base = baselines(train, test)
    best, ratio = best_baseline(base, result["mae"])
    out: dict[str, Any] = {
        "data": data.name,
        "split": split,
        "model": result,
        "baselines": base,
        "best_baseline": best,
        "mae_ratio_to_best": ratio,
    }
    if family is not None:
        pred = family_lookup(train, test, model.family_map())
        fmae = float(np.mean(np.abs(pred - test["speed"].to_numpy(dtype=float))))
        out["family"] = model.info["family"]
        out["family_baseline"] = {"mae": fmae}
        out["mae_ratio_to_family_baseline"] = result["mae"] / fmae if fmae > 0 else None
    if peers:
        from interplace.model._peers import peer_maes

        fam = model.family_map() if family is not None else None
        peer = peer_maes(train, test, families=fam, seed=seed)
        out["peers"] = peer
        avail = {k: v["mae"] for k, v in peer.items() if v["mae"] is not None}
        if avail:
            best_peer = min(avail, key=lambda k: avail[k])
            out["best_peer"] = best_peer
            out["mae_ratio_to_best_peer"] = (
                result["mae"] / avail[best_peer] if avail[best_peer] > 0 else None
            )
    return out
