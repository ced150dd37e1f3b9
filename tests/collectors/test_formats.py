"""Each parser: canonical names and units, unavailable values, time axis, and refusals.

The fixtures were written from the tools' documentation (see tests/fixtures/collectors/README.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplace.collectors.formats import dmon, nvsmi_query, perf_stat, prometheus
from interplace.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "collectors"
MIB = 1048576.0


def text(name: str) -> str:
    # read_bytes keeps CRLF line ends: the parsers must cope with them themselves
    return (FIXTURES / name).read_bytes().decode()


def series(df: pd.DataFrame, device: str, metric: str) -> list[tuple[float, float]]:
    sel = df[(df["device"] == device) & (df["metric"] == metric)]
    return list(zip(sel["t_s"].tolist(), sel["value"].tolist(), strict=True))


def close(actual: list[tuple[float, float]], expected: list[tuple[float, float]]) -> bool:
    return len(actual) == len(expected) and bool(np.allclose(actual, expected, rtol=1e-12))


def assert_time_axis(df: pd.DataFrame, *, starts_at_zero: bool = True) -> None:
    """t_s is non-decreasing within every (device, metric) series, and starts at 0."""
    for _, g in df.groupby(["device", "metric"]):
        assert np.all(np.diff(g["t_s"].to_numpy()) >= 0)
    if starts_at_zero:
        assert df["t_s"].min() == 0.0


# ---------------------------------------------------------------- nvidia-smi --query-gpu


def test_nvsmi_units_inline_are_converted() -> None:
    raw = text("nvsmi_query_units.csv")
    assert "\r\n" in raw
    df = nvsmi_query.parse(raw, host="n1")
    assert set(df["host"]) == {"n1"}
    assert set(df["device"]) == {"0", "1"}
    first = {m: v for t, m, v in zip(df.t_s, df.metric, df.value, strict=True) if t == 0.0}
    assert first == {
        "gpu_util_pct": 45.0,
        "mem_util_pct": 12.0,
        "fb_used_bytes": 1293942784.0,  # 1234 MiB
        "sm_clock_mhz": 1410.0,
        "mem_clock_mhz": 1215.0,
        "power_mw": 250000.0,  # 250.00 W
        "temp_c": 61.0,
        "pcie.link.gen.current": 4.0,  # not canonical: passes through under its own name
    }
    assert close(series(df, "0", "power_mw"), [(0.0, 250000.0), (0.5, 255500.0), (1.001, 251250.0)])
    assert series(df, "1", "power_mw") == []  # [N/A] and [Not Supported] are skipped ...
    assert df.attrs["unsupported"] == ["power_mw"]  # ... and reported
    assert df.attrs["non_numeric"] == ["pstate"]
    assert series(df, "1", "fb_used_bytes")[0] == pytest.approx((0.002, 3 * MIB))
    assert_time_axis(df)


def test_nvsmi_nounits_uses_header_units_and_crosses_midnight() -> None:
    df = nvsmi_query.parse(text("nvsmi_query_nounits.csv"))
    assert series(df, "0", "fb_used_bytes") == [
        (0.0, 40536 * MIB),
        (1.0, 40536 * MIB),
        (2.0, 40540 * MIB),
    ]
    assert close(series(df, "0", "power_mw"), [(0.0, 698120.0), (1.0, 701400.0)])
    assert set(df["host"]) == {"localhost"}
    assert_time_axis(df)


def test_nvsmi_noheader_needs_fields_and_is_not_sniffed() -> None:
    raw = text("nvsmi_query_noheader.csv")
    assert not nvsmi_query.sniff(raw)
    with pytest.raises(InputError, match=r"no header line: .* pass fields"):
        nvsmi_query.parse(raw)
    fields = ["timestamp", "index", "utilization.gpu", "memory.used", "power.draw"]
    df = nvsmi_query.parse(raw, fields=fields)
    # without units anywhere, nvidia-smi's documented units apply (MiB, W)
    assert series(df, "1", "fb_used_bytes") == [(0.0, 800 * MIB), (0.1, 800 * MIB)]
    assert close(series(df, "1", "power_mw"), [(0.0, 90100.0), (0.1, 91300.0)])
    assert_time_axis(df)


def test_nvsmi_fields_must_match_a_header() -> None:
    with pytest.raises(InputError, match="do not match the header"):
        nvsmi_query.parse(text("nvsmi_query_nounits.csv"), fields=["timestamp", "index"])


def test_nvsmi_device_falls_back_to_the_bus_id_and_header_repeats_are_skipped() -> None:
    raw = (
        "timestamp, pci.bus_id, temperature.gpu\n"
        "2024/05/01 12:00:00.000, 00000000:07:00.0, 40\n"
        "timestamp, pci.bus_id, temperature.gpu\n"
        "2024/05/01 12:00:01, 00000000:07:00.0, 41\n"  # a stamp without milliseconds
    )
    df = nvsmi_query.parse(raw)
    assert series(df, "00000000:07:00.0", "temp_c") == [(0.0, 40.0), (1.0, 41.0)]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "empty"),
        ("index, memory.used [MiB]\n0, 12 MiB\n", "no timestamp field"),
        ("timestamp, memory.used [MiB]\n2024/05/01 12:00:00.000, 1 MiB\n", "no index"),
        ("timestamp, index, memory.used [MiB]\n2024/05/01 12:00:00.000, 0\n", "line 2: expected 3"),
        ("timestamp, index\n01/05/2024 12:00, 0\n", "line 2: bad timestamp '01/05/2024 12:00'"),
        ("timestamp, index, power.draw [W]\n2024/05/01 12:00:00.0, 0, 3 MiB\n", "unit 'MiB'"),
        ("timestamp, index, utilization.memory [%]\n2024/05/01 12:00:00.0, 0, -12 %\n",
         "mem_util_pct is -12, below 0"),
        ("timestamp, index, utilization.gpu [%]\n2024/05/01 12:00:00.0, 0, 140 %\n",
         "gpu_util_pct is 140, above 100"),
        # A reading that is text was dropped with exit 0 (dmon and prometheus refuse it); a
        # field named twice gave two readings of it at one time.
        ("timestamp, index, utilization.gpu [%]\n2024/05/01 12:00:00.0, 0, abc %\n",
         "line 2: utilization.gpu 'abc %' is not a number"),
        ("timestamp, index, utilization.gpu [%]\n2024/05/01 12:00:00.0, 0, nan %\n",
         "utilization.gpu 'nan %' is not a number"),
        ("timestamp, index, utilization.gpu [%], utilization.gpu [%]\n"
         "2024/05/01 12:00:00.0, 0, 5 %, 9 %\n", "names utilization.gpu twice"),
    ],
)
def test_nvsmi_refuses_bad_input(raw: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        nvsmi_query.parse(raw)


# ---------------------------------------------------------------- nvidia-smi dmon


def test_dmon_default_rounds_and_repeated_header() -> None:
    df = dmon.parse(text("dmon_default.txt"), host="n2")
    assert set(df["host"]) == {"n2"} and set(df["device"]) == {"0", "1"}
    assert series(df, "0", "power_mw") == [(0.0, 43000.0), (1.0, 212000.0), (2.0, 230000.0)]
    assert series(df, "0", "gpu_util_pct") == [(0.0, 0.0), (1.0, 87.0), (2.0, 93.0)]
    assert series(df, "0", "sm_clock_mhz") == [(0.0, 210.0), (1.0, 1410.0), (2.0, 1410.0)]
    assert series(df, "0", "mem_clock_mhz")[2] == (2.0, 1215.0)
    assert series(df, "1", "gpu_util_pct") == [(0.0, 0.0), (1.0, 0.0)]  # "-" in round 2
    assert series(df, "1", "enc") == [(0.0, 0.0), (1.0, 0.0), (2.0, 0.0)]  # passes through
    assert "mtemp" not in set(df["metric"])
    assert df.attrs["unsupported"] == ["gpu_util_pct", "mem_util_pct", "mtemp"]
    assert_time_axis(df)


def test_dmon_interval_scales_the_round_index() -> None:
    df = dmon.parse(text("dmon_default.txt"), interval_s=0.5)
    assert [t for t, _ in series(df, "1", "temp_c")] == [0.0, 0.5, 1.0]


def test_dmon_date_time_columns_and_pucvmet_units() -> None:
    df = dmon.parse(text("dmon_dt_pucvmet.txt"))
    assert series(df, "0", "pcie_rx_kbps") == [(0.0, 120000.0), (1.0, 130000.0), (2.0, 3500000.0)]
    assert series(df, "0", "pcie_tx_kbps") == [(0.0, 8000.0), (1.0, 9000.0), (2.0, 40000.0)]
    assert series(df, "0", "fb_used_bytes")[0] == (0.0, 1234 * MIB)
    assert series(df, "0", "temp_c")[2] == (2.0, 45.0)
    assert series(df, "0", "bar1")[0] == (0.0, 4.0)
    assert df.attrs["unsupported"] == ["dbecc", "mtemp", "sbecc"]
    assert_time_axis(df)


def test_dmon_time_only_crosses_midnight() -> None:
    raw = (
        "#Time        gpu   pwr\n"
        "#HH:MM:SS    Idx     W\n"
        " 23:59:59      0    70\n"
        " 00:00:01      0    71\n"
    )
    assert series(dmon.parse(raw), "0", "power_mw") == [(0.0, 70000.0), (2.0, 71000.0)]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("    0    43\n", "line 1: data before the dmon header"),
        ("# gpu   pwr\n# Idx     W\n    0    43   12\n", "line 3: expected 2 columns, got 3"),
        ("# gpu   pwr\n# Idx     W\n    0    hot\n", "line 3: pwr value 'hot' is not a number"),
        # A literal nan or inf was dropped as a gap (dmon writes '-' for one).
        ("# gpu   pwr\n# Idx     W\n    0    nan\n", "line 3: pwr value 'nan' is not a number"),
        ("# gpu   pwr\n# Idx     W\n    0    inf\n", "line 3: pwr value 'inf' is not a number"),
        ("# gpu    fb\n# Idx    GB\n    0     1\n", "line 2: dmon column 'fb' has unit 'GB'"),
        ("# Idx     W\n", "no dmon header line"),
    ],
)
def test_dmon_refuses_bad_input(raw: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        dmon.parse(raw)


def test_dmon_header_without_data_is_an_empty_table() -> None:
    assert dmon.parse("# gpu   pwr\n# Idx     W\n").empty


def test_dmon_refuses_a_bad_interval() -> None:
    with pytest.raises(InputError, match="interval_s must be a positive"):
        dmon.parse(text("dmon_default.txt"), interval_s=0.0)


# ---------------------------------------------------------------- perf stat -x, -I


def test_perf_interval_counts_multiplexing_and_not_counted() -> None:
    df = perf_stat.parse(text("perf_stat_interval.csv"), host="n3")
    assert list(df.columns) == ["t_s", "host", "device", "metric", "value", "scale"]
    assert set(df["device"]) == {"host"} and set(df["host"]) == {"n3"}
    assert series(df, "host", "instructions") == [
        (1.001234567, 12345678.0),
        (2.002468024, 12445678.0),
    ]
    llc = df[df["metric"] == "LLC-load-misses"]
    assert llc["value"].tolist() == [8765.0, 9001.0]
    assert llc["scale"].tolist() == pytest.approx([0.4994, 0.4996])  # multiplexed, visible
    assert set(df.loc[df["metric"] == "cycles", "scale"]) == {1.0}
    # <not counted> in the first interval, counted in the second
    assert series(df, "host", "cache-misses") == [(2.002468024, 4321.0)]
    assert "dTLB-load-misses" not in set(df["metric"])
    assert df.attrs["unsupported"] == ["cache-misses", "dTLB-load-misses"]
    assert_time_axis(df, starts_at_zero=False)  # perf's own interval-end stamps


def test_perf_per_cpu_keeps_event_modifiers() -> None:
    df = perf_stat.parse(text("perf_stat_per_cpu.csv"))
    assert set(df["device"]) == {"cpu0", "cpu1"}
    assert set(df["metric"]) == {"cycles:u", "instructions:u"}
    assert series(df, "cpu1", "instructions:u") == [(1.000234567, 1100000.0)]
    assert series(df, "cpu0", "cycles:u") == [(0.500123456, 1200345.0), (1.000234567, 1250345.0)]


def test_perf_per_core_aggregation_ids() -> None:
    raw = (
        "1.000,S0-D0-C0,2,1000,,cycles,1000000,100.00,,\n"
        "1.000,S0-D0-C1,2,2000,,cycles,1000000,75.00,,\n"
        "1.000,,,,,,0.50,insn per cycle\n"  # a derived-metric-only line
        "1.000,S1,8,3000,,cycles,1000000,100.00,,\n"  # --per-socket
        "1.000,N0,16,4000,,cycles,1000000,,,\n"  # --per-node, no running percentage
    )
    df = perf_stat.parse(raw)
    assert df["device"].tolist() == ["s0-d0-c0", "s0-d0-c1", "s1", "n0"]
    assert df["value"].tolist() == [1000.0, 2000.0, 3000.0, 4000.0]
    assert df["scale"].tolist()[:3] == [1.0, 0.75, 1.0]
    assert np.isnan(df["scale"].iloc[3])


def test_perf_raw_pmu_events_and_counters_multiplexed_out() -> None:
    # perf does not quote a raw event's comma-separated terms; a counter that ran under
    # 0.005% of the interval prints a running percentage of 0.00 (no reading).
    raw = (
        "     1.001,123456,,cpu/event=0x3c,umask=0x00/,1001234567,100.00,,\n"
        "     1.001,654321,,cpu/event=0xc0,umask=0x00/u,1001234567,50.00,,\n"
        "     1.001,0,,cycles,0,0.00,,\n"
    )
    df = perf_stat.parse(raw)
    assert df["metric"].tolist() == ["cpu/event=0x3c,umask=0x00/", "cpu/event=0xc0,umask=0x00/u"]
    assert df["value"].tolist() == [123456.0, 654321.0]
    assert df["scale"].tolist() == [1.0, 0.5]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("# only a comment\n", "no counter lines"),
        ("12345678,,instructions,1000890123,100.00,,\n", "line 1: not a perf stat -x, -I counter"),
        ("1.0,12,,cycles,100,150.00,,\n", "line 1: running percentage '150.00'"),
        ("1.0,12,,42,100,100.00,,\n", "line 1: not a perf stat -x, -I counter line"),
        ("1.0,-123,,instructions,100,100.00,,\n",  # was written as it was
         "line 1: instructions count '-123' is not a number >= 0"),
    ],
)
def test_perf_refuses_bad_input(raw: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        perf_stat.parse(raw)


# ---------------------------------------------------------------- dcgm-exporter / Prometheus


def test_prometheus_scrapes_without_timestamps() -> None:
    df = prometheus.parse(text("prometheus_dcgm.txt"), host="ignored")
    assert set(df["host"]) == {"node1"}  # the Hostname label wins
    assert set(df["t_s"]) == {0.0, 1.0}  # scrape index x interval
    assert series(df, "0", "fb_used_bytes") == [(0.0, 1234 * MIB), (1.0, 1235 * MIB)]
    assert close(series(df, "0", "power_mw"), [(0.0, 250123.0), (1.0, 250123.0)])
    assert series(df, "0", "pcie_tx_kbps")[0] == (0.0, 120000.0)  # bytes/s / 1000
    assert series(df, "0", "pcie_rx_kbps")[0] == (0.0, 3500000.0)
    assert series(df, "0", "nvlink_tx_kbps")[0] == (0.0, 25000000.0)
    assert series(df, "1", "sm_clock_mhz") == [(0.0, 210.0), (1.0, 210.0)]
    # unknown DCGM fields keep their exact name; DCGM's blank sentinel is "unsupported"
    assert series(df, "0", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[0] == (0.0, 0.8731)
    assert df.attrs["unsupported"] == ["DCGM_FI_DEV_MEMORY_TEMP"]
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in set(df["metric"])
    assert_time_axis(df)
    df2 = prometheus.parse(text("prometheus_dcgm.txt"), interval_s=15.0)
    assert set(df2["t_s"]) == {0.0, 15.0}


def test_prometheus_timestamps_mig_and_nan() -> None:
    raw = text("prometheus_dcgm_timestamps.txt")
    assert "\r\n" in raw
    df = prometheus.parse(raw, host="n9")
    assert set(df["host"]) == {"n9"}  # no Hostname label
    assert series(df, "0", "gpu_util_pct") == [(0.0, 45.0), (2.5, 50.0)]
    assert series(df, "0", "pcie_tx_kbps") == [(0.0, 2048.0), (2.5, 4096.0)]  # KB/s as is
    assert series(df, "1/mig2", "gpu_util_pct") == [(0.0, 7.0)]  # NaN = missing sample
    assert_time_axis(df)


def test_prometheus_prefers_the_profiling_pcie_field() -> None:
    raw = (
        'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0"} 2000000\n'
        'DCGM_FI_DEV_PCIE_TX_THROUGHPUT{gpu="0"} 1999\n'
        "process_open_fds 12\n"
    )
    df = prometheus.parse(raw)
    assert series(df, "0", "pcie_tx_kbps") == [(0.0, 2000.0)]
    assert series(df, "0", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT") == [(0.0, 1999.0)]
    assert series(df, "host", "process_open_fds") == [(0.0, 12.0)]
    # A blank DEV field beside a PROF one is listed by its own name: pcie_tx_kbps has readings
    # (it was listed as unavailable, and the CLI said so).
    blank = 'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0"} 2000000\n'
    blank += 'DCGM_FI_DEV_PCIE_TX_THROUGHPUT{gpu="0"} 9223372036854775794\n'
    df = prometheus.parse(blank)
    assert series(df, "0", "pcie_tx_kbps") == [(0.0, 2000.0)]
    assert df.attrs["unsupported"] == ["DCGM_FI_DEV_PCIE_TX_THROUGHPUT"]
    alone = prometheus.parse(blank.split("\n")[1])  # no reading of pcie_tx_kbps at all
    assert alone.attrs["unsupported"] == ["pcie_tx_kbps"]


def test_prometheus_series_of_switches_cpus_and_links_keep_their_devices() -> None:
    # Without a gpu label every series landed on device "host": two switches' readings at one
    # time under one key. A space before the labels is allowed, as Prometheus allows it.
    raw = (
        'DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT{nvswitch="0",Hostname="n1"} 40\n'
        'DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT{nvswitch="1",Hostname="n1"} 41\n'
        'DCGM_FI_DEV_CPU_UTIL_TOTAL {cpu="0",Hostname="n1"} 12\n'
        'DCGM_FI_DEV_NVLINK_BANDWIDTH_L0{gpu="1",nvlink="3",Hostname="n1"} 7\n'
        'DCGM_FI_DEV_GPU_TEMP {gpu="1",Hostname="n1"} 55\n'
    )
    df = prometheus.parse(raw)
    assert df["device"].tolist() == ["nvswitch0", "nvswitch1", "cpu0", "1/nvlink3", "1"]
    assert df["value"].tolist() == [40.0, 41.0, 12.0, 7.0, 55.0]


def test_prometheus_label_escapes_and_repeated_series_start_a_scrape() -> None:
    raw = (
        'm{gpu="0",Hostname="a \\"quoted\\" host",x="back\\\\slash",} 1\n'
        'm{gpu="0",Hostname="a \\"quoted\\" host",x="back\\\\slash",} 2\n'
        'h_bucket{le="0.5"} 3\n'
    )
    df = prometheus.parse(raw)
    assert df["host"].tolist() == ['a "quoted" host'] * 2
    assert df["t_s"].tolist() == [0.0, 1.0]
    assert "h_bucket" not in set(df["metric"])  # histogram series are skipped


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('m{gpu="0"} 1 1000\nm{gpu="0"} 2\n', "line 2: some samples have timestamps"),
        ("m{gpu=0} 1\n", "line 1: malformed labels"),
        ('m{gpu="0"} warm\n', "line 1: sample value 'warm' is not a number"),
        ("# HELP m x\nthis is not a sample\n", "line 2: not a Prometheus sample"),
    ],
)
def test_prometheus_refuses_bad_input(raw: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        prometheus.parse(raw)


def test_parsers_never_warn_and_give_validated_tables() -> None:
    # pytest turns warnings into errors; this also checks the frames are already normalised
    for mod, name in [
        (nvsmi_query, "nvsmi_query_units.csv"),
        (dmon, "dmon_dt_pucvmet.txt"),
        (perf_stat, "perf_stat_interval.csv"),
        (prometheus, "prometheus_dcgm.txt"),
    ]:
        df = mod.parse(text(name))
        assert df["t_s"].dtype == np.float64 and df["value"].dtype == np.float64
        assert df["value"].notna().all() and np.isfinite(df["value"]).all()
        assert df.index.tolist() == list(range(len(df)))
