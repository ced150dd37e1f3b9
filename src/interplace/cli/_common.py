"""Helpers shared by the command modules: argument types, shared options, data reading."""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from interplace.errors import SEED_LIMIT

if TYPE_CHECKING:
    import pandas as pd

    from interplace.datasets.runs import CoLocationData
    from interplace.topology import Topology

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``ArgumentParser.add_subparsers`` returns; each command module's ``register`` takes it."""


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, not {text!r}")
        return value

    return parse


def seed_arg(text: str) -> int:
    """An argparse type: a seed, an integer in ``[0, 2**63)`` (:func:`~interplace.errors.
    check_seed`'s range, so that a seed past it is refused as the option's, not later as a
    problem of some input file)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**63), not {text!r}")
    return value


def open_fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, not {text!r}")
    return value


def unit_fraction(text: str) -> float:
    """An argparse type: a number in ``[0, 1]``."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], not {text!r}")
    return value


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun plural unless ``n`` is 1.

    >>> count(1, "job"), count(3, "job"), count(0, "co-location")
    ('1 job', '3 jobs', '0 co-locations')
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _number(text: str) -> float:
    """``text`` as a float; NaN where it is not a number (refused as not finite)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text!r}")
    return value


def non_negative_number(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    value = _number(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}")
    return value


def data_name(runs: Path) -> str:
    """A data set's name from its runs file: ``prof/runs.csv`` is ``prof``, ``v100.csv`` ``v100``.

    >>> data_name(Path("prof/runs.csv")), data_name(Path("data/v100.parquet"))
    ('prof', 'v100')
    """
    if runs.stem == "runs":
        return runs.resolve().parent.name or runs.stem
    return runs.stem


def read_data(runs_path: str, samples_path: str | None) -> CoLocationData:
    from interplace.datasets.runs import (
        CoLocationData,
        read_runs,
        read_samples,
        validate_samples_for_runs,
    )

    runs = read_runs(runs_path)
    samples = None
    if samples_path is not None:
        samples = read_samples(samples_path)
        # Checked here first so that an error names the samples file, not the data set.
        validate_samples_for_runs(samples, runs, str(samples_path))
        note = counter_range_note(samples, str(samples_path))
        if note is not None:
            sys.stderr.write(f"interplace: note: {note}\n")
    return CoLocationData(runs, samples, data_name(Path(runs_path)))


RANGE_MARGIN = 0.1
"""How far past its unit's range a counter reading may lie before :func:`counter_range_note`
calls it out: a tenth of the range for a percentage (below -10 or above 110), a tenth of the
metric's largest reading below 0 for the others."""


def counter_range_note(samples: pd.DataFrame, what: str) -> str | None:
    """A note naming the first reading of a known counter far outside its unit's range, or None.

    The model reads counters as true value plus noise, so a runs-format samples table is not
    range-checked (simulated counters dip just below 0): a reading just past a bound is noise.
    One further out than :data:`RANGE_MARGIN` of the range (a GPU utilisation of -50% or
    500%, a negative byte count) is no noisy reading of a real one, and the fit would take it
    as one; the commands that fit say so. Temperatures and unknown metrics are not checked.
    Rows count from 0.

    >>> import pandas as pd
    >>> s = pd.DataFrame({"metric": ["gpu_util_pct"] * 3, "value": [-4.0, 50.0, 108.0]})
    >>> counter_range_note(s, "s.csv") is None
    True
    >>> print(counter_range_note(s.assign(value=[-50.0, 50.0, 500.0]), "s.csv"))
    ... # doctest: +NORMALIZE_WHITESPACE
    s.csv: row 0: gpu_util_pct is -50, far below 0 (% of time one or more kernels ran on the
    GPU (NVML utilization.gpu)); 2 such readings, fitted as noisy readings of real ones: check
    the table
    """
    import numpy as np
    import pandas as pd

    from interplace.collectors.table import CANONICAL_METRICS

    names = samples["metric"].astype(str).to_numpy()
    values = pd.to_numeric(samples["value"], errors="coerce").to_numpy(dtype=float)
    first: tuple[int, str, float, str] | None = None
    count = 0
    for name, unit in CANONICAL_METRICS.items():
        rows = np.flatnonzero((names == name) & np.isfinite(values))
        if name == "temp_c" or rows.size == 0:
            continue
        v = values[rows]
        if name.endswith("_pct"):
            low, high = -100 * RANGE_MARGIN, 100 * (1 + RANGE_MARGIN)
        else:
            low, high = -RANGE_MARGIN * max(float(v.max()), 0.0), math.inf
        bad = (v < low) | (v > high)
        count += int(bad.sum())
        if bad.any():
            i = int(rows[np.argmax(bad)])
            if first is None or i < first[0]:
                side = "far below 0" if values[i] < low else "far above 100"
                first = (i, name, float(values[i]), f"{side} ({unit})")
    if first is None:
        return None
    i, name, value, why = first
    such = "1 such reading" if count == 1 else f"{count} such readings"
    return (f"{what}: row {i}: {name} is {value:g}, {why}; {such}, fitted as noisy readings "
            "of real ones: check the table")


