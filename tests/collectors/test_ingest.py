"""Format detection and ``ingest``: every fixture is recognised, garbage is refused, errors name
the file, and ingested tables survive a CSV / Parquet round trip."""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplace.collectors import FORMATS, detect_format, ingest, read_samples, write_samples
from interplace.collectors.formats import dmon, nvsmi_query, perf_stat, prometheus
from interplace.collectors.ingest import OptionError
from interplace.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "collectors"

DETECTED = {
    "nvsmi_query_units.csv": "nvsmi-query",
    "nvsmi_query_nounits.csv": "nvsmi-query",
    "dmon_default.txt": "dmon",
    "dmon_dt_pucvmet.txt": "dmon",
    "perf_stat_interval.csv": "perf-stat",
    "perf_stat_per_cpu.csv": "perf-stat",
    "prometheus_dcgm.txt": "prometheus",
    "prometheus_dcgm_timestamps.txt": "prometheus",
}


def fixture_files() -> set[str]:
    """Every fixture file, subdirectories included, as a path relative to FIXTURES."""
    return {
        p.relative_to(FIXTURES).as_posix()
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.name != "README.md"
    }


def test_every_fixture_is_covered() -> None:
    # the hand-written fixtures at the top; real captures (real/) in test_real_captures.py
    files = {f for f in fixture_files() if "/" not in f}
    assert files == set(DETECTED) | {"nvsmi_query_noheader.csv"}


def test_every_fixture_is_listed_in_the_readme_with_its_source() -> None:
    readme = (FIXTURES / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    listed = {row.split("`")[1]: row for row in rows}
    assert fixture_files() == set(listed)
    for name, row in listed.items():
        source = row.rsplit("|", 2)[-2]
        assert "https://" in source or "same as `" in source, name
        assert any(c.isdigit() for c in source), f"{name}: no tool version or date"


def test_registry_holds_the_parse_functions() -> None:
    assert list(FORMATS) == ["prometheus", "dmon", "perf-stat", "nvsmi-query"]
    assert FORMATS["nvsmi-query"].parse is nvsmi_query.parse
    assert FORMATS["dmon"].sniff is dmon.sniff
    assert FORMATS["perf-stat"].parse is perf_stat.parse
    assert FORMATS["prometheus"].parse is prometheus.parse


@pytest.mark.parametrize(("name", "fmt"), sorted(DETECTED.items()))
def test_detection_picks_the_right_format(name: str, fmt: str) -> None:
    raw = (FIXTURES / name).read_bytes().decode()
    assert detect_format(raw) == fmt
    # exactly one sniffer claims each fixture, so the registry order is not what decides
    assert [n for n, f in FORMATS.items() if f.sniff(raw)] == [fmt]
    df = ingest(FIXTURES / name)
    assert df.attrs["format"] == fmt and df.attrs["source"] == str(FIXTURES / name)
    assert len(df) > 0


@pytest.mark.parametrize(
    "garbage",
    [
        "hello world\n",
        "a,b,c\n1,2,3\n",
        "<?xml version='1.0'?><topology/>\n",
        "\tGPU0\tGPU1\nGPU0\t X \tNV4\n",
        "2024/05/01 12:00:00.000, 0, 45, 1234, 250.00\n",  # nvidia-smi noheader
        "12345678,,instructions,1000890123,100.00,,\n",  # perf stat without -I
    ],
)
def test_detection_refuses_garbage(garbage: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot recognise the format of the input: expected"):
        detect_format(garbage)
    p = tmp_path / "mystery.txt"
    p.write_text(garbage)
    expected = f"cannot recognise the format of {p}: expected one of"
    with pytest.raises(InputError, match=re.escape(expected)):
        ingest(p)


def test_headerless_query_csv_gets_a_hint() -> None:
    with pytest.raises(InputError) as err:
        ingest(FIXTURES / "nvsmi_query_noheader.csv")
    message = str(err.value)
    assert "\n" not in message
    assert "give --format nvsmi-query --fields <the --query-gpu list>" in message
    # other unrecognised text gets no such hint
    with pytest.raises(InputError) as err:
        detect_format("a,b,c\n1,2,3\n")
    assert "--fields" not in str(err.value)


# nvidia-smi pmon's header (an H100's, as pmon prints it): its sm/mem/enc made it pass for
# dmon, and the parse then failed on "type value 'C' is not a number" or, with every value
# "-", said GPU utilisation was unavailable.
PMON = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %    name \n"
    "    0      11345     C     99     10      -      -      -      -    gpu_burn \n"
)


def test_pmon_output_is_named_not_read_as_dmon() -> None:
    with pytest.raises(InputError) as err:
        detect_format(PMON)
    assert "this is nvidia-smi pmon output (per process), which interplace does not read" in str(
        err.value
    )
    assert not FORMATS["dmon"].sniff(PMON)
    with pytest.raises(InputError, match=r"this is nvidia-smi pmon output .*, not dmon"):
        FORMATS["dmon"].parse(PMON)  # asked for by name: was "data before the dmon header"


def test_ingest_with_an_explicit_format_and_options() -> None:
    fields = ["timestamp", "index", "utilization.gpu", "memory.used", "power.draw"]
    df = ingest(FIXTURES / "nvsmi_query_noheader.csv", "nvsmi-query", "gpu7", fields=fields)
    assert set(df["host"]) == {"gpu7"} and set(df["device"]) == {"0", "1"}
    df = ingest(FIXTURES / "dmon_default.txt", format="dmon", interval_s=2.0)
    assert sorted(set(df["t_s"])) == [0.0, 2.0, 4.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "xml"}, "unknown format 'xml' (expected auto, prometheus, dmon"),
        ({"fields": ["timestamp"]}, "option fields does not apply to the dmon format"),
        ({"host": ""}, "host name is empty"),
    ],
)
def test_ingest_refuses_bad_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        ingest(FIXTURES / "dmon_default.txt", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "kwargs", "problem"),
    [
        ("nvsmi_query_units.csv", {"interval_s": 5.0}, "does not apply to the nvsmi-query format"),
        ("dmon_default.txt", {"fields": ["a", "b"]}, "does not apply to the dmon format"),
        ("perf_stat_interval.csv", {"interval_s": 1.0}, "does not apply to the perf-stat format"),
    ],
)  # fmt: skip
def test_an_option_the_format_does_not_take_is_an_option_error(
    name: str, kwargs: dict[str, object], problem: str
) -> None:
    with pytest.raises(OptionError) as err:
        ingest(FIXTURES / name, **kwargs)  # type: ignore[arg-type]
    (option,) = kwargs
    assert (err.value.option, err.value.problem) == (option, problem)
    assert str(err.value) == f"option {option} {problem}"


