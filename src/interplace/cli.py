"""The ``interplace`` command line.

Every subcommand reports bad input as one line on stderr (``interplace: error: ...``) and
exits with status 2, without a traceback (``--debug`` shows it) and without leaving a partial
output file behind.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from interplace import __version__
from interplace.errors import InputError, atomic_write, check_output_file, first_line

if TYPE_CHECKING:
    import pandas as pd

    from interplace.datasets.runs import CoLocationData
    from interplace.topology import Topology

__all__ = ["main"]


def _topology_from_args(args: argparse.Namespace) -> Topology:
    from interplace.topology import load

    if args.discover:
        from interplace.topology.discover import (
            PynvmlBackend,
            discover,
            record_discovery,
            replay_discovery,
        )

        with PynvmlBackend() as nvml:
            if args.record:
                # Show exactly what was saved: one NVML read, not a second live one.
                return replay_discovery(record_discovery(args.record, nvml))
            return discover(nvml)
    if args.spec is None:
        raise InputError("topo needs a FILE or built-in name, or --discover")
    return load(args.spec, format=args.format)


def _cmd_topo(args: argparse.Namespace) -> int:
    from interplace.topology.nvsmi import to_nvidia_smi

    if args.spec is not None and args.discover:
        raise InputError("give either FILE_OR_BUILTIN or --discover, not both")
    if args.record and not args.discover:
        raise InputError("--record only works with --discover")
    topo = _topology_from_args(args)
    if args.plot:
        from interplace.topology.plot import plot_topology

        plot_topology(topo, args.plot)
    if args.json:
        sys.stdout.write(json.dumps(topo.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(_summary(topo) + "\n" + to_nvidia_smi(topo))
        if args.plot:
            sys.stdout.write(f"\nplot written to {args.plot}\n")
    return 0


def _summary(topo: Topology) -> str:
    machines = len(topo.machines())
    return (
        f"{topo.name}: {len(topo.gpus())} GPUs, {machines} machine{'s' * (machines > 1)}, "
        f"{topo.numa_nodes} NUMA nodes, {topo.pcie_switches} PCIe switches, "
        f"{len(topo.nics())} NICs\n"
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    import tempfile

    import numpy as np
    import pandas as pd

    from interplace.datasets import load_gavel
    from interplace.model import (
        Query,
        baselines,
        best_baseline,
        family_lookup,
        fit,
        holdout_split,
        row_queries,
        score,
    )
    from interplace.topology import builtin
    from interplace.topology.nvsmi import to_nvidia_smi
    from interplace.topology.plot import plot_topology

    out = Path(args.out)
    # Fail before the slow fit when the outputs could not be written afterwards.
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to output directory {out}: {exc.strerror}") from exc
    w = sys.stdout.write
    w(
        "interplace demo: a built-in machine's shared resources, then the interference model\n"
        "fitted to Gavel's measured V100 co-locations and scored on held-out pairs\n\n"
    )
    topo = builtin(args.topology)
    w(f"== Topology\n{_summary(topo)}\n{to_nvidia_smi(topo)}\n")
    gpus = topo.gpus()
    far = next((g for g in gpus if topo.connection(gpus[0], g) == "SYS"), gpus[-1])
    sets: list[list[str]] = [gpus[:2], [gpus[0], far], gpus[: len(gpus) // 2]]
    w("Shared contention domains of a few GPU sets (resources two or more of them use):\n")
    for s in sets:
        w(_describe_set(topo, s))
    two = builtin(f"{args.topology}*2")
    a, b = two.gpus()[0], two.gpus()[len(gpus)]
    w(f"Two such machines on one network ({two.name}): GPUs {a} and {b}\n")
    w(_describe_set(two, [a, b]))
    plot = out / f"{topo.name}.png"
    plot_topology(topo, plot)
    w(f"topology plot written to {plot}\n")

    gavel = load_gavel("v100")
    data = gavel.data
    train, test = holdout_split(data, holdout_frac=0.3, seed=args.seed)
    n_runs = int(data.run_sizes().ge(2).sum())
    w(
        f"\n== Interference model on {data.name}: {data.runs['job'].nunique()} jobs, {n_runs} "
        "co-located pairs measured by Gavel (OSDI 2020, MIT licence, packaged)\n"
        f"held out {test['run_id'].nunique()} of the {n_runs} co-located runs ({len(test)} "
        f"speeds, seed {args.seed}); fitting the rest and every isolated run, with each "
        "network's batch sizes as one job family...\n"
    )
    model = fit(
        train,
        seed=args.seed,
        steps=args.steps,
        progress=sys.stderr.isatty(),
        family="model",
    )
    info = model.info
    early = ", converged early" if info.get("stopped_early") else ""
    w(f"fitted in {info['fit_seconds']:.1f} s ({info['steps']} steps{early})\n")

    held = model.posterior_speed(row_queries(test), seed=args.seed)
    mean, q05, q95 = held.mean.tolist(), held.q05.tolist(), held.q95.tolist()
    w(_demo_heldout_table(test, mean, q05, q95))
    # Every ordered pair of jobs (a job next to a second instance of itself included), scored
    # in one vectorised call that shares its posterior draws across all of them.
    pairs = [(j, c) for j in model.jobs for c in model.jobs]
    post = model.posterior_speed([Query(j, (c,)) for j, c in pairs], seed=args.seed)
    table = pd.DataFrame(
        {
            "job": [j for j, _ in pairs],
            "co_runner": [c for _, c in pairs],
            "speed_mean": post.mean,
            "speed_q05": post.q05,
            "speed_q95": post.q95,
        }
    )
    feasible = [gavel.is_feasible(j, c) for j, c in pairs]
    w(_demo_partners(table, feasible))

    result = score(model, test, posterior=held)
    base = baselines(train, test)
    best, ratio = best_baseline(base, result["mae"])
    known = {k: v["mae"] for k, v in base.items() if v["mae"] is not None}
    shown = ", ".join(f"{k} {v:.3f}" for k, v in sorted(known.items(), key=lambda kv: kv[1]))
    if ratio is None:
        verdict = "the best baseline is exact"
    else:
        beats = "below 1: the model beats it" if ratio < 1 else "the model does not beat it"
        verdict = f"{ratio:.2f} ({beats})"
    fam_pred = family_lookup(train, test, model.family_map())
    fam_mae = float(np.mean(np.abs(fam_pred - test["speed"].to_numpy(dtype=float))))
    misfits = feasible.count(False)
    csv_path = out / f"{data.name}-predictions.csv"
    png_path = out / f"{data.name}-heldout.png"
    with atomic_write(csv_path, "w") as fh:
        table.to_csv(cast("IO[str]", fh), index=False, lineterminator="\n")
    title = (
        f"{data.name}, {len(test)} held-out speeds: MAE {result['mae']:.3f}, "
        f"90% coverage {result['coverage_90']:.2f}"
    )
    _demo_plot(test["speed"].tolist(), mean, q05, q95, title, png_path)
    w(
        f"\nHeld-out accuracy on {len(test)} speeds:\n"
        f"  model MAE {result['mae']:.3f}, 90% interval coverage {result['coverage_90']:.2f} "
        f"(mean width {result['interval_width_90']:.2f})\n"
        f"  baseline MAE: {shown}\n"
        f"  model MAE / best baseline ({best}): {verdict}\n"
        f"  a lookup that knows the families too (family_lookup) has MAE {fam_mae:.3f}\n"
        f"predictions for all {len(table)} ordered job pairs ({misfits} cannot share a V100) "
        f"written to {csv_path}\n"
        f"predicted against measured held-out speed plotted to {png_path}\n"
    )
    return 0


def _demo_heldout_table(
    test: pd.DataFrame, mean: Sequence[float], q05: Sequence[float], q95: Sequence[float]
) -> str:
    """Six held-out pairs spread over the measured speeds: prediction next to measurement."""
    speed = [float(s) for s in test["speed"]]
    job, co = test["job"].astype(str).tolist(), test["co_runner"].astype(str).tolist()
    order = sorted(range(len(speed)), key=lambda i: speed[i])
    picks = sorted(
        {order[round(k * (len(order) - 1) / 5)] for k in range(6)}, key=lambda i: -speed[i]
    )
    jw = max(len(job[i]) for i in picks) + 2
    cw = max(len(co[i]) for i in picks) + 2
    lines = [
        "\nA few held-out pairs (speed = throughput next to the co-runner / throughput alone):",
        f"  {'job':<{jw}}{'co-runner':<{cw}}predicted [90% interval]  measured",
    ]
    for i in picks:
        pred = f"{mean[i]:.2f} [{q05[i]:.2f}, {q95[i]:.2f}]"
        lines.append(f"  {job[i]:<{jw}}{co[i]:<{cw}}{pred:<26}{speed[i]:.2f}")
    return "\n".join(lines) + "\n"


def _demo_partners(table: pd.DataFrame, feasible: Sequence[bool]) -> str:
    """Best and worst co-runners, by predicted speed, of the job whose partner matters most.

    ``feasible`` says, per row of ``table``, whether the pair can share a GPU at all.
    """
    keep = [
        j != c and ok
        for j, c, ok in zip(
            table["job"].tolist(), table["co_runner"].tolist(), feasible, strict=True
        )
    ]
    rows = table.loc[keep]
    by_job = rows.groupby("job")["speed_mean"]
    job = str((by_job.max() - by_job.min()).idxmax())
    ranked = rows.loc[rows["job"] == job].sort_values("speed_mean", ascending=False)
    others = int(table["job"].nunique()) - 1
    width = max(len(str(c)) for c in ranked["co_runner"]) + 2
    lines = [
        f"\nBest and worst partners of {job}, the job whose partner matters most\n"
        f"(its predicted speed next to each of the {len(ranked)} other jobs that fit on one GPU "
        "with it" + (f"; {others - len(ranked)} do not" if others > len(ranked) else "") + "):"
    ]
    for label, part in (("best ", ranked.head(3)), ("worst", ranked.tail(3))):
        for c, m, lo, hi in zip(
            part["co_runner"], part["speed_mean"], part["speed_q05"], part["speed_q95"], strict=True
        ):
            lines.append(f"  {label}  {c:<{width}}{m:.2f} [{lo:.2f}, {hi:.2f}]")
    return "\n".join(lines) + "\n"


def _demo_plot(
    measured: Sequence[float],
    mean: Sequence[float],
    q05: Sequence[float],
    q95: Sequence[float],
    title: str,
    path: Path,
) -> None:
    """Predicted against measured held-out speed, 90% intervals as error bars, and y = x."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # The mean is of the true speed, the interval of a new measurement: clip so that an
    # interval that (rarely) misses the mean still draws.
    below = [max(m - lo, 0.0) for m, lo in zip(mean, q05, strict=True)]
    above = [max(hi - m, 0.0) for m, hi in zip(mean, q95, strict=True)]
    top = 1.05 * max(1.0, *measured, *q95)
    fig = Figure(figsize=(6, 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([0, top], [0, top], color="0.5", lw=1, label="y = x")
    ax.errorbar(
        measured,
        mean,
        yerr=[below, above],
        fmt="o",
        ms=3,
        lw=0.6,
        alpha=0.7,
        label="predicted mean and 90% interval",
    )
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel("measured speed (co-located / isolated throughput)")
    ax.set_ylabel("predicted speed")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left")
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)


def _describe_set(topo: Topology, gpus: list[str]) -> str:
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


def _cmd_ingest(args: argparse.Namespace) -> int:
    from interplace.collectors import ingest, write_samples

    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    df = ingest(
        args.file, format=args.format, host=args.host, fields=fields, interval_s=args.interval
    )
    write_samples(df, args.out)
    n_dev = df["device"].nunique()
    n_met = df["metric"].nunique()
    sys.stdout.write(
        f"{args.file}: {df.attrs.get('format', args.format)}, {len(df)} samples, "
        f"{n_met} metrics, {n_dev} devices -> {args.out}\n"
    )
    unsupported = df.attrs.get("unsupported")
    if unsupported:
        names = ", ".join(sorted(unsupported))
        sys.stderr.write(
            f"interplace: note: readings marked unavailable in the input for: {names}\n"
        )
    return 0


def _write_unsupported_notes(pairs: frozenset[tuple[str, str]]) -> None:
    """One ``interplace: note:`` line on stderr per device with metrics it does not report."""
    from interplace.collectors.sampler import unsupported_notes

    for line in unsupported_notes(pairs):
        sys.stderr.write(f"interplace: note: {line}\n")


def _cmd_collect(args: argparse.Namespace) -> int:
    import os
    import signal

    from interplace.collectors import collect, partial_path
    from interplace.collectors.collect import Terminated

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if args.interval_ms <= 0:
        raise InputError(f"--interval-ms must be positive, got {args.interval_ms}")

    def stamp(path: os.PathLike[str]) -> tuple[int, int] | None:
        """Identifies this version of ``path``: a file or directory written since differs."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    out, partial = Path(args.out), partial_path(args.out)
    before = {p: stamp(p) for p in (out, partial)}
    try:
        result = collect(
            cmd or None,
            args.out,
            interval_s=args.interval_ms / 1000.0,
            duration_s=args.duration,
            progress=sys.stderr.isatty(),
            run_id=args.run_id,
        )
    except (KeyboardInterrupt, Terminated) as exc:
        how = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        if stamp(out) not in (None, before[out]):  # after sampling had written the table
            where = f"the samples are in {out}"
        elif stamp(partial) not in (None, before[partial]):
            where = (f"the samples taken so far are in {partial} "
                     "(interplace.collectors.read_partial reads them)")
        else:  # before sampling started (an older .partial is not this run's)
            where = "no samples were written"
        sys.stderr.write(f"interplace: {how}; {where}\n")
        return 130 if isinstance(exc, KeyboardInterrupt) else 128 + signal.SIGTERM
    if result.note:
        sys.stderr.write(f"interplace: {result.note}\n")
    _write_unsupported_notes(result.summary.unsupported)
    s = result.summary
    sys.stderr.write(
        f"interplace: {'terminated by SIGTERM: ' if result.terminated else ''}"
        f"{s.rows} readings from {s.samples} samples over "
        f"{s.seconds:.1f} s ({', '.join(result.backends)}) -> {args.out}\n"
    )
    if result.terminated:
        return 128 + signal.SIGTERM
    if result.returncode is None:
        return 0
    return 128 - result.returncode if result.returncode < 0 else result.returncode


def _cmd_profile(args: argparse.Namespace) -> int:
    from interplace.collectors.profile import parse_workloads, profile

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    workloads = parse_workloads(args.workloads)
    result = profile(
        workloads,
        args.out,
        modes=modes,
        warmup_s=args.warmup,
        measure_s=args.measure,
        device=args.device,
        gpu=args.gpu,
        pairs=not args.no_pairs,
        progress=sys.stderr.isatty(),
    )
    _write_unsupported_notes(result.unsupported)
    n, out = len(workloads), result.out
    sys.stdout.write(
        f"profiled {n} workloads alone"
        f"{'' if args.no_pairs else f' and in {n * (n + 1) // 2} pairs'} "
        f"({', '.join(modes)}) -> {out}/runs.csv, {out}/samples.csv\n"
    )
    return 0


def _int_at_least(low: int) -> Callable[[str], int]:
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


def _open_fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, not {text!r}")
    return value


def _data_name(runs: Path) -> str:
    """A data set's name from its runs file: ``prof/runs.csv`` is ``prof``, ``v100.csv`` ``v100``.

    >>> _data_name(Path("prof/runs.csv")), _data_name(Path("data/v100.parquet"))
    ('prof', 'v100')
    """
    if runs.stem == "runs":
        return runs.resolve().parent.name or runs.stem
    return runs.stem


def _read_data(runs_path: str, samples_path: str | None) -> CoLocationData:
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
    return CoLocationData(runs, samples, _data_name(Path(runs_path)))


def _cmd_fit(args: argparse.Namespace) -> int:
    from interplace.model import fit

    out = Path(args.out)
    if not out.parent.is_dir():
        raise InputError(f"output directory does not exist: {out.parent}")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write to {out.parent}: permission denied")
    # InterferenceModel.save refuses these too, but only after the fit; say so at once.
    if out.exists() and not (
        out.is_dir() and ((out / "model.json").is_file() or not any(out.iterdir()))
    ):
        raise InputError(f"{out} exists and is not an interplace model directory")
    topology = None
    if args.topology is not None:
        from interplace.topology import load

        topology = load(args.topology)
    data = _read_data(args.runs, args.samples)
    model = fit(
        data,
        seed=args.seed,
        steps=args.steps,
        topology=topology,
        device=args.device,
        progress=sys.stderr.isatty() and not args.quiet,
        mode=args.mode,
        family=args.family,
    )
    model.save(out)
    info = model.info
    early = " (converged early)" if info.get("stopped_early") else ""
    sys.stdout.write(
        f"fitted {len(model.jobs)} jobs to {info['observations']} co-located observations and "
        f"{info['counter_groups']} counter groups of {data.name}: {info['steps']} steps{early}, "
        f"{info['fit_seconds']:.1f} s -> {out}\n"
    )
    return 0


_PREDICT_SUFFIXES = (".csv", ".parquet")


def _read_pairs(path: Path) -> pd.DataFrame:
    """The pairs table to predict, names kept as text (its rows are checked by the model)."""
    import pandas as pd

    if not path.is_file():
        raise InputError(f"no such file: {path}")
    suffix = path.suffix.lower()
    if suffix not in _PREDICT_SUFFIXES:
        raise InputError(f"{path}: unknown pairs file type {path.suffix!r} (use .csv or .parquet)")
    try:
        if suffix == ".csv":
            # Every cell as text, nothing read as missing: a job called "NA" stays "NA".
            pairs = pd.read_csv(path, dtype=str, keep_default_na=False)
        else:
            pairs = pd.read_parquet(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: pairs table is empty (needs columns job, co_runner)") from None
    except Exception as exc:  # pandas' parser errors, UnicodeDecodeError, pyarrow's own errors
        first = first_line(exc)
        raise InputError(f"cannot read pairs table {path}: {first}") from exc
    if len(pairs) == 0:
        raise InputError(f"{path}: pairs table has no rows")
    return pairs.reset_index(drop=True)


def _cmd_predict(args: argparse.Namespace) -> int:
    from interplace.model import InterferenceModel

    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in _PREDICT_SUFFIXES:
        raise InputError(f"{out}: unknown output file type {out.suffix!r} (use .csv or .parquet)")
    check_output_file(out)
    pairs_path = Path(args.pairs)
    pairs = _read_pairs(pairs_path)
    model = InterferenceModel.load(args.model)
    try:  # the model checks the rows; the message gains the file they came from
        result = model.predict_frame(pairs, num_samples=args.samples_per_query, seed=args.seed)
    except InputError as exc:
        raise InputError(f"{pairs_path}: {exc}") from None
    if suffix == ".csv":
        with atomic_write(out, "w") as fh:
            result.to_csv(cast("IO[str]", fh), index=False, lineterminator="\n")
    else:
        with atomic_write(out, "wb") as fh:
            result.to_parquet(cast("IO[bytes]", fh), index=False)
    sys.stdout.write(
        f"predicted {len(result)} co-locations with {args.samples_per_query} "
        f"posterior draws each -> {out}\n"
    )
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from interplace.model import evaluate

    out = None if args.out is None else Path(args.out)
    if out is not None:
        check_output_file(out)
    topology = None
    if args.topology is not None:
        from interplace.topology import load

        topology = load(args.topology)
    data = _read_data(args.runs, args.samples)
    result = evaluate(
        data,
        holdout_frac=0.3 if args.holdout_frac is None else args.holdout_frac,
        cold_jobs=args.cold_jobs,
        seed=args.seed,
        steps=args.steps,
        topology=topology,
        progress=sys.stderr.isatty() and not args.quiet,
        mode=args.mode,
        family=args.family,
    )
    text = json.dumps(result, indent=2) + "\n"
    if out is not None:
        with atomic_write(out, "w") as fh:
            cast("IO[str]", fh).write(text)
    sys.stdout.write(text)
    return 0


def _add_model_data_args(p: argparse.ArgumentParser) -> None:
    """``--runs`` and ``--samples``, shared by fit and evaluate."""
    p.add_argument("--runs", required=True, metavar="RUNS", help="runs table: .csv or .parquet")
    p.add_argument(
        "--samples", metavar="SAMPLES", help="counter samples of those runs: .csv or .parquet"
    )


def _add_seed_steps_args(p: argparse.ArgumentParser, seed_help: str) -> None:
    """``--seed`` and ``--steps`` of a fit, shared by fit, evaluate and demo."""
    p.add_argument("--seed", type=_int_at_least(0), default=0, help=f"{seed_help} (default: 0)")
    p.add_argument(
        "--steps",
        type=_int_at_least(1),
        default=3000,
        help="most optimisation steps; the fit may stop earlier (default: 3000)",
    )


def _add_fit_args(p: argparse.ArgumentParser) -> None:
    """``--seed``, ``--steps``, ``--topology`` and ``--quiet``, shared by fit and evaluate."""
    _add_seed_steps_args(p, "random seed")
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


def _build_parser() -> argparse.ArgumentParser:
    from interplace.topology import builtin_names

    parser = argparse.ArgumentParser(
        prog="interplace",
        description="Interference-aware placement of GPU jobs.",
    )
    parser.add_argument("--version", action="version", version=f"interplace {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    topo = sub.add_parser(
        "topo",
        help="show a machine topology (file, built-in or live)",
        description="Show a topology as an nvidia-smi-style matrix, JSON or a plot. "
        f"Built-ins: {', '.join(builtin_names())} (NAME*N for N machines on one network).",
    )
    topo.add_argument(
        "spec",
        nargs="?",
        metavar="FILE_OR_BUILTIN",
        help="nvidia-smi topo -m text, NCCL topology XML, hwloc XML, or a built-in",
    )
    topo.add_argument(
        "--format",
        default="auto",
        choices=["auto", "nvidia-smi", "nccl", "hwloc"],
        help="file format (default: detect from content)",
    )
    topo.add_argument("--json", action="store_true", help="print the topology summary as JSON")
    topo.add_argument("--plot", metavar="OUT", help="write a layered drawing (.png, .svg, .pdf)")
    topo.add_argument(
        "--discover", action="store_true", help="read this machine's topology from NVML and sysfs"
    )
    topo.add_argument(
        "--record",
        metavar="DIR",
        help="with --discover: save the NVML and sysfs readings to DIR as a fixture",
    )
    topo.set_defaults(func=_cmd_topo)

    from interplace.collectors import FORMATS

    ing = sub.add_parser(
        "ingest",
        help="convert counter output a cluster already produces to the long table",
        description="Convert nvidia-smi --query-gpu CSV, nvidia-smi dmon, perf stat -x, -I or "
        "dcgm-exporter Prometheus text into interplace's long counter table "
        "(t_s, host, device, metric, value).",
    )
    ing.add_argument("file", metavar="FILE", help="captured counter output")
    ing.add_argument(
        "--format",
        default="auto",
        choices=["auto", *FORMATS],
        help="input format (default: detect from content)",
    )
    ing.add_argument("--out", required=True, metavar="OUT", help="output table: .csv or .parquet")
    ing.add_argument("--host", help="host name to record (default: from the input or localhost)")
    ing.add_argument(
        "--fields", metavar="A,B,...", help="nvidia-smi --query-gpu field list, for noheader output"
    )
    ing.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="sampling interval, for input without time stamps (dmon, prometheus)",
    )
    ing.set_defaults(func=_cmd_ingest)

    col = sub.add_parser(
        "collect",
        help="sample GPU (NVML) and host counters, optionally while a command runs",
        description="Sample NVML and host counters into the long table, like `perf stat -- CMD`: "
        "sampling stops when CMD exits (or after --duration) and CMD's exit code is returned.",
    )
    col.add_argument("--out", required=True, metavar="OUT", help="output table: .csv or .parquet")
    col.add_argument(
        "--interval-ms",
        type=float,
        default=100.0,
        help="sampling interval in milliseconds (default: 100)",
    )
    col.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    col.add_argument("--run-id", help="run id to record on every row")
    col.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="command to run while sampling"
    )
    col.set_defaults(func=_cmd_collect)

    prof = sub.add_parser(
        "profile",
        help="measure workloads alone and in every pair on one GPU",
        description="Run each workload alone and every pair together on one device (co-runners "
        "start at the same instant), measure each one's throughput over the same window from "
        "its INTERPLACE_PROGRESS lines, sample counters throughout, and write runs.csv + "
        "samples.csv. SPEC: built-in names (gemm,memcpy,h2d,d2h,launch,cnn,transformer,"
        "cpu_pipeline; NAME:SIZE sets a size) or a .json/.toml file of {name, command} jobs.",
    )
    prof.add_argument("--workloads", required=True, metavar="SPEC")
    prof.add_argument(
        "--out", required=True, metavar="DIR", help="output directory (new, or empty)"
    )
    prof.add_argument(
        "--modes",
        default="timeslice",
        help="comma list of sharing modes: timeslice, mps (default: timeslice)",
    )
    prof.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds before the measurement window (default: 2)",
    )
    prof.add_argument(
        "--measure",
        type=float,
        default=5.0,
        metavar="S",
        help="length of the measurement window (default: 5)",
    )
    prof.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    prof.add_argument(
        "--gpu",
        type=_int_at_least(0),
        default=0,
        metavar="N",
        help="with --device cuda: the GPU to profile on, by its nvidia-smi / NVML index; "
        "runs.csv names it as its device (default: 0)",
    )
    prof.add_argument("--no-pairs", action="store_true", help="only the isolated runs")
    prof.set_defaults(func=_cmd_profile)

    at_least_1, seed_type = _int_at_least(1), _int_at_least(0)
    fitp = sub.add_parser(
        "fit",
        help="fit the Bayesian interference model to co-location runs",
        description="Fit the interference model to a runs table (and optional counter samples) "
        "and save it as a model directory (model.json + posterior.safetensors).",
    )
    _add_model_data_args(fitp)
    fitp.add_argument(
        "--out",
        required=True,
        metavar="MODEL",
        help="model directory to write (an existing model there is replaced)",
    )
    fitp.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where to fit (default: cpu)"
    )
    _add_fit_args(fitp)
    fitp.set_defaults(func=_cmd_fit)

    pred = sub.add_parser(
        "predict",
        help="predict co-located speeds with a fitted model",
        description="Predict each job's speed (co-located / isolated throughput) next to its "
        "co-runners, with a 90%% interval of a new measurement. PAIRS has the columns job and "
        "co_runner (several co-runners joined by +); OUT gets job, co_runner, speed_mean, "
        "speed_q05, speed_q95, one row per query in the same order.",
    )
    pred.add_argument("--model", required=True, metavar="MODEL", help="model directory (fit)")
    pred.add_argument(
        "--pairs",
        required=True,
        metavar="PAIRS",
        help="queries: .csv or .parquet with columns job, co_runner",
    )
    pred.add_argument("--out", required=True, metavar="OUT", help="predictions: .csv or .parquet")
    pred.add_argument(
        "--samples-per-query",
        type=_int_at_least(2),
        default=500,
        metavar="N",
        help="posterior draws per query (default: 500)",
    )
    pred.add_argument("--seed", type=seed_type, default=0, help="random seed (default: 0)")
    pred.set_defaults(func=_cmd_predict)

    ev = sub.add_parser(
        "evaluate",
        help="score the model on held-out runs against simple baselines",
        description="Fit on a seeded split of the runs and print, as JSON, the model's MAE, 90%% "
        "interval coverage and width on the held-out co-located runs, and the baselines' MAE.",
    )
    _add_model_data_args(ev)
    split = ev.add_mutually_exclusive_group()
    split.add_argument(
        "--holdout-frac",
        type=_open_fraction,
        metavar="F",
        help="hold out this share of the co-located runs (default: 0.3)",
    )
    split.add_argument(
        "--cold-jobs",
        type=at_least_1,
        metavar="N",
        help="hold out every co-located run of N jobs (cold start)",
    )
    _add_fit_args(ev)
    ev.add_argument("--out", metavar="JSON", help="also write the JSON to this file")
    ev.set_defaults(func=_cmd_evaluate)

    demo = sub.add_parser(
        "demo",
        help="run interplace end to end on built-in data",
        description="Show a built-in topology and the contention domains of a few GPU sets, "
        "then fit the interference model to Gavel's packaged V100 measurements with 30%% of "
        "the co-located runs held out, print its held-out error, interval coverage and "
        "baselines, a few predictions and the best and worst partners of one job, and write "
        "into --out the topology plot, a CSV of predictions for every ordered job pair and a "
        "plot of predicted against measured held-out speed.",
    )
    demo.add_argument(
        "--topology",
        default="dgx1-v100",
        choices=builtin_names(),
        help="built-in machine to use (default: dgx1-v100)",
    )
    demo.add_argument(
        "--out", default="interplace-demo", help="output directory (default: interplace-demo)"
    )
    _add_seed_steps_args(demo, "seed of the held-out split, the fit and the predictions")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interplace`` console command; returns the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (InputError, OSError) as exc:
        if args.debug:
            raise
        msg = first_line(exc)
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            msg = f"{exc.strerror}: {exc.filename}"
        sys.stderr.write(f"interplace: error: {msg}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interplace: interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
