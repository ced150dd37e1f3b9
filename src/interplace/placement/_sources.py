r"""Where placement gets speeds: the fitted model, or measured speeds (for oracles and truth).

A *speed source* is anything with a ``jobs`` tuple and ``posterior_speed(queries, *,
num_samples, seed) -> SpeedPosterior`` (:class:`interplace.model.InterferenceModel` is one).
:class:`MeasuredSpeeds` is another: it answers from a table of measured pairwise speeds, so
the same placement code can be scored on measured ground truth, or fed it as an oracle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
import pandas as pd
import torch

from interplace.errors import InputError, check_count, is_real, plain_number
from interplace.model import Query, SpeedPosterior

__all__ = ["MeasuredOverModel", "MeasuredSpeeds", "SpeedSource"]


@runtime_checkable
class SpeedSource(Protocol):
    """What placement needs of a model: its job types and a joint speed posterior."""

    @property
    def jobs(self) -> tuple[str, ...]:
        """Job types it can answer for."""
        ...

    def posterior_speed(
        self, queries: Iterable[Query], *, num_samples: int = ..., seed: int = ...
    ) -> SpeedPosterior:
        """``(S, Q)`` draws of each query's speed (a :class:`~interplace.model.SpeedPosterior`)."""
        ...


@dataclass(frozen=True, eq=False)
class MeasuredSpeeds:
    r"""Speeds read off measurements: ``speed[(job, co_runner)]`` of pairs on one GPU.

    A job next to co-runners on its own GPU runs at the product of its measured pairwise
    speeds (exact for one co-runner, which is all Gavel and Lucid measured); co-runners on
    other GPUs (a shared PCIe switch or socket, ``shares`` not covering GPU compute) slow it
    by nothing, since no data set measures that. Every draw is the same value (``S`` copies),
    so a placement scored on it has a zero-width interval. An unmeasured pair raises
    :class:`InputError` naming it, or takes ``default`` when one is given.

    ``forbidden`` holds the job-type pairs that cannot share a GPU (Gavel's out-of-memory
    pairs); policies never co-locate them. Each pair may be given as a tuple, a list or a
    set of one or two job types (one: two jobs of that type); it is kept as a frozenset.

    >>> m = MeasuredSpeeds({("a", "b"): 0.5, ("b", "a"): 0.8})
    >>> m.posterior_speed([Query("a", ("b",)), Query("b", ())], num_samples=2).mean.tolist()
    [0.5, 1.0]
    >>> MeasuredSpeeds({("a", "b"): 0.5}, forbidden=[("a", "b")]).can_share("b", "a")
    False
    """

    speed: Mapping[tuple[str, str], float]
    forbidden: frozenset[frozenset[str]] = frozenset()
    default: float | None = None
    _jobs: tuple[str, ...] = field(init=False, repr=False)
    cross_gpu: ClassVar[bool] = False
    """Co-runners on other GPUs never slow a job here (exact matching may rely on it)."""

    def __post_init__(self) -> None:
        if not isinstance(self.speed, Mapping):
            raise InputError(
                "measured speeds must map (job, co_runner) pairs of job types to speeds, not a "
                f"{type(self.speed).__name__}"
            )
        names: set[str] = set()
        for key, v in self.speed.items():
            if not (isinstance(key, tuple) and len(key) == 2
                    and all(isinstance(x, str) and x for x in key)):
                raise InputError(
                    f"measured speed key {key!r} is not a (job, co_runner) pair of job types"
                )
            a, b = key
            value = plain_number(v)
            if not (is_real(value) and value >= 0):
                raise InputError(f"measured speed of {a!r} next to {b!r} is {v!r}")
            names.update((a, b))
        object.__setattr__(self, "forbidden", _forbidden_pairs(self.forbidden))
        for pair in self.forbidden:
            names.update(pair)
        d = plain_number(self.default)
        if d is not None and not (is_real(d) and d >= 0):
            raise InputError(f"default speed must be finite and >= 0, not {self.default!r}")
        object.__setattr__(self, "default", d)
        object.__setattr__(self, "_jobs", tuple(sorted(names)))

    @property
    def never_faster(self) -> bool:
        """Whether no co-runner raises a job's speed here: no measured speed (nor the
        default) above 1, a job's speed alone (Lucid's data has pairs above 1)."""
        return all(v <= 1 for v in self.speed.values()) and (self.default or 0) <= 1

    @property
    def jobs(self) -> tuple[str, ...]:
        """Every job type named by a measurement or a forbidden pair, sorted."""
        return self._jobs

    @classmethod
    def from_pairs(
        cls,
        pairs: pd.DataFrame,
        *,
        forbidden: Iterable[tuple[str, str]] = (),
        default: float | None = None,
    ) -> MeasuredSpeeds:
        """From a table with ``job``, ``co_runner`` and ``speed`` (repeats are averaged).

        ``CoLocationData.pairs()`` is such a table.
        """
        _check_pairs_table(pairs, "pairs table")
        mean = pairs.groupby(["job", "co_runner"], sort=True)["speed"].mean()
        speed = {
            (str(key[0]), str(key[1])): float(v)
            for key, v in mean.items()
            if isinstance(key, tuple)
        }
        return cls(speed, _forbidden_pairs(forbidden), default)

    def can_share(self, a: str, b: str) -> bool:
        """Whether job types ``a`` and ``b`` may share a GPU."""
        return frozenset((a, b)) not in self.forbidden

    def pair_speed(self, job: str, co_runner: str) -> float:
        """Measured speed of ``job`` next to ``co_runner`` on one GPU."""
        v = self.speed.get((job, co_runner))
        if v is None:
            if self.default is None:
                raise InputError(f"no measured speed of {job!r} next to {co_runner!r}")
            return self.default
        return v

    def posterior_speed(
        self, queries: Iterable[Query], *, num_samples: int = 1, seed: int = 0
    ) -> SpeedPosterior:
        """Measured speeds as ``(S, Q)`` constant draws (``seed`` is unused: no randomness)."""
        del seed
        check_count(num_samples, "num_samples")
        values = []
        for q in queries:
            if not isinstance(q, Query):
                raise InputError(f"queries must be Query objects, not {type(q).__name__}")
            v = 1.0
            for k, c in enumerate(q.co_runners):
                if q.shares is None or "gpu_compute" in q.shares[k]:
                    v *= self.pair_speed(q.job, c)
            values.append(v)
        t = torch.tensor(values, dtype=torch.float64).reshape(1, -1)
        t = t.expand(num_samples, -1).clone()
        return SpeedPosterior(t, t)


