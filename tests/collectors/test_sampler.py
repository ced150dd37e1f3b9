"""sample(): replayed readings through a fake clock into chunked, crash-safe files."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from interplace.collectors.nvml import ReplayGpuBackend
from interplace.collectors.sampler import (
    check_output_path,
    partial_path,
    read_partial,
    sample,
    unsupported_notes,
)
from interplace.collectors.table import read_samples
from interplace.errors import InputError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def _replay(n: int, gpus: int = 2) -> ReplayGpuBackend:
    return ReplayGpuBackend({"devices": [
        [{"temp_c": 40 + g + k, "power_mw": 1000.0 * k} for k in range(n)] for g in range(gpus)]})


def _run(out: Path, backend: Any, **kw: Any) -> Any:
    clock = FakeClock()
    kw.setdefault("host", "n1")
    return sample([backend], 0.25, out=out, clock=clock, sleep=clock.sleep, **kw), clock


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_replay_gives_expected_long_table(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"s{ext}"
    summary, clock = _run(out, _replay(3), run_id="r1")
    assert (summary.rows, summary.samples, summary.seconds) == (12, 3, 0.75)
    assert clock.sleeps == [0.25, 0.25, 0.25]
    df = read_samples(out)
    expected = pd.DataFrame(
        [(0.25 * k, "n1", str(g), m, v, "r1")
         for k in range(3) for g in range(2)
         for m, v in (("temp_c", 40.0 + g + k), ("power_mw", 1000.0 * k))],
        columns=["t_s", "host", "device", "metric", "value", "run_id"])
    pd.testing.assert_frame_equal(df, expected, check_dtype=False)
    assert not partial_path(out).exists()


def test_duration_bounds_ticks_and_lost_devices_are_skipped(tmp_path: Path) -> None:
    rb = ReplayGpuBackend({"devices": [[{"temp_c": k} for k in range(10)],
                                       [{"temp_c": 0}, None, {"temp_c": 2}, {"temp_c": 3}]]})
    summary, _ = _run(tmp_path / "s.parquet", rb, duration_s=1.0)
    df = read_samples(tmp_path / "s.parquet")
    assert summary.samples == 4
    assert df["t_s"].unique().tolist() == [0.0, 0.25, 0.5, 0.75]
    assert df.loc[df["device"] == "1", "t_s"].tolist() == [0.0, 0.5, 0.75]


def test_slow_reads_skip_missed_ticks(tmp_path: Path) -> None:
    clock = FakeClock()

    class Slow:
        unsupported: frozenset[tuple[str, str]] = frozenset()

        def device_count(self) -> int:
            return 1

        def device_id(self, index: int) -> str:
            return "0"

        def read(self, index: int) -> dict[str, float]:
            clock.now += 0.6  # a read takes 2.4 intervals
            return {"temp_c": 1.0}

    sample([Slow()], 0.25, 2.0, out=tmp_path / "s.csv", clock=clock, sleep=clock.sleep,
           host="n")
    t = read_samples(tmp_path / "s.csv")["t_s"].tolist()
    assert t == pytest.approx([0.0, 0.75, 1.5])  # on the 0.25 s grid, never two ticks at once


def test_unsupported_and_non_finite_values(tmp_path: Path) -> None:
    class Odd:
        @property
        def unsupported(self) -> frozenset[tuple[str, str]]:
            return frozenset({("0", "power_mw")})

        def device_count(self) -> int:
            return 1

        def device_id(self, index: int) -> str:
            return "0"

        def read(self, index: int) -> dict[str, float]:
            return {"temp_c": 1.0, "sm_clock_mhz": float("nan"), "power_mw": float("inf")}

    summary, _ = _run(tmp_path / "s.csv", Odd(), duration_s=0.5)
    assert summary.rows == 2 and summary.unsupported == frozenset({("0", "power_mw")})
    assert set(read_samples(tmp_path / "s.csv")["metric"]) == {"temp_c"}


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_chunking_bounds_memory_and_matches_unchunked(tmp_path: Path, ext: str) -> None:
    chunks: list[int] = []
    big, _ = _run(tmp_path / f"one{ext}", _replay(25))
    small, _ = _run(tmp_path / f"many{ext}", _replay(25), chunk_rows=7, on_flush=chunks.append)
    assert big == small and small.rows == 100
    assert max(chunks) <= 7 and sum(chunks) == 100 and len(chunks) == 15
    pd.testing.assert_frame_equal(read_samples(tmp_path / f"one{ext}"),
                                  read_samples(tmp_path / f"many{ext}"))
    if ext == ".parquet":
        assert pq.ParquetFile(tmp_path / "many.parquet").metadata.num_row_groups == 15
        assert pq.ParquetFile(tmp_path / "one.parquet").metadata.num_row_groups == 1


class Crashing(ReplayGpuBackend):
    """A replay that fails with a non-NVML error on its read number ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__({"devices": [[{"temp_c": float(k)} for k in range(100)]]})
        self.at, self.n = at, 0

    def read(self, index: int) -> dict[str, float]:
        self.n += 1
        if self.n == self.at:
            raise RuntimeError("sensor driver crashed")
        return super().read(index)


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_crash_keeps_partial_and_writes_no_output(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"s{ext}"
    chunks: list[int] = []
    with pytest.raises(RuntimeError, match="crashed"):
        _run(out, Crashing(at=11), chunk_rows=4, on_flush=chunks.append)
    assert not out.exists()
    partial = partial_path(out)
    assert partial.name == f"s{ext}.partial"
    # chunks of 4, 4 flushed while running, the last 2 rows when the error came
    assert chunks == [4, 4, 2]
    df = read_partial(out)
    assert df["value"].tolist() == [float(k) for k in range(10)]
    # a clean run afterwards replaces the stale partial and leaves none
    _run(out, _replay(2))
    assert out.exists() and not partial.exists()


def test_stop_event_and_empty_run(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    clock = FakeClock()
    s = sample([_replay(5)], 0.1, stop=stop, out=tmp_path / "s.parquet", clock=clock,
               sleep=clock.sleep, host="n")
    assert (s.rows, s.samples) == (0, 0)
    assert read_samples(tmp_path / "s.parquet").empty


@pytest.mark.parametrize(("kw", "msg"), [
    ({"interval_s": 0.0}, "interval must be a positive"),
    ({"duration_s": -1.0}, "duration must be a positive"),
    ({"chunk_rows": 0}, "chunk_rows must be a positive"),
    ({"out_name": "s.txt"}, "unknown sample-table extension '.txt'"),
    ({"out_name": "nodir/s.csv"}, "output directory does not exist"),
])
def test_bad_arguments(tmp_path: Path, kw: dict[str, Any], msg: str) -> None:
    out = tmp_path / kw.pop("out_name", "s.csv")
    with pytest.raises(InputError, match=msg):
        sample([_replay(1)], out=out, host="n", **kw)


_KILLED = """
import os, signal, sys
from interplace.collectors.nvml import ReplayGpuBackend
from interplace.collectors.sampler import sample

class Dying(ReplayGpuBackend):
    def __init__(self):
        super().__init__({"devices": [[{"temp_c": float(k)} for k in range(100)]]})
        self.n = 0

    def read(self, index):
        self.n += 1
        if self.n == 11:  # killed outright: no except, no finally, no flush
            os.kill(os.getpid(), signal.SIGKILL)
        return super().read(index)

t = [0.0]
def tick(s):
    t[0] += s
sample([Dying()], 0.1, out=sys.argv[1], chunk_rows=4, clock=lambda: t[0], sleep=tick,
       host="n")
"""


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_sigkill_loses_at_most_the_chunk_in_memory(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"s{ext}"
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(out)], capture_output=True,
                          timeout=60, check=False)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not out.exists()
    # chunks of 4: rows 0..7 were written before the kill, rows 8 and 9 were still in memory
    df = read_partial(out)
    assert df["value"].tolist() == [float(k) for k in range(8)]
    assert set(df["host"]) == {"n"} and set(df["device"]) == {"0"}


def test_read_partial_drops_a_csv_line_cut_short(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    partial_path(out).write_text(textwrap.dedent("""\
        t_s,host,device,metric,value
        0.0,n,0,temp_c,40.0
        0.1,n,0,temp_c,41.0
        0.2,n,0,temp_c,4"""))
    assert read_partial(out)["value"].tolist() == [40.0, 41.0]
    with pytest.raises(InputError, match="no partial samples for"):
        read_partial(tmp_path / "other.parquet")


@pytest.mark.parametrize("data", [
    b"t_s,host,device,metric,value\n0.0,\xff\xfe,0,temp_c,40.0\n",  # not UTF-8
    b't_s,host,device,metric,value\n0.0,"n,0,temp_c,40.0\n',  # a quote left open
    b"\n",  # no header line
], ids=["not-utf8", "open-quote", "no-header"])
def test_read_partial_refuses_a_bad_csv_as_read_samples_does(tmp_path: Path,
                                                             data: bytes) -> None:
    whole, out = tmp_path / "whole.csv", tmp_path / "s.csv"
    whole.write_bytes(data)
    partial_path(out).write_bytes(data)
    with pytest.raises(InputError) as as_table:
        read_samples(whole)
    with pytest.raises(InputError) as as_partial:
        read_partial(out)
    assert str(as_partial.value) == str(as_table.value).replace(str(whole),
                                                                str(partial_path(out)))


def test_read_partial_names_an_unreadable_parquet_part(tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    partial_path(out).mkdir()
    (partial_path(out) / "part-00000.parquet").write_text("this is not parquet")
    with pytest.raises(InputError, match=r"part-00000\.parquet: cannot read as Parquet: "):
        read_partial(out)


def test_output_path_is_checked(tmp_path: Path) -> None:
    assert check_output_path(tmp_path / "s.CSV") == tmp_path / "s.CSV"
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(InputError, match="is a directory, not a file"):
        check_output_path(tmp_path / "d.csv")
    # a directory without an extension too (it was "unknown sample-table extension '(none)'")
    with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path))} is a directory, not a"):
        check_output_path(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="output directory is not a directory"):
        check_output_path(tmp_path / "f" / "s.csv")


def test_unsupported_notes_name_each_device_once() -> None:
    assert unsupported_notes(frozenset()) == []
    assert unsupported_notes({("1", "power_mw"), ("0", "pcie_tx_bytes_total"),
                              ("0", "pcie_rx_bytes_total")}) == [
        "GPU 0 does not report pcie_rx_bytes_total, pcie_tx_bytes_total",
        "GPU 1 does not report power_mw"]
