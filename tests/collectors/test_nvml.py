"""GPU counter backends: the NVML sampler over a driver stand-in, and the replay backend."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from interplace.collectors.nvml import (
    DeviceLost,
    EndOfRecording,
    GpuCounterBackend,
    PynvmlSampler,
    ReplayGpuBackend,
)
from interplace.errors import InputError


class FakeNvml:
    """The part of the pynvml module PynvmlSampler uses, for GPUs that live in a dict.

    ``fail`` maps (gpu index, function name) to an NVML error code that call raises;
    ``field_fail`` lists field ids whose per-field return is "not supported". NVLink moves
    ``nvlink_kib`` KiB out and ``nvlink_rx_kib`` in (twice ``nvlink_kib`` when ``None``).
    """

    NVMLError = pynvml.NVMLError

    def __init__(self, n: int = 2) -> None:
        for name in dir(pynvml):
            if name.startswith("NVML_"):
                setattr(self, name, getattr(pynvml, name))
        self.n = n
        self.fail: dict[tuple[int, str], int] = {}
        self.field_fail: set[int] = set()
        self.calls: dict[str, int] = {}
        self.t_us = 1_000_000
        self.nvlink_kib = 0.0
        self.nvlink_rx_kib: float | None = None
        self.pcie_tx_bytes = 5e9
        self.pcie_rx_bytes = 6e9
        self.initialised = False

    def _call(self, h: int, fn: str) -> None:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        if (h, fn) in self.fail:
            raise pynvml.NVMLError(self.fail[(h, fn)])

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self._call(i, "nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._call(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=50 + h, memory=20 + h)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._call(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=1000 * (h + 1), total=10_000)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self._call(h, "nvmlDeviceGetClockInfo")
        return 1410 if kind == pynvml.NVML_CLOCK_SM else 1215

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._call(h, "nvmlDeviceGetPowerUsage")
        return 250_000

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._call(h, "nvmlDeviceGetTemperature")
        return 40 + h

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        self._call(h, "nvmlDeviceGetPcieThroughput")
        return 100 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 200

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[tuple[int, int]]) -> list[Any]:
        self._call(h, "nvmlDeviceGetFieldValues")
        vals = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: self.pcie_tx_bytes,
                pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: self.pcie_rx_bytes,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: self.nvlink_kib,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
                    2 * self.nvlink_kib if self.nvlink_rx_kib is None else self.nvlink_rx_kib}
        out = []
        for fid, _scope in ids:
            ret = (pynvml.NVML_ERROR_NOT_SUPPORTED if fid in self.field_fail
                   else pynvml.NVML_SUCCESS)
            out.append(SimpleNamespace(
                fieldId=fid, nvmlReturn=ret, timestamp=self.t_us,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                value=SimpleNamespace(ullVal=int(vals[fid]))))
        return out


def test_pynvml_sampler_reads_every_metric() -> None:
    nv = FakeNvml()
    with PynvmlSampler(nv) as gpus:
        assert isinstance(gpus, GpuCounterBackend)
        assert gpus.device_count() == 2
        first = gpus.read(1)
        # 0.5 s later NVLink has moved 1000 KiB tx, 2000 KiB rx and PCIe 1e6 B tx, 3e6 B rx
        nv.t_us += 500_000
        nv.nvlink_kib += 1000
        nv.pcie_tx_bytes += 1e6
        nv.pcie_rx_bytes += 3e6
        second = gpus.read(1)
    assert not nv.initialised
    assert first == {"gpu_util_pct": 51.0, "mem_util_pct": 21.0, "fb_used_bytes": 2000.0,
                     "sm_clock_mhz": 1410.0, "mem_clock_mhz": 1215.0, "power_mw": 250000.0,
                     "temp_c": 41.0, "pcie_tx_bytes_total": 5e9, "pcie_rx_bytes_total": 6e9}
    # KiB/s -> KB/s: 1000 KiB / 0.5 s = 2048 KB/s
    assert second["nvlink_tx_kbps"] == pytest.approx(2048.0)
    assert second["nvlink_rx_kbps"] == pytest.approx(4096.0)
    # the byte counters give both totals and rates: 1e6 B / 0.5 s = 2000 KB/s (1 KB = 1000 B)
    assert second["pcie_tx_bytes_total"] == 5e9 + 1e6
    assert second["pcie_rx_bytes_total"] == 6e9 + 3e6
    assert second["pcie_tx_kbps"] == pytest.approx(2000.0)
    assert second["pcie_rx_kbps"] == pytest.approx(6000.0)
    # the ~20 ms throughput call is not needed when the counters work
    assert nv.calls.get("nvmlDeviceGetPcieThroughput", 0) == 0
    assert gpus.unsupported == frozenset()


def test_pcie_rate_skips_a_counter_that_wrapped_or_a_stalled_clock() -> None:
    nv = FakeNvml(n=1)
    with PynvmlSampler(nv) as gpus:
        gpus.read(0)
        nv.t_us += 1_000_000
        nv.pcie_tx_bytes = 1e3  # tx wrapped (or the driver reset it); rx moved on normally
        nv.pcie_rx_bytes += 4e6
        wrapped = gpus.read(0)
        nv.t_us += 250_000
        nv.pcie_tx_bytes += 5e5
        nv.pcie_rx_bytes += 1e6
        after = gpus.read(0)
        stalled = gpus.read(0)  # same field timestamp: no time passed, no rate
    assert wrapped["pcie_tx_bytes_total"] == 1e3 and "pcie_tx_kbps" not in wrapped
    assert wrapped["pcie_rx_kbps"] == pytest.approx(4000.0)
    # measured from the wrapped reading on: 5e5 B / 0.25 s = 2000 KB/s
    assert after["pcie_tx_kbps"] == pytest.approx(2000.0)
    assert after["pcie_rx_kbps"] == pytest.approx(4000.0)
    assert "pcie_tx_kbps" not in stalled and "pcie_rx_kbps" not in stalled
    assert stalled["pcie_rx_bytes_total"] == after["pcie_rx_bytes_total"]
    assert gpus.unsupported == frozenset()


def test_nvlink_rate_skips_only_the_direction_that_wrapped_or_a_stalled_clock() -> None:
    nv = FakeNvml(n=1)
    nv.nvlink_kib, nv.nvlink_rx_kib = 5000.0, 1000.0
    with PynvmlSampler(nv) as gpus:
        first = gpus.read(0)
        nv.t_us += 500_000
        nv.nvlink_kib = 10.0  # tx wrapped (or the driver reset it); rx moved on normally
        nv.nvlink_rx_kib += 1000.0
        wrapped = gpus.read(0)
        nv.t_us += 250_000
        nv.nvlink_kib += 500.0
        nv.nvlink_rx_kib += 250.0
        after = gpus.read(0)
        stalled = gpus.read(0)  # same field timestamp: no time passed, no rate
    assert "nvlink_tx_kbps" not in first and "nvlink_rx_kbps" not in first
    # 1000 KiB / 0.5 s = 2048 KB/s (1 KiB = 1.024 KB)
    assert "nvlink_tx_kbps" not in wrapped
    assert wrapped["nvlink_rx_kbps"] == pytest.approx(2048.0)
    # measured from the wrapped reading on: 500 KiB / 0.25 s = 2048 KB/s
    assert after["nvlink_tx_kbps"] == pytest.approx(2048.0)
    assert after["nvlink_rx_kbps"] == pytest.approx(1024.0)
    assert "nvlink_tx_kbps" not in stalled and "nvlink_rx_kbps" not in stalled
    assert gpus.unsupported == frozenset()


def test_failing_metric_is_skipped_remembered_and_reported() -> None:
    nv = FakeNvml()
    nv.fail[(0, "nvmlDeviceGetPowerUsage")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    with PynvmlSampler(nv) as gpus:
        r0 = [gpus.read(0) for _ in range(3)]
        r1 = gpus.read(1)
    assert all("power_mw" not in r and r["temp_c"] == 40.0 for r in r0)
    assert r1["power_mw"] == 250000.0
    assert ("0", "power_mw") in gpus.unsupported
    assert ("1", "power_mw") not in gpus.unsupported
    # tried once for GPU 0 (then remembered), once for GPU 1
    assert nv.calls["nvmlDeviceGetPowerUsage"] == 2


def test_pcie_falls_back_to_throughput_when_field_values_unsupported() -> None:
    nv = FakeNvml(n=1)
    nv.field_fail = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES}
    with PynvmlSampler(nv) as gpus:
        gpus.read(0)
        second = gpus.read(0)
    assert "pcie_tx_bytes_total" not in second
    assert second["pcie_tx_kbps"] == 100.0 and second["pcie_rx_kbps"] == 200.0
    assert {("0", "pcie_tx_bytes_total"), ("0", "pcie_rx_bytes_total")} <= gpus.unsupported


def test_lost_gpu_raises_device_lost_and_is_not_marked_unsupported() -> None:
    nv = FakeNvml()
    nv.fail[(1, "nvmlDeviceGetUtilizationRates")] = pynvml.NVML_ERROR_GPU_IS_LOST
    with PynvmlSampler(nv) as gpus:
        with pytest.raises(DeviceLost):
            gpus.read(1)
        del nv.fail[(1, "nvmlDeviceGetUtilizationRates")]
        assert gpus.read(1)["gpu_util_pct"] == 51.0
    assert gpus.unsupported == frozenset()


def test_nvml_unavailable_is_an_input_error() -> None:
    nv = FakeNvml()

    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    nv.nvmlInit = no_driver  # type: ignore[method-assign]
    with pytest.raises(InputError, match=r"^NVML is not available: "):
        PynvmlSampler(nv).__enter__()
    with pytest.raises(InputError, match="not initialised"):
        PynvmlSampler(nv).read(0)


def test_real_pynvml_without_gpu() -> None:
    message = ""
    try:
        with PynvmlSampler() as gpus:
            readings = [gpus.read(i) for i in range(gpus.device_count())]
    except InputError as exc:
        message = str(exc)
        readings = []
    if message:
        assert message.startswith("NVML is not available: ")
    else:  # a machine with a driver: every GPU must give at least one reading
        assert all(readings)


def test_replay_serves_readings_in_order_and_ends() -> None:
    rb = ReplayGpuBackend({"devices": [[{"temp_c": 40}, {"temp_c": 41}], [{"power_mw": 1}]],
                           "unsupported": [[1, "temp_c"]]})
    assert rb.read(0) == {"temp_c": 40.0}
    assert rb.read(1) == {"power_mw": 1.0}
    assert rb.read(0) == {"temp_c": 41.0}
    with pytest.raises(EndOfRecording):
        rb.read(1)
    assert rb.unsupported == frozenset({("1", "temp_c")})


def test_record_round_trips_through_json(tmp_path: Path) -> None:
    nv = FakeNvml()
    nv.fail[(0, "nvmlDeviceGetTemperature")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    with PynvmlSampler(nv) as gpus:
        doc = ReplayGpuBackend.record(gpus, 2)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(doc))
    rb = ReplayGpuBackend.from_file(path)
    assert rb.device_count() == 2 and rb.remaining(0) == 2
    assert rb.unsupported == frozenset({("0", "temp_c")})
    assert rb.read(0) == doc["devices"][0][0] and "temp_c" not in doc["devices"][0][0]
    assert ReplayGpuBackend.record(ReplayGpuBackend(doc), 2) == doc


@pytest.mark.parametrize(("doc", "msg"), [
    ([], "expected a JSON object"),
    ({"devices": {}}, "'devices' must be a list"),
    ({"devices": [[{"temp_c": "hot"}]]}, r"devices\[0\]\[0\].temp_c must be a finite number"),
    ({"devices": [[7]]}, "must be an object or null"),
    ({"format": "x", "devices": []}, "format is 'x'"),
    ({"version": 2, "devices": []}, "version 2"),
    ({"devices": [[]], "unsupported": [[3, "temp_c"]]}, r"unsupported\[0\]"),
])
def test_replay_rejects_malformed_documents(doc: Any, msg: str) -> None:
    with pytest.raises(InputError, match=msg):
        ReplayGpuBackend(doc)


def test_replay_from_bad_json_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not JSON"):
        ReplayGpuBackend.from_json("{")
    with pytest.raises(InputError, match="cannot read GPU counter recording"):
        ReplayGpuBackend.from_file(tmp_path / "nope.json")
