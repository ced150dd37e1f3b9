"""Convert Gavel's raw throughputs into the compact copy packaged under ``interplace/data/gavel``.

Run as ``python -m interplace.datasets._convert_gavel SOURCE_DIR OUT_DIR``, where
``SOURCE_DIR`` holds Gavel's ``simulation_throughputs.json`` and ``LICENSE``. Writes
``runs.csv``, ``infeasible.csv``, ``scaling.csv`` (see :mod:`interplace.datasets.gavel`), a copy
of the ``LICENSE`` and a ``README.md`` into ``OUT_DIR``, each atomically. The output is
deterministic: converting the same input twice gives identical bytes.

>>> import tempfile, pathlib
>>> src, out = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
>>> raw = '{"v100": {"(\\'a\\', 1)": {"null": 2.0}}}'
>>> _ = (src / "simulation_throughputs.json").write_text(raw)
>>> _ = (src / "LICENSE").write_text("MIT License\\n")
>>> sorted(p.name for p in convert_dir(src, out))
['LICENSE', 'README.md', 'infeasible.csv', 'runs.csv', 'scaling.csv']
>>> (out / "runs.csv").read_text()
'run_id,job,throughput,gpu_type\\nv100/iso/a,a,2.0,v100\\n'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

import pandas as pd

from interplace.datasets.gavel import GAVEL_COMMIT, GAVEL_REPO, RAW_FILE, read_gavel_json
from interplace.errors import InputError, atomic_write

__all__ = ["convert_dir", "main"]

_README = """\
# Gavel measured throughputs (converted copy)

Origin: {repo}, commit `{commit}`, file `scheduler/{raw}` (training throughputs measured by
Gavel's profiler, `scheduler/scripts/profiling/measure_throughput.py`). Licence: MIT, see
`LICENSE` (copied from the Gavel repository). Paper: Narayanan et al., "Heterogeneity-Aware
Cluster Scheduling Policies for Deep Learning Workloads", OSDI 2020.

Converted by `python -m interplace.datasets._convert_gavel` (see `interplace.datasets.gavel`);
GPU types k80, p100, v100 (the `*_unconsolidated` variants are not converted). Unit of every
throughput: training steps (iterations) per second.

- `runs.csv` ({n_runs} rows; columns run_id, job, throughput, gpu_type): isolated runs
  `<gpu>/iso/<job>` (scale factor 1) and co-located runs `<gpu>/pair/<A>|<B>` of two jobs
  sharing one GPU (two rows per run; `A == B` = two instances of one job, whose throughput
  Gavel stored as the mean of both instances).
- `infeasible.csv` ({n_infeasible} rows; columns gpu_type, job, co_runner): pairs stored as
  `[0, 0]` (could not run together); an empty co_runner means the job could not run alone.
- `scaling.csv` ({n_scaling} rows; columns job, gpu_type, scale_factor, throughput): isolated
  throughput on 1, 2, 4 and 8 GPUs (for more than one GPU the aggregate over the workers);
  configurations stored as 0 are left out.
"""


def convert_dir(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> list[Path]:
    """Convert ``source/simulation_throughputs.json`` and copy ``source/LICENSE`` into ``out``.

    Returns the paths written. Raises :class:`InputError` for a missing input or output
    directory or a malformed file.
    """
    src, dst = Path(source), Path(out)
    licence = src / "LICENSE"
    if not licence.is_file():
        raise InputError(f"no LICENSE in {src}: the Gavel data may only be copied with it")
    runs, infeasible, scaling = read_gavel_json(src / RAW_FILE)
    if not dst.is_dir():
        raise InputError(f"output directory does not exist: {dst}")
    tables: dict[str, pd.DataFrame] = {
        "runs.csv": runs,
        "infeasible.csv": infeasible,
        "scaling.csv": scaling,
    }
    written: list[Path] = []
    for name, table in tables.items():
        with atomic_write(dst / name) as fh:
            table.to_csv(fh, index=False, lineterminator="\n")
        written.append(dst / name)
    with atomic_write(dst / "LICENSE", "wb") as fh:
        cast(IO[bytes], fh).write(licence.read_bytes())
    written.append(dst / "LICENSE")
    readme = _README.format(
        repo=GAVEL_REPO,
        commit=GAVEL_COMMIT,
        raw=RAW_FILE,
        n_runs=len(runs),
        n_infeasible=len(infeasible),
        n_scaling=len(scaling),
    )
    with atomic_write(dst / "README.md") as fh:
        cast(IO[str], fh).write(readme)
    written.append(dst / "README.md")
    for path in written:  # atomic_write creates 0600 files; package data must be world-readable
        path.chmod(0o644)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``SOURCE_DIR OUT_DIR``; returns the exit status (2 on bad input)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.stderr.write("usage: python -m interplace.datasets._convert_gavel SOURCE_DIR OUT_DIR\n")
        return 2
    try:
        convert_dir(args[0], args[1])
    except InputError as exc:
        sys.stderr.write(f"_convert_gavel: error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