@contextmanager
def naming_file(data: CoLocationData, runs_path: str | os.PathLike[str]) -> Iterator[None]:
    """Inside, an :class:`~interplace.errors.InputError` that names the data set (``data.name``,
    which :func:`data_name` derived from the runs file, or a split of it such as
    ``"prof (train)"``) names the runs file the user gave instead.

    >>> import pandas as pd
    >>> from interplace.datasets.runs import CoLocationData
    >>> from interplace.errors import InputError
    >>> data = CoLocationData(pd.DataFrame({"run_id": ["a"], "job": ["x"], "throughput": [1.0]}),
    ...                       None, "prof")
    >>> with naming_file(data, "prof/runs.csv"):
    ...     raise InputError("prof: nothing to fit")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: prof/runs.csv: nothing to fit
    """
    from interplace.errors import InputError

    try:
        yield
    except InputError as exc:
        text = str(exc)
        rest = text.removeprefix(data.name)
        if rest == text or not rest.startswith((": ", " (")):  # " (train): ", a split of it
            raise
        raise InputError(f"{runs_path}{rest}") from None


def add_model_data_args(p: argparse.ArgumentParser) -> None:
    """``--runs`` and ``--samples``, shared by fit and evaluate."""
    p.add_argument("--runs", required=True, metavar="RUNS", help="runs table: .csv or .parquet")
    p.add_argument(
        "--samples", metavar="SAMPLES", help="counter samples of those runs: .csv or .parquet"
    )


def add_seed_steps_args(p: argparse.ArgumentParser, seed_help: str) -> None:
    """``--seed`` and ``--steps`` of a fit, shared by fit, evaluate and demo."""
    p.add_argument("--seed", type=seed_arg, default=0, help=f"{seed_help} (default: 0)")
    p.add_argument(
        "--steps",
        type=int_at_least(1),
        default=3000,
        help="most optimisation steps of each SVI restart; a restart may stop earlier "
        "(default: 3000)",
    )


