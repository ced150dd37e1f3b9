"""Gavel's throughputs: the packaged copy against the figures of SOURCE.md and the raw files."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import GPU_TYPES, convert_gavel, load_gavel, read_gavel_json
from interplace.datasets._convert_gavel import main as convert_main
from interplace.datasets.gavel import GAVEL_COMMIT
from interplace.errors import InputError

SHARED = Path(__file__).parents[2].parent / "shared" / "datasets" / "gavel"
PACKAGED = importlib.resources.files("interplace") / "data" / "gavel"
needs_shared = pytest.mark.skipif(
    not (SHARED / "simulation_throughputs.json").is_file(),
    reason=f"Gavel raw data not found at {SHARED}",
)

# From /work/shared/datasets/gavel/SOURCE.md, "Coverage".
UNORDERED_PAIRS = {"k80": 306, "p100": 340, "v100": 330}
ORDERED_PAIRS = {"k80": 589, "p100": 656, "v100": 636}
# (min, max, median) of the normalised co-located throughput, as printed (2 decimals).
SPEED_RANGE = {"k80": (0.24, 0.86, 0.54), "p100": (0.28, 0.99, 0.59), "v100": (0.09, 1.00, 0.68)}

RESNET = "ResNet-50 (batch size 64)"
LM = "LM (batch size 20)"


@pytest.mark.parametrize("gpu", GPU_TYPES)
def test_counts_match_source_md(gpu: str) -> None:
    g = load_gavel(gpu)
    runs = g.data.runs
    assert runs["job"].nunique() == 26
    sizes = runs.groupby("run_id").size()
    assert set(sizes) == {1, 2}
    assert (sizes == 1).sum() == 26  # one isolated run per job
    assert (sizes == 2).sum() == UNORDERED_PAIRS[gpu]
    pairs = g.data.pairs()
    assert len(pairs) == 2 * UNORDERED_PAIRS[gpu]
    # Ordered entries of Gavel's table: a self-pair is one entry but two rows of pairs().
    n_self_runs = pairs.loc[pairs["job"] == pairs["co_runner"], "run_id"].nunique()
    assert len(pairs) - n_self_runs == ORDERED_PAIRS[gpu]
    # Every unordered pair of the 26 jobs (351) is either a run or infeasible.
    assert UNORDERED_PAIRS[gpu] + len(g.infeasible) == 26 * 27 // 2
    assert (runs["gpu_type"] == gpu).all()
    assert g.data.name == f"gavel-{gpu}"
    # Every job name is "<network> (batch size <n>)" but A3C and CycleGAN, named bare.
    jobs = runs.drop_duplicates("job").set_index("job")
    bare = jobs.index[jobs["batch_size"].isna()].tolist()
    assert sorted(bare) == ["A3C", "CycleGAN"]
    assert (jobs.loc[bare, "model"] == bare).all()
    named = jobs.drop(index=bare)
    rebuilt = named["model"] + " (batch size " + named["batch_size"].astype(str) + ")"
    assert (rebuilt == named.index).all()
    assert sorted(jobs["model"].unique()) == [
        "A3C",
        "CycleGAN",
        "LM",
        "Recommendation",
        "ResNet-18",
        "ResNet-50",
        "Transformer",
    ]


@pytest.mark.parametrize("gpu", GPU_TYPES)
def test_speeds_match_the_documented_ranges(gpu: str) -> None:
    pairs = load_gavel(gpu).data.pairs()
    # Median over Gavel's ordered entries: count each self-pair run once.
    ordered = pairs[~((pairs["job"] == pairs["co_runner"]) & pairs["run_id"].duplicated())]
    lo, hi, median = SPEED_RANGE[gpu]
    assert round(float(ordered["speed"].min()), 2) == lo
    assert round(float(ordered["speed"].max()), 2) == hi
    assert round(float(ordered["speed"].median()), 2) == median


def test_source_md_example_is_recovered_exactly() -> None:
    g = load_gavel("v100")
    runs = g.data.runs.set_index("run_id")
    pair = runs.loc[f"v100/pair/{LM}|{RESNET}"]
    assert dict(zip(pair["job"], pair["throughput"], strict=True)) == {
        RESNET: 3.0214759821669617,
        LM: 24.79801703692631,
    }
    assert runs.loc[f"v100/iso/{RESNET}", "throughput"] == 4.394774823323071
    assert runs.loc[f"v100/iso/{LM}", "throughput"] == 64.74245099960703
    p = g.data.pairs().set_index(["job", "co_runner"])
    assert round(float(p.loc[(RESNET, LM), "speed"]), 2) == 0.69
    assert round(float(p.loc[(LM, RESNET), "speed"]), 2) == 0.38
    assert p.loc[(RESNET, LM), "speed"] == 3.0214759821669617 / 4.394774823323071


def test_infeasible_pairs_are_not_runs() -> None:
    g = load_gavel("v100")
    inf = g.infeasible
    assert list(inf.columns) == ["job", "co_runner"]
    assert ((inf["job"] == RESNET) & (inf["co_runner"] == "Transformer (batch size 256)")).any()
    run_pairs = {
        frozenset((a, b))
        for a, b in zip(g.data.pairs()["job"], g.data.pairs()["co_runner"], strict=True)
    }
    for a, b in zip(inf["job"], inf["co_runner"], strict=True):
        assert frozenset((a, b)) not in run_pairs
        assert not g.is_feasible(a, b)
        assert not g.is_feasible(b, a)
        assert g.is_feasible(a)
    assert (g.data.runs["throughput"] > 0).all()
    assert g.is_feasible(RESNET, LM)


def test_scaling_table() -> None:
    for gpu in GPU_TYPES:
        g = load_gavel(gpu)
        s = g.scaling
        assert list(s.columns) == ["job", "gpu_type", "scale_factor", "throughput"]
        assert set(s["scale_factor"]) == {1, 2, 4, 8}
        assert (s["throughput"] > 0).all()
        one = s[s["scale_factor"] == 1].set_index("job")["throughput"]
        pd.testing.assert_series_equal(
            one.sort_index(), g.data.isolated_throughput().sort_index(), check_names=False
        )
        multi = s[s["scale_factor"] > 1]
        # 19 jobs were profiled on 2/4/8 GPUs; on K80 one of them never ran (see below).
        assert multi["job"].nunique() == (18 if gpu == "k80" else 19)
    # On K80, ResNet-50 bs128 could not run on 2/4/8 GPUs (stored as 0): left out.
    k80 = load_gavel("k80").scaling
    assert len(k80) == 26 + 19 * 3 - 3
    assert set(k80.loc[k80["job"] == "ResNet-50 (batch size 128)", "scale_factor"]) == {1}


def test_unknown_gpu_type() -> None:
    msg = r"unknown Gavel GPU type 'a100' \(choose from k80, p100, v100\)"
    with pytest.raises(InputError, match=msg):
        load_gavel("a100")
    with pytest.raises(InputError, match="unknown Gavel GPU type 'v100_unconsolidated'"):
        load_gavel("v100_unconsolidated")


def test_packaged_copy_is_small_and_licensed() -> None:
    names = {"runs.csv", "infeasible.csv", "scaling.csv", "LICENSE", "README.md"}
    files = {p.name: p for p in PACKAGED.iterdir()}
    assert set(files) == names
    assert sum(len(files[n].read_bytes()) for n in names) < 1_000_000
    assert files["LICENSE"].read_text().startswith("MIT License")
    readme = files["README.md"].read_text()
    assert GAVEL_COMMIT in readme
    assert "steps (iterations) per second" in readme


@needs_shared
def test_packaged_copy_equals_conversion_from_shared(tmp_path: Path) -> None:
    assert convert_main([str(SHARED), str(tmp_path)]) == 0
    for name in ("runs.csv", "infeasible.csv", "scaling.csv", "LICENSE", "README.md"):
        assert (tmp_path / name).read_bytes() == (PACKAGED / name).read_bytes(), name
    assert (tmp_path / "LICENSE").read_bytes() == (SHARED / "LICENSE").read_bytes()
    for gpu in GPU_TYPES:
        packaged, raw = load_gavel(gpu), load_gavel(gpu, source=SHARED)
        pd.testing.assert_frame_equal(packaged.data.runs, raw.data.runs)
        pd.testing.assert_frame_equal(packaged.infeasible, raw.infeasible)
        pd.testing.assert_frame_equal(packaged.scaling, raw.scaling)


@needs_shared
def test_raw_pairs_match_the_json_exactly() -> None:
    raw = json.loads((SHARED / "simulation_throughputs.json").read_text())
    g = load_gavel("v100")
    table = raw["v100"]
    for row in g.data.pairs().itertuples():
        outer = table[repr((row.job, 1))]
        assert outer[repr((row.co_runner, 1))][0] == row.throughput
        assert outer["null"] == row.isolated


@needs_shared
def test_physical_cluster_file_converts_with_a_job_that_cannot_run_alone() -> None:
    # physical_cluster_throughputs.json stores 0 for ResNet-50 bs128 alone on K80.
    g = load_gavel("k80", source=SHARED / "physical_cluster_throughputs.json")
    job = "ResNet-50 (batch size 128)"
    assert job not in set(g.data.runs["job"])
    alone = g.infeasible[g.infeasible["co_runner"].isna()]
    assert alone["job"].tolist() == [job]
    assert not g.is_feasible(job)
    assert not g.is_feasible("A3C", job)
    assert g.data.runs["job"].nunique() == 25
    assert len(g.data.pairs()) // 2 == UNORDERED_PAIRS["k80"]


def _raw(**overrides: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "('a', 1)": {"null": 4.0, "('a', 1)": [1.0, 1.0], "('b', 1)": [2.0, 3.0]},
        "('b', 1)": {"null": 6.0, "('a', 1)": [3.0, 2.0], "('b', 1)": [0.0, 0.0]},
    }
    table.update(overrides)
    return {"v100": table, "v100_unconsolidated": {"garbage": 1}}


def test_convert_small_table() -> None:
    runs, infeasible, scaling = convert_gavel(_raw())
    assert runs.values.tolist() == [
        ["v100/iso/a", "a", 4.0, "v100"],
        ["v100/iso/b", "b", 6.0, "v100"],
        ["v100/pair/a|a", "a", 1.0, "v100"],
        ["v100/pair/a|a", "a", 1.0, "v100"],
        ["v100/pair/a|b", "a", 2.0, "v100"],
        ["v100/pair/a|b", "b", 3.0, "v100"],
    ]
    assert infeasible.values.tolist() == [["v100", "b", "b"]]
    assert scaling["scale_factor"].dtype == np.int64


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"__import__('os').getcwd()": {"null": 1.0}}, "is not a (job, scale factor) tuple"),
        ({"('c',)": {"null": 1.0}}, "key \"('c',)\" is not a (job, scale factor) tuple"),
        ({"('c', 1)": {"x": 1.0}}, 'entry has no isolated ("null") throughput'),
        ({"('c', 1)": {"null": -1.0}}, "throughput -1.0 is not a finite number >= 0"),
        ({"('c', 1)": {"null": "fast"}}, "throughput 'fast' is not a number"),
        (
            {"('a', 1)": {"null": 4.0, "('a', 1)": [1.0, 1.0], "('b', 1)": [2.0, 3.5]}},
            "does not match its mirror entry [3.0, 2.0]",
        ),
        (
            {
                "('a', 1)": {"null": 4.0, "('b', 1)": [2.0, 0.0]},
                "('b', 1)": {"null": 6.0, "('a', 1)": [0.0, 2.0]},
            },
            "pair [2.0, 0.0] is half zero",
        ),
        ({"('a', 1)": {"null": 4.0, "('z', 1)": [1.0, 1.0]}}, "co-runner 'z' has no entry"),
    ],
)
def test_convert_refuses_malformed_input(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        convert_gavel(_raw(**overrides), "t.json")
    assert message in str(info.value)
    assert str(info.value).startswith("t.json")


def test_convert_refuses_files_without_gpu_types(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no GPU type of k80, p100, v100"):
        convert_gavel({"a100": {}})
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_gavel_json(bad)
    with pytest.raises(InputError, match="no such file"):
        load_gavel("v100", source=tmp_path)


def test_converter_command_line_errors(tmp_path: Path) -> None:
    assert convert_main([]) == 2
    assert convert_main([str(tmp_path), str(tmp_path)]) == 2  # no LICENSE
