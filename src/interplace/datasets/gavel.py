"""Gavel's measured throughputs of deep-learning jobs alone and in pairs on K80, P100 and V100.

Source: Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI 2020, repository https://github.com/stanford-futuredata/gavel (MIT licence),
commit ``c4fa400``. interplace ships a converted copy (``interplace/data/gavel/``, with the
licence) so :func:`load_gavel` works offline.

The raw format
--------------
``scheduler/simulation_throughputs.json`` maps a worker type (``k80``, ``p100``, ``v100`` and
``*_unconsolidated``, which are skipped) to keys ``"('<job type>', <scale factor>)"`` (Python
tuples as text, parsed with :func:`ast.literal_eval`), each holding ``"null"`` (the job's
throughput alone) and, per other key, ``[a, b]``: the throughputs of the outer and the inner
job while both run on one GPU. ``[0.0, 0.0]`` marks a pair that could not run together (out of
memory, or failed). The table is symmetric, ``T[A][B] == T[B][A][::-1]``. For two instances of
one job, Gavel's profiler stores the mean of the two instances in both places. Throughputs are
training steps (iterations) per second.

Conversion
----------
For each GPU type and scale factor 1:

- every job with ``null`` > 0 becomes an isolated run ``"<gpu>/iso/<job>"``; a job whose
  ``null`` is 0 could not run at all and becomes an infeasible row with no co-runner;
- every unordered pair ``{A, B}`` (``A <= B`` in sorting order, ``A == B`` allowed) with
  non-zero throughputs becomes a run ``"<gpu>/pair/<A>|<B>"`` of two rows (``A`` with
  ``T[A][B][0]``, ``B`` with ``T[A][B][1]``);
- every pair stored as ``[0, 0]`` becomes a row ``(job=A, co_runner=B)`` of ``infeasible``,
  not a run: "cannot share a GPU" is a constraint, not a speed of 0.

Isolated throughputs at scale factors 1, 2, 4 and 8 (data-parallel jobs on that many GPUs;
for sf > 1 the aggregate rate over the workers) form the ``scaling`` table; configurations
stored as 0 (could not run) are left out. Every multi-GPU pair entry is 0, so co-location data
is single-GPU only. The runs carry a ``gpu_type`` column and no ``mode``: Gavel ran the two
jobs as two processes on one GPU, and whether its profiling used CUDA MPS (its dispatcher
has an optional ``use_mps`` switch) is not recorded, so the sharing mode is unknown.
:func:`load_gavel` adds two columns read off Gavel's job names, ``"<model> (batch size
<n>)"``: ``model`` (the network, which the model can use as a job family) and ``batch_size``
(missing for the jobs named without one, such as ``A3C``).

Which file: Gavel also has ``physical_cluster_throughputs.json``, identical except for 73
isolated values re-measured later (Recommendation jobs up to 11x faster on V100), while the
pair values stayed those of the original campaign. Dividing the old pair throughputs by the new
isolated ones gives speeds down to 0.008, so the default conversion uses
``simulation_throughputs.json``, whose isolated and pair values come from one campaign (the
speeds Gavel's own co-location heat maps show). :func:`read_gavel_json` converts either file.

>>> g = load_gavel("v100")
>>> p = g.data.pairs()
>>> row = p[(p.job == "ResNet-50 (batch size 64)") & (p.co_runner == "LM (batch size 20)")]
>>> round(float(row.speed.iloc[0]), 2)
0.69
>>> g.is_feasible("ResNet-50 (batch size 64)", "Transformer (batch size 256)")
False
"""

from __future__ import annotations

import ast
import importlib.resources
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from interplace.datasets.runs import CoLocationData, read_runs
from interplace.errors import InputError, check_input_file, is_real, read_csv

__all__ = [
    "GAVEL_COMMIT",
    "GAVEL_REPO",
    "GPU_TYPES",
    "GavelData",
    "convert_gavel",
    "job_model",
    "load_gavel",
    "read_converted",
    "read_gavel_json",
]

GPU_TYPES: tuple[str, ...] = ("k80", "p100", "v100")
"""The GPU types of Gavel's measurements (``*_unconsolidated`` variants are not converted)."""

GAVEL_REPO = "https://github.com/stanford-futuredata/gavel"
GAVEL_COMMIT = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c"
"""The Gavel commit the packaged copy was converted from."""

RAW_FILE = "simulation_throughputs.json"
"""The file :func:`load_gavel` converts when handed a directory (see the module docstring)."""

_INFEASIBLE_COLUMNS = ("gpu_type", "job", "co_runner")
_SCALING_COLUMNS = ("job", "gpu_type", "scale_factor", "throughput")