def add_fit_args(p: argparse.ArgumentParser) -> None:
    """``--seed``, ``--steps``, ``--topology`` and ``--quiet``, shared by fit and evaluate."""
    add_seed_steps_args(p, "random seed")
    p.add_argument(
        "--topology",
        metavar="FILE_OR_BUILTIN",
        help="topology of the runs' devices (needed when a run spans devices)",
    )
    p.add_argument(
        "--mode",
        choices=["timeslice", "mps"],
        help="use only the runs of this sharing mode (needed when the runs mix both)",
    )
    p.add_argument(
        "--family",
        metavar="COLUMN",
        help="runs-table column naming each job's family (e.g. model: the same network at "
        "other batch sizes); jobs of a family share prior centres, which helps cold start",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_rank_arg(p: argparse.ArgumentParser) -> None:
    """``--rank`` (the largest rank of the model's low-rank pair term), ``--structure-only``
    (no measured-pair stage), ``--no-cold-scale``, ``--no-counter-kernel``,
    ``--direct-weight``, ``--no-lift-ceilings``, ``--restarts``,
    ``--temper`` and ``--lr`` (the inference), for fit and evaluate."""
    p.add_argument(
        "--rank",
        type=int_at_least(0),
        metavar="L",
        help="largest rank of the model's low-rank pair term; 0 fits the mechanism alone "
        "(default: interplace.model.DEFAULT_RANK, 5)",
    )
    p.add_argument(
        "--structure-only",
        action="store_true",
        help="leave out the second stage that keeps the measured pairs (each pair measured "
        "on one device keeps its own effect); the model then shrinks them to its structure",
    )
    p.add_argument(
        "--no-cold-scale",
        action="store_true",
        help="leave the demand of jobs without co-located runs where their counters put it, "
        "instead of on the scale the fitted jobs' demand has against their counters",
    )
    p.add_argument(
        "--no-counter-kernel",
        action="store_true",
        help="predict a job without co-located runs from its mechanism and its nearest "
        "measured jobs alone, not also from a regression of the measured pairs on both jobs' "
        "counters (Hyper.cold_kernel_weight 0; the default averages the two)",
    )
    p.add_argument(
        "--direct-weight",
        type=unit_fraction,
        metavar="W",
        help="average the speed predicted for each pair never measured together, of jobs "
        "measured as victim and as co-runner, with a matrix completion of the measured pairs' "
        "speeds, weight W in [0, 1] (Hyper.direct_weight; default 0.25; 0: the model's own alone)",
    )
    p.add_argument(
        "--no-lift-ceilings",
        action="store_true",
        help="keep each job's speed alone where the structure puts it, even where a measured "
        "pair ran faster than it (the default lifts it to that pair; without the lift the "
        "model is less accurate on Lucid: see interplace.model.fit)",
    )
    p.add_argument(
        "--restarts",
        type=int_at_least(1),
        metavar="K",
        help="fit K times from seeded starts and keep the equal mixture of the K posteriors "
        "(stepped together in one process: four cost about 1.3 fits' time; default: 4 on "
        "data of at most 2000 observations and counter groups, 1 on larger data, one per "
        "chain with --nuts)",
    )
    p.add_argument(
        "--temper",
        type=positive_number,
        metavar="LAMBDA",
        help="raise the likelihoods to this power in the fit (default: 1.5 with several "
        "restarts, 1 with one or with --nuts)",
    )
    p.add_argument(
        "--lr",
        type=positive_number,
        metavar="RATE",
        help="the SVI fit's learning rate (Adam's; default: interplace.model.fit's, 0.03): "
        "lower it where a fit diverges",
    )


def add_workers_arg(p: argparse.ArgumentParser) -> None:
    """``--workers``: processes for ``fit --nuts``'s chains."""
    p.add_argument(
        "--workers",
        type=int_at_least(1),
        metavar="N",
        help="run --nuts chains in N processes, the same model bit for bit (default: one "
        "per CPU core, at most one per chain; the SVI restarts run together in one process)",
    )


def cpu_workers() -> int:
    """One worker per CPU core: the CLI's default for a fit's NUTS chains."""
    return os.cpu_count() or 1


def fit_workers(args: argparse.Namespace) -> int:
    """``--workers``, or :func:`cpu_workers`."""
    return int(args.workers) if args.workers is not None else cpu_workers()


def fit_steps(info: Mapping[str, Any]) -> str:
    """How a fit ran, from its ``info``: ``"800 steps"``, ``"800 steps in all over 4
    restarts, pooled"`` (steps summed over the restarts), each with ``", converged early"``
    when every SVI run stopped on its plateau.

    >>> fit_steps({"steps": 800, "restarts": 4, "stopped_early": True})
    '800 steps in all over 4 restarts, pooled, converged early'
    """
    restarts = int(info.get("restarts", 1))
    pooled = f" in all over {restarts} restarts, pooled" if restarts > 1 else ""
    early = ", converged early" if info.get("stopped_early") else ""
    return f"{info['steps']} steps{pooled}{early}"


def rank_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``rank``, ``restarts``, ``temper`` and ``lr`` where given, ``measured=False`` for
    ``--structure-only``, ``cold_scale=False`` for ``--no-cold-scale``,
    ``lift_ceilings=False`` for ``--no-lift-ceilings`` and ``hyper`` with
    ``cold_kernel_weight=0`` for ``--no-counter-kernel`` and ``direct_weight`` from
    ``--direct-weight`` (otherwise the library's defaults)."""
    out: dict[str, Any] = {
        k: getattr(args, k) for k in ("rank", "restarts", "temper", "lr")
        if getattr(args, k) is not None
    }
    if args.structure_only:
        out["measured"] = False
    if args.no_cold_scale:
        out["cold_scale"] = False
    if args.no_lift_ceilings:
        out["lift_ceilings"] = False
    hyper: dict[str, float] = {}
    if args.no_counter_kernel:
        hyper["cold_kernel_weight"] = 0.0
    if args.direct_weight is not None:
        hyper["direct_weight"] = args.direct_weight
    if hyper:
        from interplace.model import Hyper

        out["hyper"] = Hyper(**hyper)
    return out


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary(topo: Topology) -> str:
    parts = (_count(len(topo.gpus()), "GPU", "GPUs"),
             _count(len(topo.machines()), "machine", "machines"),
             _count(topo.numa_nodes, "NUMA node", "NUMA nodes"),
             _count(topo.pcie_switches, "PCIe switch", "PCIe switches"),
             _count(len(topo.nics()), "NIC", "NICs"))
    return f"{topo.name}: {', '.join(parts)}\n"


def describe_set(topo: Topology, gpus: list[str]) -> str:
    pairs = [(a, b, topo.path(a, b)) for a, b in itertools.combinations(gpus, 2)]
    classes = sorted({p.connection for _, _, p in pairs})
    slowest = min(pairs, key=lambda t: t[2].bottleneck)
    shared = [d for d in topo.domains(gpus) if len(d.gpus) > 1]
    lines = [
        f"  GPUs {{{','.join(gpus)}}}: connections {'/'.join(classes)}; slowest pair "
        f"{slowest[0]}-{slowest[1]} at {slowest[2].bottleneck:.1f} GB/s"
    ]
    for d in shared:
        bw = "" if d.bandwidth is None else f" ({d.bandwidth:.1f} GB/s)"
        lines.append(f"    {d.kind:<12} {d.name}{bw} used by {','.join(d.gpus)}")
    return "\n".join(lines) + "\n"


def write_unsupported_notes(pairs: frozenset[tuple[str, str]]) -> None:
    """One ``interplace: note:`` line on stderr per device with metrics it does not report."""
    from interplace.collectors.sampler import unsupported_notes

    for line in unsupported_notes(pairs):
        sys.stderr.write(f"interplace: note: {line}\n")