def _forbidden_pairs(pairs: object) -> frozenset[frozenset[str]]:
    """``pairs`` (an iterable of tuples, lists or sets of one or two job types) as
    frozensets; a string or anything else raises :class:`InputError`."""
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Iterable):
        raise InputError(f"forbidden must be a collection of job-type pairs, not {pairs!r}")
    out = set()
    for pair in pairs:
        names = frozenset(pair) if isinstance(pair, tuple | list | set | frozenset) else None
        if names is None or not 1 <= len(names) <= 2 or not all(
            isinstance(x, str) and x for x in names
        ) or (isinstance(pair, tuple | list) and len(pair) != 2):
            raise InputError(f"forbidden pair {pair!r} is not a pair of job types")
        out.add(names)
    return frozenset(out)


def _check_pairs_table(pairs: object, what: str) -> None:
    """Raise :class:`InputError` unless ``pairs`` is a table with ``job``, ``co_runner`` and
    a numeric ``speed``, no value missing."""
    if not isinstance(pairs, pd.DataFrame):
        raise InputError(f"{what} must be a pandas DataFrame, not a {type(pairs).__name__}")
    missing = [c for c in ("job", "co_runner", "speed") if c not in pairs.columns]
    if missing:
        raise InputError(f"{what} lacks column(s) {', '.join(missing)}")
    for col in ("job", "co_runner"):
        if pairs[col].isna().any():
            raise InputError(f"{what}: {int(pairs[col].isna().sum())} row(s) without a {col}")
    if len(pairs) and not pd.api.types.is_numeric_dtype(pairs["speed"]):
        raise InputError(f"{what}: speed is not a numeric column")
    if pairs["speed"].isna().any():
        raise InputError(f"{what}: {int(pairs['speed'].isna().sum())} row(s) without a speed")