@pytest.mark.parametrize(
    ("interval", "shown"),
    [(-1.0, "-1"), (0.0, "0"), (0, "0"), (math.nan, "nan"), (math.inf, "inf"), ("5", "'5'"),
     (True, "True")],
)  # fmt: skip
def test_a_bad_interval_is_refused_before_the_file_is_read(
    tmp_path: Path, interval: object, shown: str
) -> None:
    # The file does not exist: the interval is refused first, as the option's problem (it
    # was "<file>: interval_s must be ...", from the parser, as if the file were at fault).
    with pytest.raises(OptionError) as err:
        ingest(tmp_path / "missing.txt", interval_s=interval)  # type: ignore[arg-type]
    assert (err.value.option, err.value.problem) == (
        "interval_s", f"must be a positive number of seconds, got {shown}")


def test_a_numpy_interval_is_taken() -> None:
    df = ingest(FIXTURES / "dmon_default.txt", interval_s=np.float32(2.0))  # type: ignore[arg-type]
    assert sorted(set(df["t_s"])) == [0.0, 2.0, 4.0]


def test_option_errors_survive_pickling() -> None:
    err = pickle.loads(pickle.dumps(OptionError("fields", "does not apply to the dmon format")))
    assert isinstance(err, OptionError) and isinstance(err, InputError)
    assert (err.option, str(err)) == ("fields", "option fields does not apply to the dmon format")


def test_ingest_parse_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "dmon.txt"
    p.write_text("# gpu   pwr\n# Idx     W\n    0    hot\n")
    where = re.escape(str(p))
    with pytest.raises(InputError, match=f"^{where}: line 3: pwr value 'hot' is not a number$"):
        ingest(p)
    with pytest.raises(InputError, match=f"^{where}: .*no timestamp field"):
        ingest(p, format="nvsmi-query", fields=["index", "power.draw"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "file is empty"),
        (b"\r\n  \n", "file is empty"),
        (b"\xff\xfe# gpu\n", "not UTF-8 text"),
        (b"timestamp, index, power.draw [W]\n2024/05/01 12:00:00.000, 0, [N/A]\n",
         "no samples in this nvsmi-query file (unavailable: power_mw)"),
    ],
)  # fmt: skip
def test_ingest_refuses_empty_and_unreadable_files(
    tmp_path: Path, content: bytes, message: str
) -> None:
    p = tmp_path / "in.txt"
    p.write_bytes(content)
    with pytest.raises(InputError) as err:
        ingest(p)
    assert str(err.value).startswith(str(p)) and message in str(err.value)


def test_ingest_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        ingest(tmp_path / "nope.txt")


def test_ingest_strips_a_utf8_bom(tmp_path: Path) -> None:
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "dmon_default.txt").read_bytes())
    assert ingest(p).attrs["format"] == "dmon"


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
@pytest.mark.parametrize("name", ["perf_stat_interval.csv", "prometheus_dcgm.txt"])
def test_ingested_tables_round_trip(tmp_path: Path, name: str, ext: str) -> None:
    df = ingest(FIXTURES / name)
    out = tmp_path / f"samples{ext}"
    write_samples(df, out)
    pd.testing.assert_frame_equal(read_samples(out), df)
