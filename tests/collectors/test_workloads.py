"""The built-in workloads speak the progress protocol on CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from interplace.collectors.profile import parse_progress
from interplace.collectors.workloads import BUILTINS

_FAST = {"launch": "kernels", "gemm": "flop", "h2d": "bytes"}
_SLOW = {"memcpy": "bytes", "d2h": "bytes", "cnn": "samples", "transformer": "sequences",
         "cpu_pipeline": "samples"}


def _check(name: str, unit: str, size: int, go: bool = False) -> None:
    env = dict(os.environ)
    env.pop("INTERPLACE_WAIT_GO", None)
    if go:
        env["INTERPLACE_WAIT_GO"] = "1"
    r = subprocess.run([sys.executable, "-m", f"interplace.collectors.workloads.{name}",
                        "--device", "cpu", "--seconds", "0.3", "--size", str(size)],
                       input="GO\n", capture_output=True, text=True, timeout=60, env=env,
                       check=False)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"INTERPLACE_UNIT {unit}"
    p = parse_progress(lines, name)
    assert p.unit == unit
    assert p.units[0] == 0.0
    assert p.units[-1] > 0
    # ran for --seconds and reported progress repeatedly along the way; how often depends on
    # how long one step takes on a loaded machine, so no gap is asserted (no timed tests).
    assert p.times[-1] - p.times[0] >= 0.3
    assert p.times.size >= 2 and bool((p.times[1:] >= p.times[:-1]).all())
    if name in ("h2d", "d2h"):
        assert "host memcpy stands in" in r.stderr


def test_every_builtin_is_listed() -> None:
    assert set(BUILTINS) == set(_FAST) | set(_SLOW)


@pytest.mark.parametrize(("name", "unit"), sorted(_FAST.items()))
def test_fast_workloads_emit_the_protocol(name: str, unit: str) -> None:
    _check(name, unit, size=8, go=name == "launch")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "unit"), sorted(_SLOW.items()))
def test_other_workloads_emit_the_protocol(name: str, unit: str) -> None:
    _check(name, unit, size=2)


def test_bad_arguments_are_refused() -> None:
    r = subprocess.run([sys.executable, "-m", "interplace.collectors.workloads.launch",
                        "--device", "cpu", "--seconds", "0"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2
    assert "--seconds must be > 0" in r.stderr