class MeasuredOverModel:
    r"""A fitted model whose predictions of measured pairs are centred on the measurements.

    A scheduler that placed jobs before has measured some pairs: the same measurements the
    model was fitted on, or newer ones. A model fitted with its second stage (the default,
    :mod:`interplace.model._cells`) already follows the pairs it was fitted on; one fitted
    ``measured=False`` smooths them (its fit of a training pair is off by its residual), and
    no model knows pairs measured after its fit. This source answers a query of one
    co-runner on the same GPU that was measured with the model's posterior draws shifted in
    log space so that their mean is the measured mean speed,
    :math:`\log v^{(s)} \leftarrow \log v^{(s)} - \log \bar v + \log \bar y` (the model's
    uncertainty around it kept); every other query (several co-runners, across GPUs,
    unmeasured pairs) is the model's. Everything else (``jobs``, ``info``, ``draws``,
    ``demand``...) is the model's.

    >>> from interplace.datasets import synthetic
    >>> from interplace.model import fit
    >>> data = synthetic(3, seed=0, samples_per_run=2)
    >>> m = fit(data, steps=200, min_steps=200, restarts=1)
    >>> both = MeasuredOverModel(m, data.pairs())
    >>> row = data.pairs().iloc[0]
    >>> got = both.posterior_speed([Query(row.job, (row.co_runner,))]).mean[0]
    >>> want = data.pairs().groupby(["job", "co_runner"])["speed"].mean()[(row.job, row.co_runner)]
    >>> bool(abs(got - want) < 1e-9)
    True
    """

    never_faster = False
    """A measured pair re-centred on its measurement may run faster than the job alone."""

    def __init__(self, model: SpeedSource, pairs: pd.DataFrame) -> None:
        if not isinstance(model, SpeedSource):
            raise InputError(
                f"MeasuredOverModel needs a fitted model (a speed source), not a "
                f"{type(model).__name__}"
            )
        _check_pairs_table(pairs, "measured pairs table")
        speed = pd.to_numeric(pairs["speed"], errors="coerce")
        if not bool((np.isfinite(speed) & (speed > 0)).all()):
            raise InputError("measured pair speeds must be finite and > 0")
        mean = speed.groupby([pairs["job"].astype(str), pairs["co_runner"].astype(str)]).mean()
        self.model = model
        self.measured: dict[tuple[str, str], float] = {
            (str(k[0]), str(k[1])): float(v) for k, v in mean.items() if isinstance(k, tuple)
        }
        known = set(model.jobs)
        self.unused: tuple[tuple[str, str], ...] = tuple(sorted(
            pair for pair in self.measured if not set(pair) <= known))
        """The measured pairs naming a job the model does not know: no query asks for them
        (a caller may want to say so: a table of other jobs' names changes nothing)."""

    @property
    def jobs(self) -> tuple[str, ...]:
        """The model's job types."""
        return tuple(self.model.jobs)

    def __getattr__(self, name: str) -> object:
        return getattr(self.model, name)

    def posterior_speed(
        self, queries: Iterable[Query], *, num_samples: int = 500, seed: int = 0
    ) -> SpeedPosterior:
        """The model's posterior, measured pairs re-centred on their measurement."""
        qs = list(queries)
        post = self.model.posterior_speed(qs, num_samples=num_samples, seed=seed)
        speed, meas = post.speed.clone(), post.measured.clone()
        for q_index, q in enumerate(qs):
            if len(q.co_runners) != 1:
                continue
            if q.shares is not None and "gpu_compute" not in q.shares[0]:
                continue
            y = self.measured.get((q.job, q.co_runners[0]))
            if y is None:
                continue
            shift = float(np.log(y) - np.log(float(speed[:, q_index].mean())))
            speed[:, q_index] = speed[:, q_index] * float(np.exp(shift))
            meas[:, q_index] = meas[:, q_index] * float(np.exp(shift))
        return SpeedPosterior(speed, meas)
