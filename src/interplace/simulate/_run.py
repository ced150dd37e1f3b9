"""Running comparisons: workload + ground truth + the model the schedulers see, every policy
on the same arrivals; sweeps over seeds and loads (local processes, or Ray when installed);
plots."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interplace._parallel import spawn_map
from interplace._plot import plain_text
from interplace.errors import (
    InputError,
    atomic_write,
    check_count,
    check_seed,
    is_real,
    plain_number,
    prepare_output_dir,
)
from interplace.simulate._policies import MODEL_FREE, SIM_POLICIES, make_scheduler
from interplace.simulate._sim import GroundTruth, SimResult, ground_truth, simulate, truth_file
from interplace.simulate._workload import (
    SimJob,
    assign_types,
    from_trace,
    packaged_philly,
    synthetic,
)
from interplace.topology import Topology

__all__ = [
    "NO_VENUS",
    "TRACE_FORMATS",
    "SimConfig",
    "check_trace_format",
    "compare",
    "plot_results",
    "run_workload",
    "sweep",
]

TRACE_FORMATS = ("philly", "openb")
"""Trace file formats a simulation reads (:func:`~interplace.datasets.load_philly`,
:func:`~interplace.datasets.load_alibaba_openb`)."""

NO_VENUS = (
    "a venus trace (Lucid's cluster_throughput.csv) has arrival counts only, no job durations, "
    "so it cannot be simulated; use a philly or openb trace, or --trace synthetic"
)
"""Why ``venus`` is no simulation trace format: :func:`~interplace.datasets.load_venus` reads
arrivals without durations (a job's duration is its work in the simulation), and interplace
invents none."""


def check_trace_format(trace_format: str) -> None:
    """Refuse a trace format a simulation cannot read (``venus``: :data:`NO_VENUS`).

    >>> check_trace_format("venus")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: a venus trace (...) has arrival counts only, no job durations...
    """
    if trace_format == "venus":
        raise InputError(NO_VENUS)
    if trace_format not in TRACE_FORMATS:
        raise InputError(f"unknown trace format {trace_format!r} "
                         f"(choose from {', '.join(TRACE_FORMATS)})")


@dataclass(frozen=True)
class SimConfig:
    """One simulation setting: trace (``"philly"``: the packaged excerpt, ``"synthetic"``, or
    a path with ``trace_format``, one of :data:`TRACE_FORMATS`), ground truth, topology spec,
    jobs, load, seed, policies (a tuple of names of
    :data:`~interplace.simulate._policies.SIM_POLICIES`, each once), ``interval_s``.

    >>> SimConfig(policies="oracle")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: policies must be a tuple of policy names, not the string ...
    """

    trace: str = "philly"
    ground_truth: str = "gavel-v100"
    topology: str = "dgx-a100*8"
    n_jobs: int = 400
    load: float = 1.0
    seed: int = 0
    policies: tuple[str, ...] = SIM_POLICIES
    trace_format: str = "philly"
    interval_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("trace", "ground_truth", "trace_format"):
            value = getattr(self, name)
            if not (isinstance(value, str) and value):
                raise InputError(f"{name} must be a non-empty string, not {value!r}")
        if not (isinstance(self.topology, str | os.PathLike) and str(self.topology)):
            raise InputError(f"topology must be a built-in name or a file's path, not "
                             f"{self.topology!r}")
        check_count(self.n_jobs, "n_jobs")
        if not (is_real(plain_number(self.load)) and self.load > 0):
            raise InputError(f"load must be a positive number, not {self.load!r}")
        check_seed(self.seed)
        interval = self.interval_s
        if interval is not None and not (is_real(interval) and interval > 0):
            raise InputError(f"interval_s must be a finite number > 0 or None, not {interval!r}")
        policies: object = self.policies
        if isinstance(policies, str):
            raise InputError(f"policies must be a tuple of policy names, not the string "
                             f"{policies!r} (write ({policies!r},))")
        if not isinstance(policies, Iterable):
            raise InputError(f"policies must be a tuple of policy names, not {policies!r}")
        policies = tuple(policies)
        if not policies:
            raise InputError("policies names no policy")
        for p in policies:
            if p not in SIM_POLICIES:
                raise InputError(
                    f"unknown policy {p!r} (choose from {', '.join(SIM_POLICIES)})")
            if policies.count(p) > 1:
                raise InputError(f"policies names {p!r} twice")
        object.__setattr__(self, "policies", policies)


def run_workload(config: SimConfig, truth: GroundTruth, max_gpus: int) -> list[SimJob]:
    """The typed jobs of ``config`` (its trace, first ``n_jobs``, load, seeded types), each of
    1 to ``max_gpus`` GPUs: a trace's first ``n_jobs`` of those, or synthetic jobs drawn
    with no more (:func:`~interplace.simulate.synthetic`)."""
    if not isinstance(config, SimConfig):
        raise InputError(f"config must be a SimConfig, not {type(config).__name__}")
    if not isinstance(truth, GroundTruth):
        raise InputError(f"truth must be a GroundTruth, not {type(truth).__name__}")
    check_count(max_gpus, "max_gpus")
    if config.trace not in ("synthetic", "philly"):
        check_trace_format(config.trace_format)
    if config.trace == "synthetic":
        # Synthetic: the load multiplies a base rate of 60 jobs an hour.
        jobs = synthetic(config.n_jobs, config.seed, rate_per_h=60.0 * config.load,
                         max_gpus=max_gpus)
    else:
        if config.trace == "philly":
            trace = packaged_philly()
        else:
            from interplace.datasets import load_alibaba_openb, load_philly

            loaders = {"philly": load_philly, "openb": load_alibaba_openb}
            trace = loaders[config.trace_format](config.trace)
        # Problems are named by the trace the user gave (its path), not the trace's format.
        jobs = from_trace(trace, config.n_jobs, load=config.load, max_gpus=max_gpus,
                          what=config.trace)
    return assign_types(jobs, truth.types, config.seed, multi_gpu_types=truth.multi_gpu_types)


def _model_for(truth_spec: str, seed: int) -> tuple[Any, Any]:
    """The model the schedulers see (fitted on 70% of the co-located runs) and its fit
    pairs."""
    from interplace.model import fit, holdout_split

    path = truth_file(truth_spec)
    if path is None:
        from interplace.datasets import load_gavel

        data = load_gavel(truth_spec.split("-", 1)[1]).data
    else:
        from interplace.datasets.runs import CoLocationData, read_runs

        data = CoLocationData(read_runs(path), None, path.stem)
    train, _ = holdout_split(data, holdout_frac=0.3, seed=seed)
    return fit(train, seed=seed), train.pairs()


def compare(
    config: SimConfig,
    *,
    model: Any = None,
    measured: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, SimResult]:
    """Every policy of ``config`` on the same arrivals; ``model``: fit one
    (:func:`~interplace.model.fit`) if None and a policy reads one; a comparison of
    :data:`~interplace.simulate._policies.MODEL_FREE` policies alone fits none."""
    from interplace.topology import load

    if not isinstance(config, SimConfig):
        raise InputError(f"config must be a SimConfig, not {type(config).__name__}")
    if config.trace not in ("synthetic", "philly"):
        check_trace_format(config.trace_format)  # before the topology and truth are loaded
    topology: Topology = load(config.topology)
    truth = ground_truth(config.ground_truth)
    machine = max(len([g for g in topology.gpus() if topology.gpu(g).machine == m])
                  for m in topology.machines())
    jobs = run_workload(config, truth, machine)
    if model is None and not set(config.policies) <= MODEL_FREE:
        model, measured = _model_for(config.ground_truth, config.seed)
    results = {}
    for name in config.policies:
        scheduler = make_scheduler(name, topology, model, truth, measured=measured,
                                   seed=config.seed)
        results[name] = simulate(jobs, topology, truth, scheduler, interval_s=config.interval_s)
        if progress is not None:
            progress(name)
    return results


def _one(config: SimConfig) -> dict[str, dict[str, float]]:
    return {k: v.metrics() for k, v in compare(config).items()}


def sweep(
    configs: Sequence[SimConfig], *, workers: int | None = None, ray: bool = False
) -> list[dict[str, dict[str, float]]]:
    """Metrics of each config: through Ray (``ray=True``, needs ``interplace[ray]``) or local
    processes. Each config is seeded on its own, so results are identical either way."""
    if ray:
        try:
            import ray as ray_mod  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise InputError('--ray needs Ray: pip install "interplace[ray]"') from None
        if not ray_mod.is_initialized():
            import logging

            ray_mod.init(include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING)
        task = ray_mod.remote(_one)
        return list(ray_mod.get([task.remote(c) for c in configs]))
    return spawn_map(_one, configs, workers or os.cpu_count() or 1)


@plain_text
def plot_results(results: dict[str, SimResult], directory: str | os.PathLike[str]) -> list[Path]:
    """``jct_cdf.png`` (JCT CDF per policy) and ``timeline.png`` (queue length and GPU
    utilisation over time per policy) into ``directory`` (created with its parents), written
    atomically."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = prepare_output_dir(directory, "plot directory")
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, r in results.items():
        jct = np.sort(r.jct()) / 60.0
        ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name, lw=1.2)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (minutes, log scale)")
    ax.set_ylabel("share of jobs")
    ax.set_title("JCT CDF per policy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [out / "jct_cdf.png", out / "timeline.png"]
    with atomic_write(paths[0], "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    fig = Figure(figsize=(7, 6))
    FigureCanvasAgg(fig)
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    for name, r in results.items():
        t = np.asarray([e[0] for e in r.timeline]) / 60.0
        top.step(t, [e[1] for e in r.timeline], where="post", label=name, lw=1)
        bottom.step(t, [e[2] / r.n_gpus for e in r.timeline], where="post", label=name, lw=1)
    top.set_ylabel("queued jobs")
    bottom.set_ylabel("GPUs busy (share)")
    bottom.set_xlabel("time (minutes)")
    top.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    with atomic_write(paths[1], "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    return paths
