"""``interplace tune``: Bayesian optimisation of a command's parameters, one trial per run.

CMD gets the trial's parameters as one JSON object on its standard input and prints the
objective as the last line of its standard output. Every finished trial is appended to
``--out`` at once (see :mod:`interplace.placement.bo._trials`); running again with the same
``--out`` continues. A trial fails (recorded, reported on stderr, not fatal) when CMD exits
non-zero, prints no number on its last line, or prints NaN or an infinity. A trial ends when
CMD exits; whatever it left running in its own session is stopped then.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

from interplace.cli._common import Subparsers, count, int_at_least, seed_arg
from interplace.errors import InputError, check_output_file

__all__ = ["register", "run_trial"]


def run_trial(cmd: Sequence[str], params: dict[str, Any],
              procs: dict[int, subprocess.Popen[str]] | None = None,
              lock: threading.Lock | None = None,
              stopped: threading.Event | None = None) -> float | str:
    """Run ``cmd`` with ``params`` as JSON on stdin: the number on its last stdout line, or an
    error message (one line) when it failed. ``procs`` (guarded by ``lock``) holds the running
    child by its pid so that an interrupt can stop it: the child is started and entered under
    the lock, so an interrupt that takes the lock finds every child started (a trial started
    between its start and its entry was left running, and tune waited for it); once the
    interrupt has set ``stopped`` (under the lock), no child starts.

    >>> run_trial([sys.executable, "-c", "import json,sys; print(json.load(sys.stdin)['x'] * 2)"],
    ...           {"x": 1.5})
    3.0
    >>> run_trial([sys.executable, "-c", "print('oops')"], {})
    "the last line of stdout is not a number: 'oops'"
    """
    with lock if lock is not None else contextlib.nullcontext():
        if stopped is not None and stopped.is_set():
            return "interrupted before it started"
        try:
            # errors="replace": a trial printing bytes that are not UTF-8 still reports (or
            # fails). Its own session: an interrupt stops its whole process group.
            proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as exc:
            return f"cannot run {cmd[0]}: {exc.strerror or exc}"
        if procs is not None:
            procs[proc.pid] = proc
    try:
        out, err = _finish(proc, json.dumps(params))
    finally:
        if procs is not None and lock is not None:
            with lock:
                procs.pop(proc.pid, None)
    if proc.returncode != 0:
        tail = [ln for ln in err.splitlines() if ln.strip()]
        why = f"exit status {proc.returncode}"
        return f"{why}: {tail[-1].strip()}" if tail else why
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        return "no output on stdout"
    last = lines[-1].strip()
    try:
        value = float(last)
    except ValueError:
        return f"the last line of stdout is not a number: {last[:80]!r}"
    if not math.isfinite(value):
        return f"the objective is {value}"
    return value


def _finish(proc: subprocess.Popen[str], text: str) -> tuple[str, str]:
    """Feed ``text`` to ``proc``'s stdin and read its stdout and stderr until it exits.

    A trial is over when its command exits: whatever it left running in its session (a
    background process holding its output open, which ``communicate`` would wait for, or a
    GPU the next trial needs) is stopped then, as an interrupt stops it.
    """
    got: dict[str, str] = {}

    def read(name: str, stream: Any) -> None:
        got[name] = stream.read()

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(text)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]

    threads = [threading.Thread(target=read, args=(n, s), daemon=True)
               for n, s in (("out", proc.stdout), ("err", proc.stderr))]
    threads.append(threading.Thread(target=feed, daemon=True))
    for t in threads:
        t.start()
    proc.wait()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # what the trial left in its session, if anything
        for t in threads[:2]:
            t.join(timeout=5)
        if all(not t.is_alive() for t in threads[:2]):
            break
    for stream in (proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()  # type: ignore[union-attr]
    return got.get("out", ""), got.get("err", "")


def _run(args: argparse.Namespace) -> int:
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    from interplace.placement.bo import TrialsFile, Tuner, load_space

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise InputError("no command given: interplace tune ... --out trials.csv -- CMD ARGS")
    if shutil.which(cmd[0]) is None:
        raise InputError(f"cannot run {cmd[0]}: no such command (or not executable)")
    space = load_space(args.space)
    out = check_output_file(args.out)
    log = TrialsFile(out, space)
    tuner = Tuner.from_trials(out, space, maximize=args.maximize, seed=args.seed,
                              n_init=args.init, budget=args.budget, noisy=args.noisy)
    done = len(tuner.trials)
    if done >= args.budget:
        sys.stderr.write(f"interplace: {out} already holds {count(done, 'finished trial')}, "
                         f"the budget of {args.budget} is spent: none run now (raise --budget "
                         "to run more)\n")
    elif done:
        sys.stderr.write(f"interplace: continuing {out}: {count(done, 'finished trial')} of "
                         f"{args.budget}\n")
    bar: Any = None
    if sys.stderr.isatty() and not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=args.budget, initial=min(done, args.budget), unit="trial",
                   file=sys.stderr, desc="tuning")

    def best_text() -> str:
        b = tuner.best
        return "none yet" if b is None else f"{b.value:.6g}"

    def say(text: str) -> None:
        if bar is not None:
            bar.write(text, file=sys.stderr)
        else:
            sys.stderr.write(text + "\n")

    procs: dict[int, subprocess.Popen[str]] = {}
    lock = threading.Lock()
    stopped = threading.Event()
    running: dict[Future[float | str], dict[str, Any]] = {}
    failed = 0
    pool = ThreadPoolExecutor(max_workers=args.batch, thread_name_prefix="interplace-tune")

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # as Ctrl-C: the trials are stopped, the finished ones kept

    main = threading.current_thread() is threading.main_thread()  # where signals are handled
    on_term = signal.signal(signal.SIGTERM, terminated) if main else None
    try:
        if bar is not None:
            bar.set_postfix_str(f"best {best_text()}")
        while True:
            free = args.batch - len(running)
            if free > 0:
                for p in tuner.ask(free):
                    running[pool.submit(run_trial, cmd, p, procs, lock, stopped)] = p
            if not running:
                break
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in finished:
                params = running.pop(fut)
                trial = tuner.tell(params, fut.result())
                log.append(trial)
                if trial.value is None:
                    failed += 1
                    say(f"interplace: trial {len(tuner.trials)} failed: {trial.error} "
                        f"(params {json.dumps(params)})")
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"best {best_text()}")
    except BaseException:
        with lock:
            stopped.set()
            for proc in list(procs.values()):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # the trial and what it started
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, on_term)
        if bar is not None:
            bar.close()
    pool.shutdown(wait=True)
    best = tuner.best
    n = len(tuner.trials)
    ran = n - done
    summary = f"{count(n, 'trial')} in {out} ({ran} run now, {failed} failed now)"
    if best is None:
        sys.stdout.write(f"{summary}; no trial succeeded\n")
        return 1 if ran else 0  # every trial run now failed: the command is broken
    sys.stdout.write(f"{summary}; best {best.value!r} at {json.dumps(best.params)}\n")
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``tune`` command to the ``interplace`` parser."""
    p = sub.add_parser(
        "tune",
        help="tune a command's parameters by Bayesian optimisation (GP + log EI)",
        description="Run CMD once per trial with the trial's parameters as a JSON object on its "
        "standard input; read the objective from the last line of its standard output. Each "
        "finished trial is appended to --out at once (one column per parameter, then value, "
        "status, error); re-running with the same --out continues. A failing CMD (non-zero "
        "exit, no number, NaN) is recorded and reported, not fatal.",
        usage="interplace tune --space SPACE --budget N [--maximize] [--seed S] [--init N] "
        "[--batch B] [--noisy] [--quiet] --out TRIALS -- CMD [ARGS ...]",
    )
    p.add_argument("--space", required=True, metavar="SPACE",
                   help='space.json: {"params": [{"name", "type": "int"|"float"|"choice", '
                   '...}], "constraints": [...]}')
    p.add_argument("--budget", required=True, type=int_at_least(1), metavar="N",
                   help="total trials, finished ones in --out included")
    p.add_argument("--maximize", action="store_true", help="maximise (default: minimise)")
    p.add_argument("--seed", type=seed_arg, default=0, metavar="S",
                   help="seed of the initial design and of every step (default: 0)")
    p.add_argument("--init", type=int_at_least(1), default=None, metavar="N",
                   help="initial Sobol design size (default: max(5, 2 x parameters))")
    p.add_argument("--batch", type=int_at_least(1), default=1, metavar="B",
                   help="trials run in parallel (default: 1)")
    p.add_argument("--noisy", action="store_true",
                   help="the objective is noisy: qLogNoisyExpectedImprovement for every step, "
                   "and a point may be re-run (default: LogExpectedImprovement, no repeats)")
    p.add_argument("--out", required=True, metavar="TRIALS", help="trials CSV, appended to")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("cmd", nargs="*", metavar="CMD", help="the command after --")
    p.set_defaults(func=_run)
