"""Every parser on genuine output of the real tools, captured on real machines and published.

The files in ``tests/fixtures/collectors/real/`` are byte-exact excerpts of public captures (the
sources, GPUs, drivers and what was trimmed are in ``tests/fixtures/collectors/README.md``,
"Real captures"). Each test reads a few values off its file by hand, in the comment next to the
expected number, and checks the canonical metric, unit conversion, device id and time axis.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from interplace.collectors import FORMATS, detect_format, ingest
from interplace.errors import InputError

REAL = Path(__file__).parent.parent / "fixtures" / "collectors" / "real"
MIB = 1048576.0

# file -> the format ingest must detect (None: header-less, never auto-detected by design)
CAPTURES: dict[str, str | None] = {
    "nvsmi_query_h100_nvidia-gpu-exporter.csv": "nvsmi-query",
    "nvsmi_query_rtx2080super_nvidia-gpu-exporter.csv": "nvsmi-query",
    "nvsmi_query_noheader_a100_omniopt.csv": None,
    "nvsmi_query_lms_a10_xuesongtap.csv": "nvsmi-query",
    "dmon_h100_nvidia-gpu-exporter.txt": "dmon",
    "dmon_rtx2080super_nvidia-gpu-exporter.txt": "dmon",
    "dmon_a10_xuesongtap.txt": "dmon",
    "perf_stat_per_cpu_160cpu_hperf.csv": "perf-stat",
    "perf_stat_interval_summary_lkml.csv": "perf-stat",
    "prometheus_dcgm_t4_datadog.txt": "prometheus",
    "prometheus_dcgm_a100_mig_nvidia-docs.txt": "prometheus",
}
# the field list of the header-less OmniOpt capture, as OmniOpt's folder_structure.md gives it
OMNIOPT_FIELDS = [
    "timestamp", "name", "pci.bus_id", "driver_version", "pstate", "pcie.link.gen.max",
    "pcie.link.gen.current", "temperature.gpu", "utilization.gpu", "utilization.memory",
    "memory.total", "memory.free", "memory.used",
]  # fmt: skip


def series(df: pd.DataFrame, device: str, metric: str) -> list[tuple[float, float]]:
    sel = df[(df["device"] == device) & (df["metric"] == metric)]
    return list(zip(sel["t_s"].tolist(), sel["value"].tolist(), strict=True))


def values(df: pd.DataFrame, device: str, metric: str) -> list[float]:
    return [v for _, v in series(df, device, metric)]


def only(df: pd.DataFrame, device: str, metric: str) -> float:
    """The single value of (device, metric); fails if there is not exactly one."""
    (v,) = values(df, device, metric)
    return v


def test_every_real_capture_has_a_test() -> None:
    assert {p.name for p in REAL.iterdir()} == set(CAPTURES)


@pytest.mark.parametrize(
    ("name", "fmt"), sorted((n, f) for n, f in CAPTURES.items() if f is not None)
)
def test_real_capture_is_detected_as_its_format(name: str, fmt: str) -> None:
    raw = (REAL / name).read_bytes().decode()
    assert detect_format(raw) == fmt
    assert [n for n, f in FORMATS.items() if f.sniff(raw)] == [fmt]  # no other sniffer claims it


# ------------------------------------------------------------- nvidia-smi --query-gpu --format=csv


def test_nvsmi_h100_full_field_list() -> None:
    # 212 fields, one sample under load; camelCase field names (pci.baseClass,
    # encoder.stats.sessionCount) used to make the header unrecognisable
    df = ingest(REAL / "nvsmi_query_h100_nvidia-gpu-exporter.csv", host="h100")
    assert df.attrs["format"] == "nvsmi-query"
    assert set(df["device"]) == {"0"}  # index "0"
    assert set(df["t_s"]) == {0.0}  # one timestamp, 2026/07/14 08:12:53.353
    assert set(df["host"]) == {"h100"}
    assert only(df, "0", "power_mw") == pytest.approx(631950.0)  # power.draw "631.95 W"
    assert only(df, "0", "fb_used_bytes") == 19818 * MIB  # memory.used "19818 MiB"
    assert only(df, "0", "gpu_util_pct") == 100.0  # utilization.gpu "100 %"
    assert only(df, "0", "mem_util_pct") == 11.0  # utilization.memory "11 %"
    assert only(df, "0", "sm_clock_mhz") == 1980.0  # clocks.current.sm "1980 MHz"
    assert only(df, "0", "mem_clock_mhz") == 2619.0  # clocks.current.memory "2619 MHz"
    assert only(df, "0", "temp_c") == 59.0  # temperature.gpu "59" (no unit in the header)
    # non-canonical numeric fields pass through in nvidia-smi's unit
    assert only(df, "0", "power.draw.instant") == pytest.approx(625.68)  # "625.68 W"
    assert only(df, "0", "pcie.link.gen.current") == 5.0
    assert only(df, "0", "encoder.stats.sessionCount") == 0.0
    # identity fields never become metrics; text and hex fields are listed, not parsed
    identity = {"index", "uuid", "name", "serial", "pci.bus_id", "driver_version", "count"}
    assert not identity & set(df["metric"])
    assert {"pstate", "pci.baseClass", "clocks_event_reasons.active"} <= set(
        df.attrs["non_numeric"]
    )
    # "[N/A]", "N/A", "[Requested functionality has been deprecated]" and an empty cell
    assert {"fan.speed", "hostname", "fabric.health.summary", "display_mode"} <= set(
        df.attrs["unsupported"]
    )
    assert "platform.chassis_serial_number" in df.attrs["unsupported"]  # ", ," empty cell


def test_nvsmi_rtx2080super_consumer_gpu() -> None:
    df = ingest(REAL / "nvsmi_query_rtx2080super_nvidia-gpu-exporter.csv")
    assert set(df["device"]) == {"0"} and set(df["t_s"]) == {0.0}
    assert set(df["host"]) == {"localhost"}
    assert only(df, "0", "power_mw") == pytest.approx(111500.0)  # power.draw "111.50 W"
    assert only(df, "0", "fb_used_bytes") == 819 * MIB  # memory.used "819 MiB"
    assert only(df, "0", "gpu_util_pct") == 8.0  # utilization.gpu "8 %"
    assert only(df, "0", "mem_util_pct") == 3.0  # utilization.memory "3 %"
    assert only(df, "0", "sm_clock_mhz") == 2055.0  # clocks.current.sm "2055 MHz"
    assert only(df, "0", "mem_clock_mhz") == 7500.0  # clocks.current.memory "7500 MHz"
    assert only(df, "0", "temp_c") == 45.0  # temperature.gpu "45"
    assert only(df, "0", "utilization.encoder") == 100.0  # "100 %", the NVENC load
    assert only(df, "0", "fan.speed") == 38.0  # "38 %"
    # a GeForce has no ECC, no memory temperature, no average power
    assert {"temperature.memory", "power.draw.average", "ecc.mode.current"} <= set(
        df.attrs["unsupported"]
    )
    assert "kmd_version" in df.attrs["non_numeric"]  # "595.71.05" is not a number


def test_nvsmi_noheader_a100_needs_fields_and_keys_gpus_by_bus_id() -> None:
    path = REAL / "nvsmi_query_noheader_a100_omniopt.csv"
    with pytest.raises(InputError, match="give --format nvsmi-query --fields"):
        ingest(path)  # header-less: never auto-detected, the error says what to do
    df = ingest(path, "nvsmi-query", "i8013", fields=OMNIOPT_FIELDS)
    gpus = {"00000000:0B:00.0", "00000000:11:00.0", "00000000:3B:00.0"}
    assert set(df["device"]) == gpus  # no index field: pci.bus_id names the GPU
    for gpu in gpus:  # 30 lines = 10 rounds of 3 GPUs
        assert len(series(df, gpu, "temp_c")) == 10
    # t_s from the earliest timestamp, 19:42:10.737; units inline despite noheader
    fb = series(df, "00000000:0B:00.0", "fb_used_bytes")
    assert fb[0] == (0.0, 1 * MIB)  # line 1: "1 MiB"
    assert fb[1] == pytest.approx((10.088, 4 * MIB))  # line 4, 19:42:20.825: "4 MiB"
    assert series(df, "00000000:3B:00.0", "temp_c")[0] == pytest.approx((0.748, 45.0))  # line 3
    assert series(df, "00000000:11:00.0", "temp_c")[5] == pytest.approx((50.529, 52.0))  # line 17
    assert values(df, "00000000:11:00.0", "gpu_util_pct") == [0.0] * 10
    assert set(df.loc[df["metric"] == "memory.total", "value"]) == {40960.0}  # MiB, as printed
    assert df.attrs["non_numeric"] == ["pstate"]
    assert df.attrs["unsupported"] == []


def test_nvsmi_query_without_a_device_field_is_refused_not_guessed() -> None:
    # `-lms` without index/pci.bus_id/uuid: the rows apparently cycle through 4 GPUs (memory.used
    # 21, 7, 7, 7, then 21 MiB again) and nothing in the file says which row is which GPU
    path = REAL / "nvsmi_query_lms_a10_xuesongtap.csv"
    with pytest.raises(InputError, match=r"no index, pci\.bus_id or uuid field") as err:
        ingest(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------ nvidia-smi dmon


def test_dmon_h100_default_columns() -> None:
    df = ingest(REAL / "dmon_h100_nvidia-gpu-exporter.txt")
    assert df.attrs["format"] == "dmon"
    assert set(df["device"]) == {"0"}
    # no time columns: one round per line (GPU 0 repeats), t_s = round x 1 s
    assert series(df, "0", "power_mw") == [
        (0.0, 631000.0), (1.0, 634000.0), (2.0, 633000.0), (3.0, 634000.0), (4.0, 636000.0),
    ]  # fmt: skip  # pwr 631 634 633 634 636 W
    assert values(df, "0", "temp_c") == [63.0, 63.0, 64.0, 64.0, 65.0]  # gtemp
    assert values(df, "0", "mtemp") == [57.0, 58.0, 58.0, 59.0, 59.0]  # HBM3 reports it
    assert values(df, "0", "gpu_util_pct") == [100.0] * 5  # sm
    assert values(df, "0", "mem_util_pct") == [10.0, 10.0, 9.0, 9.0, 9.0]  # mem
    assert set(values(df, "0", "mem_clock_mhz")) == {2619.0}  # mclk
    assert set(values(df, "0", "sm_clock_mhz")) == {1980.0}  # pclk
    assert {"jpg", "ofa"} <= set(df["metric"])  # the columns recent drivers add
    assert df.attrs["unsupported"] == []


def test_dmon_rtx2080super_unsupported_memory_temperature() -> None:
    df = ingest(REAL / "dmon_rtx2080super_nvidia-gpu-exporter.txt", interval_s=2.0)
    assert sorted(set(df["t_s"])) == [0.0, 2.0, 4.0, 6.0, 8.0]  # -c 5, interval given
    assert values(df, "0", "power_mw") == [98000.0] * 5  # pwr 98 W
    assert values(df, "0", "enc") == [100.0] * 5  # NVENC busy
    assert values(df, "0", "mtemp") == []  # "-" on every line ...
    assert df.attrs["unsupported"] == ["mtemp"]  # ... and reported


def test_dmon_a10_dated_pcie_and_framebuffer_columns() -> None:
    df = ingest(REAL / "dmon_a10_xuesongtap.txt", host="a10")
    assert set(df["device"]) == {"0"} and set(df["host"]) == {"a10"}
    # -o TD: Date and Time columns, 13:54:35 ... 13:54:40; the blank line is skipped
    fb = series(df, "0", "fb_used_bytes")
    assert [t for t, _ in fb] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert fb[0][1] == 239 * MIB  # fb "239" MB, which dmon means as MiB
    assert fb[3][1] == 478 * MIB  # 13:54:38
    assert series(df, "0", "pcie_rx_kbps")[1] == (1.0, 217000.0)  # rxpci 217 MB/s, 13:54:36
    assert series(df, "0", "pcie_tx_kbps")[1] == (1.0, 677000.0)  # txpci 677 MB/s
    assert series(df, "0", "gpu_util_pct")[3] == (3.0, 13.0)  # sm 13 %, 13:54:38
    assert set(values(df, "0", "mem_clock_mhz")) == {6250.0}  # mclk
    assert set(values(df, "0", "sm_clock_mhz")) == {1695.0}  # pclk
    assert values(df, "0", "bar1") == [3.0, 10.0, 2.0, 6.0, 10.0, 2.0]  # passes through, MB
    assert "power_mw" not in set(df["metric"])  # -s mutc has no power group


# --------------------------------------------------------------------- perf stat -x, -I <ms>


def test_perf_per_cpu_multiplexed_groups() -> None:
    df = ingest(REAL / "perf_stat_per_cpu_160cpu_hperf.csv")
    assert df.attrs["format"] == "perf-stat"
    assert len(df) == 33 and df.attrs["unsupported"] == []
    assert set(df["device"]) == {"cpu0", "cpu1", "cpu2", "cpu3"}  # -A: CPU<n>
    assert sorted(set(df["t_s"])) == [1.001034901, 2.014400134]  # perf's own time stamps

    def row(device: str, metric: str, t: float) -> tuple[float, float]:
        sel = df[(df["device"] == device) & (df["metric"] == metric) & (df["t_s"] == t)]
        assert len(sel) == 1
        return float(sel["value"].iloc[0]), float(sel["scale"].iloc[0])

    # "CPU0,9895838,,instructions,506798280,50.15,...": multiplexed, ran 50.15 % of the time
    assert row("cpu0", "instructions", 1.001034901) == pytest.approx((9895838.0, 0.5015))
    assert row("cpu3", "r22", 1.001034901) == pytest.approx((1606.0, 0.4992))
    assert row("cpu1", "cycles:D", 1.001034901) == pytest.approx((53475440.0, 1.0))
    assert row("cpu2", "cpu-clock", 2.014400134) == pytest.approx((1013.30, 1.0))  # msec
    # duration_time is printed once, on CPU0
    assert series(df, "cpu0", "duration_time") == [(1.001034901, 1001034901.0)]
    assert series(df, "cpu1", "duration_time") == []


def test_perf_summary_lines_are_skipped() -> None:
    # `--summary` appends whole-run totals with "summary" in the time field; they used to make
    # the parser refuse the whole file
    df = ingest(REAL / "perf_stat_interval_summary_lkml.csv")
    assert df.attrs["format"] == "perf-stat"
    assert set(df["device"]) == {"host"} and set(df["t_s"]) == {1.001196053}
    assert len(df) == 8  # 8 interval lines; the 8 summary lines are not samples
    assert series(df, "host", "cycles") == [(1.001196053, 15004518.0)]
    assert series(df, "host", "cpu-clock") == [(1.001196053, 8012.72)]
    assert series(df, "host", "context-switches") == [(1.001196053, 218.0)]
    assert set(df["scale"]) == {1.0}  # 100.00 % running


# ------------------------------------------------------------ dcgm-exporter Prometheus text


def test_prometheus_t4_scrape() -> None:
    df = ingest(REAL / "prometheus_dcgm_t4_datadog.txt", host="ignored")
    assert df.attrs["format"] == "prometheus"
    assert set(df["host"]) == {"424773df46e0"}  # the Hostname label wins over host=
    assert set(df["device"]) == {"0"} and set(df["t_s"]) == {0.0}  # one scrape
    assert len(df) == 16  # 16 HELP/TYPE/sample triples
    assert only(df, "0", "power_mw") == pytest.approx(8969.0)  # 8.969000 W
    assert only(df, "0", "sm_clock_mhz") == 300.0
    assert only(df, "0", "mem_clock_mhz") == 405.0
    assert only(df, "0", "temp_c") == 25.0
    assert only(df, "0", "fb_used_bytes") == 0.0
    assert only(df, "0", "gpu_util_pct") == 0.0
    assert only(df, "0", "DCGM_FI_DEV_FB_FREE") == 15109.0  # passes through, MiB
    assert only(df, "0", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == 128996013.0  # mJ
    assert df.attrs["unsupported"] == []


def test_prometheus_a100_with_a_mig_instance() -> None:
    df = ingest(REAL / "prometheus_dcgm_a100_mig_nvidia-docs.txt")
    assert set(df["host"]) == {"ub20-a100-k8s"}
    assert set(df["device"]) == {"0", "0/mig13"}  # GPU_I_ID="13"
    assert set(df["t_s"]) == {0.0} and len(df) == 21
    assert only(df, "0", "power_mw") == pytest.approx(409692.0)  # 409.692000 W
    assert only(df, "0", "fb_used_bytes") == 4845 * MIB  # 4845 MiB
    assert only(df, "0", "pcie_tx_kbps") == pytest.approx(33011.804)  # 33011804 B/s
    assert only(df, "0", "pcie_rx_kbps") == pytest.approx(97863.601)  # 97863601 B/s
    assert only(df, "0", "sm_clock_mhz") == 1215.0
    assert only(df, "0", "temp_c") == 61.0
    assert only(df, "0", "DCGM_FI_DEV_MEMORY_TEMP") == 69.0
    assert only(df, "0", "DCGM_FI_PROF_GR_ENGINE_ACTIVE") == pytest.approx(0.995630)
    assert only(df, "0/mig13", "DCGM_FI_PROF_GR_ENGINE_ACTIVE") == pytest.approx(0.995687)
    assert only(df, "0/mig13", "DCGM_FI_PROF_DRAM_ACTIVE") == pytest.approx(0.800339)
    assert values(df, "0/mig13", "power_mw") == []  # MIG instances have no power sample