def _parse_key(key: str, where: str) -> tuple[str, int]:
    """``"('ResNet-18 (batch size 16)', 1)"`` -> ``("ResNet-18 (batch size 16)", 1)``."""
    try:
        value = ast.literal_eval(key)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(f"{where}: key {key!r} is not a (job, scale factor) tuple") from None
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not value[0]
        or isinstance(value[1], bool)
        or not isinstance(value[1], int)
        or value[1] < 1
    ):
        raise InputError(f"{where}: key {key!r} is not a (job, scale factor) tuple")
    return value[0], value[1]


def _rate(value: Any, where: str) -> float:
    if not is_real(value, finite=False):
        raise InputError(f"{where}: throughput {value!r} is not a number")
    rate = float(value)
    if not math.isfinite(rate) or rate < 0:
        raise InputError(f"{where}: throughput {value!r} is not a finite number >= 0")
    return rate


def convert_gavel(
    raw: Mapping[str, Any], what: str = "gavel"
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Convert Gavel's parsed throughput JSON into ``(runs, infeasible, scaling)``.

    ``runs`` has the columns ``run_id``, ``job``, ``throughput``, ``gpu_type`` (all GPU types
    of :data:`GPU_TYPES` present in ``raw``); ``infeasible`` has ``gpu_type``, ``job``,
    ``co_runner`` (one row per unordered pair, ``job <= co_runner``; a missing ``co_runner``
    means the job could not run even alone); ``scaling`` has ``job``, ``gpu_type``,
    ``scale_factor``, ``throughput``. All are sorted. See the module docstring for the rules.
    Raises :class:`InputError` for a malformed file, an asymmetric pair or a half-zero pair.

    >>> raw = {"v100": {
    ...     "('a', 1)": {"null": 4.0, "('a', 1)": [1.0, 1.0], "('b', 1)": [2.0, 3.0]},
    ...     "('b', 1)": {"null": 6.0, "('a', 1)": [3.0, 2.0], "('b', 1)": [0.0, 0.0]},
    ...     "('a', 2)": {"null": 7.5, "('a', 2)": [0.0, 0.0]}}}
    >>> runs, infeasible, scaling = convert_gavel(raw)
    >>> runs.run_id.tolist()
    ['v100/iso/a', 'v100/iso/b', 'v100/pair/a|a', 'v100/pair/a|a', 'v100/pair/a|b', 'v100/pair/a|b']
    >>> infeasible.values.tolist()
    [['v100', 'b', 'b']]
    >>> scaling.values.tolist()
    [['a', 'v100', 1, 4.0], ['a', 'v100', 2, 7.5], ['b', 'v100', 1, 6.0]]
    """
    if not isinstance(raw, Mapping):
        raise InputError(f"{what}: top level must be an object of GPU types")
    present = [g for g in GPU_TYPES if g in raw]
    if not present:
        raise InputError(f"{what}: no GPU type of {', '.join(GPU_TYPES)} in the file")
    runs: list[tuple[str, str, float, str]] = []
    infeasible: list[tuple[str, str, str | None]] = []
    scaling: list[tuple[str, str, int, float]] = []
    for gpu in present:
        table = raw[gpu]
        if not isinstance(table, Mapping):
            raise InputError(f"{what}: {gpu} is not an object of jobs")
        single: dict[str, Mapping[str, Any]] = {}
        single_keys: dict[str, str] = {}
        for key, entry in table.items():
            job, sf = _parse_key(key, f"{what}: {gpu}")
            where = f"{what}: {gpu} {key}"
            if not isinstance(entry, Mapping) or "null" not in entry:
                raise InputError(f'{where}: entry has no isolated ("null") throughput')
            alone = _rate(entry["null"], where)
            if alone > 0:
                scaling.append((job, gpu, sf, alone))
            if sf == 1:
                if job in single:
                    raise InputError(f"{where}: job {job!r} appears twice")
                single[job] = entry
                single_keys[job] = key
        for job in sorted(single):
            where = f"{what}: {gpu} {single_keys[job]}"
            alone = _rate(single[job]["null"], where)
            if alone > 0:
                runs.append((f"{gpu}/iso/{job}", job, alone, gpu))
            else:
                infeasible.append((gpu, job, None))
        for job in sorted(single):
            for inner_key, value in single[job].items():
                if inner_key == "null":
                    continue
                other, sf = _parse_key(inner_key, f"{what}: {gpu} {single_keys[job]}")
                where = f"{what}: {gpu} {single_keys[job]} / {inner_key}"
                if sf != 1:
                    continue
                if other not in single:
                    raise InputError(f"{where}: co-runner {other!r} has no entry of its own")
                if other < job:  # converted from the other side, where the mirror is checked
                    if single_keys[job] not in single[other]:
                        raise InputError(f"{where}: pair has no mirror entry")
                    continue
                if not isinstance(value, list | tuple) or len(value) != 2:
                    raise InputError(f"{where}: pair value {value!r} is not [a, b]")
                a, b = (_rate(v, where) for v in value)
                mirror = single[other].get(single_keys[job])
                if other != job and (
                    not isinstance(mirror, list | tuple) or list(mirror) != [value[1], value[0]]
                ):
                    raise InputError(
                        f"{where}: pair {value!r} does not match its mirror entry {mirror!r}"
                    )
                if a == 0 and b == 0:
                    infeasible.append((gpu, job, other))
                elif a == 0 or b == 0:
                    raise InputError(f"{where}: pair {value!r} is half zero")
                else:
                    rid = f"{gpu}/pair/{job}|{other}"
                    runs.extend([(rid, job, a, gpu), (rid, other, b, gpu)])
    runs_df = pd.DataFrame(runs, columns=["run_id", "job", "throughput", "gpu_type"])
    runs_df = _sort(runs_df, ["gpu_type", "run_id"])
    inf_df = pd.DataFrame(infeasible, columns=list(_INFEASIBLE_COLUMNS))
    inf_df = _sort(inf_df, list(_INFEASIBLE_COLUMNS))
    scaling_df = pd.DataFrame(scaling, columns=list(_SCALING_COLUMNS))
    scaling_df = _sort(scaling_df, ["gpu_type", "job", "scale_factor"])
    scaling_df["scale_factor"] = scaling_df["scale_factor"].astype("int64")
    return runs_df, inf_df, scaling_df


def _sort(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.sort_values(by, kind="stable", na_position="first").reset_index(drop=True)


def read_gavel_json(
    path: str | os.PathLike[str],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Read one of Gavel's throughput JSON files and :func:`convert_gavel` it.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.json"
    >>> _ = p.write_text('{"k80": {"(\\'a\\', 1)": {"null": 2.0}}}')
    >>> read_gavel_json(p)[0].values.tolist()
    [['k80/iso/a', 'a', 2.0, 'k80']]
    """
    p = Path(path)
    check_input_file(p)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {p}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    return convert_gavel(raw, str(p))


@dataclass(frozen=True, eq=False)
class GavelData:
    """Gavel's measurements on one GPU type.

    ``data``: the runs (isolated and pairs, steps/s, column ``gpu_type``);
    ``infeasible``: columns ``job``, ``co_runner`` (``job <= co_runner``; a missing
    ``co_runner`` = the job could not run even alone): pairs that could not share the GPU;
    ``scaling``: columns ``job``, ``gpu_type``, ``scale_factor``, ``throughput`` (steps/s,
    aggregate over the ``scale_factor`` GPUs); ``gpu_type``: one of :data:`GPU_TYPES`.
    """

    data: CoLocationData
    infeasible: pd.DataFrame
    scaling: pd.DataFrame
    gpu_type: str

    def __post_init__(self) -> None:
        if self.gpu_type not in GPU_TYPES:
            raise InputError(
                f"unknown Gavel GPU type {self.gpu_type!r} (choose from {', '.join(GPU_TYPES)})"
            )
        for name, frame, need in (
            ("infeasible", self.infeasible, ("job", "co_runner")),
            ("scaling", self.scaling, _SCALING_COLUMNS),
        ):
            if not isinstance(frame, pd.DataFrame):
                raise InputError(f"{self.data.name}: {name} must be a pandas DataFrame")
            missing = [c for c in need if c not in frame.columns]
            if missing:
                raise InputError(f"{self.data.name}: {name} lacks column(s) {', '.join(missing)}")
        runs = set(self.data.runs["job"].tolist())
        for job, co in zip(
            self.infeasible["job"].tolist(), self.infeasible["co_runner"].tolist(), strict=True
        ):
            if pd.isna(co) and job in runs:
                raise InputError(
                    f"{self.data.name}: job {job!r} is marked unable to run alone but has runs"
                )

    def is_feasible(self, job: str, co_runner: str | None = None) -> bool:
        """Whether ``job`` could run alone (``co_runner=None``) or next to ``co_runner``.

        False for pairs of :attr:`infeasible` (either order) and for jobs that could not run
        alone; True otherwise (also for jobs Gavel never measured: no constraint is known).

        >>> g = load_gavel("k80")
        >>> g.is_feasible("ResNet-50 (batch size 128)"), g.is_feasible("A3C", "A3C")
        (True, True)
        >>> g.is_feasible("A3C", "ResNet-50 (batch size 128)")
        False
        """
        inf = self.infeasible
        alone = inf["co_runner"].isna()
        if job in set(inf.loc[alone, "job"].tolist()):
            return False
        if co_runner is None:
            return True
        if co_runner in set(inf.loc[alone, "job"].tolist()):
            return False
        a, b = sorted((job, co_runner))
        pairs = inf.loc[~alone]
        return not bool(((pairs["job"] == a) & (pairs["co_runner"] == b)).any())


_BATCH = re.compile(r"^(?P<model>.+?) \(batch size (?P<batch>\d+)\)$")


def job_model(job: str) -> tuple[str, int | None]:
    """The network and batch size in a Gavel job name (batch size None where it has none).

    >>> job_model("ResNet-50 (batch size 64)"), job_model("A3C")
    (('ResNet-50', 64), ('A3C', None))
    """
    m = _BATCH.match(job)
    return (job, None) if m is None else (m.group("model"), int(m.group("batch")))


def _select(
    runs: pd.DataFrame, infeasible: pd.DataFrame, scaling: pd.DataFrame, gpu_type: str
) -> GavelData:
    r = runs.loc[runs["gpu_type"] == gpu_type].reset_index(drop=True)
    parsed = [job_model(str(j)) for j in r["job"]]
    r["model"] = [m for m, _ in parsed]
    r["batch_size"] = pd.array([b for _, b in parsed], dtype="Int64")
    i = infeasible.loc[infeasible["gpu_type"] == gpu_type, ["job", "co_runner"]]
    s = scaling.loc[scaling["gpu_type"] == gpu_type].reset_index(drop=True)
    if len(r) == 0:
        raise InputError(f"Gavel data has no runs for GPU type {gpu_type!r}")
    data = CoLocationData(r, None, f"gavel-{gpu_type}")
    return GavelData(data, i.reset_index(drop=True), s, gpu_type)


def _read_packaged() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    root = importlib.resources.files("interplace").joinpath("data", "gavel")
    with (
        importlib.resources.as_file(root.joinpath("runs.csv")) as runs,
        importlib.resources.as_file(root.joinpath("infeasible.csv")) as infeasible,
        importlib.resources.as_file(root.joinpath("scaling.csv")) as scaling,
    ):
        return read_converted(Path(runs), Path(infeasible), Path(scaling))


def read_converted(
    runs: Path, infeasible: Path, scaling: Path
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Read the ``runs.csv``, ``infeasible.csv`` and ``scaling.csv`` of a converted copy.

    The inverse of ``python -m interplace.datasets._convert_gavel``: returns the tables of
    :func:`convert_gavel`.

    >>> d = importlib.resources.files("interplace") / "data" / "gavel"
    >>> tables = read_converted(*(Path(str(d / f)) for f in
    ...                           ("runs.csv", "infeasible.csv", "scaling.csv")))
    >>> [len(t) > 0 for t in tables]
    [True, True, True]
    """
    runs_df = read_runs(runs)
    for path in (infeasible, scaling):
        check_input_file(path)
    try:
        inf_df = read_csv(
            infeasible,
            dtype={c: str for c in _INFEASIBLE_COLUMNS},
            keep_default_na=False,
            na_values={"co_runner": [""]},
        )
        scaling_df = read_csv(scaling, dtype={"job": str, "gpu_type": str})
    except (OSError, ValueError, InputError) as exc:
        raise InputError(f"cannot read the converted Gavel data: {exc}") from exc
    for name, frame, need in (
        (infeasible, inf_df, _INFEASIBLE_COLUMNS),
        (scaling, scaling_df, _SCALING_COLUMNS),
    ):
        missing = [c for c in need if c not in frame.columns]
        if missing:
            raise InputError(f"{name}: lacks column(s) {', '.join(missing)}")
    if "gpu_type" not in runs_df.columns:
        raise InputError(f"{runs}: lacks column gpu_type")
    return runs_df, inf_df, scaling_df


def load_gavel(gpu_type: str = "v100", source: str | os.PathLike[str] | None = None) -> GavelData:
    """Gavel's throughputs on ``gpu_type`` (``"k80"``, ``"p100"`` or ``"v100"``).

    By default reads the copy packaged with interplace. With ``source``, converts Gavel's raw
    data instead: a directory holding ``simulation_throughputs.json`` (as in Gavel's
    ``scheduler/`` folder), or the path of a throughput JSON file itself (for instance
    ``physical_cluster_throughputs.json``; see the module docstring on why it is not the
    default). Unknown GPU types raise :class:`InputError`.

    >>> g = load_gavel("p100")
    >>> g.data.name, g.data.runs.job.nunique(), len(g.data.pairs()) // 2
    ('gavel-p100', 26, 340)
    >>> load_gavel("a100")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: unknown Gavel GPU type 'a100' (choose from k80, p100, v100)
    """
    if gpu_type not in GPU_TYPES:
        raise InputError(
            f"unknown Gavel GPU type {gpu_type!r} (choose from {', '.join(GPU_TYPES)})"
        )
    if source is None:
        tables = _read_packaged()
    else:
        src = Path(source)
        if src.is_dir():
            src = src / RAW_FILE
        tables = read_gavel_json(src)
    return _select(*tables, gpu_type)
