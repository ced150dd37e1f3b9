"""Saving and loading a fitted model: exact round trip, clear refusals, and never a pickle."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from interplace.datasets import CoLocationData
from interplace.errors import DIGEST_KEY, InputError
from interplace.model import FORMAT_VERSION, Hyper, InterferenceModel, Query

META = "model.json"
WEIGHTS = "posterior.safetensors"


def _queries(model: InterferenceModel) -> list[Query]:
    jobs = model.jobs
    out = [Query(a, (b,)) for a in jobs for b in jobs]
    out += [Query(jobs[0], (jobs[1], jobs[-1])), Query(jobs[-1], ())]
    out.append(Query(jobs[0], (jobs[1],), shares=(("pcie_h2d", "host_cpu"),)))
    return out


@pytest.fixture
def saved(small_model: InterferenceModel, tmp_path: Path) -> Path:
    return small_model.save(tmp_path / "model")


def _edit_meta(directory: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    """Change a saved model's description as a file without a digest (one saved before
    digests were recorded, or by hand): what these edits test is checked before the digest."""
    meta = json.loads((directory / META).read_text())
    meta.pop(DIGEST_KEY, None)
    new = change(meta)
    (directory / META).write_text(json.dumps(meta if new is None else new))


def _as_version(meta: dict[str, Any], version: int) -> None:
    """``meta`` as an older format wrote it: before version 10, ``measured`` held the scales
    alone (no counter kernel)."""
    meta["format_version"] = version
    if version < 11:
        meta["hyper"].pop("direct_weight", None)
    if version < 10 and meta.get("measured") is not None:
        meta["measured"] = {k: meta["measured"][k] for k in ("scale", "noise")}


def _edit_tensors(directory: Path, change: Callable[[dict[str, torch.Tensor]], object]) -> None:
    tensors = load_file(str(directory / WEIGHTS))
    change(tensors)
    save_file(tensors, str(directory / WEIGHTS))
    _edit_meta(directory, lambda m: None)


def test_damaged_or_edited_files_are_refused_by_their_digest(saved: Path) -> None:
    # A few bits flipped in a weight, or a number edited, loaded and predicted wrong with no
    # word (a model of the CLI audit: A3C next to CycleGAN at 0.12 instead of 0.65).
    meta = json.loads((saved / META).read_text())
    assert len(meta[DIGEST_KEY]) == 64
    raw = bytearray((saved / WEIGHTS).read_bytes())
    raw[-3] ^= 0x40  # a bit of the last float's exponent
    (saved / WEIGHTS).write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"the model's files do not match the sha256 in "
                                         r"model\.json: they were damaged or changed"):
        InterferenceModel.load(saved)
    raw[-3] ^= 0x40
    (saved / WEIGHTS).write_bytes(bytes(raw))
    InterferenceModel.load(saved)  # as saved again
    meta["full_scale"][0] *= 1.5
    (saved / META).write_text(json.dumps(meta))
    with pytest.raises(InputError, match="do not match the sha256"):
        InterferenceModel.load(saved)
    meta.pop(DIGEST_KEY)  # a model saved before digests were recorded loads as it is
    (saved / META).write_text(json.dumps(meta))
    InterferenceModel.load(saved)


# ------------------------------------------------------------------------------ round trip


def test_round_trip_is_exact(
    small_model: InterferenceModel, small_data: CoLocationData, saved: Path
) -> None:
    loaded = InterferenceModel.load(saved)
    assert loaded.jobs == small_model.jobs
    assert loaded.resources == small_model.resources
    assert loaded.metrics == small_model.metrics
    assert loaded.full_scale == small_model.full_scale
    assert loaded.hyper == small_model.hyper
    assert dict(loaded.info) == dict(small_model.info)
    for name, (loc, scale) in small_model.posterior.items():
        assert loaded.posterior[name][0].dtype == torch.float64
        assert torch.equal(loaded.posterior[name][0], loc), name
        assert torch.equal(loaded.posterior[name][1], scale), name
    # Identical posterior and the same prediction seed: identical draws, bit for bit.
    queries = _queries(small_model)
    a = small_model.posterior_speed(queries, num_samples=200, seed=5)
    b = loaded.posterior_speed(queries, num_samples=200, seed=5)
    assert torch.equal(a.speed, b.speed)
    assert torch.equal(a.measured, b.measured)
    assert small_model.predict("job0", ["job1"]) == loaded.predict("job0", ["job1"])
    pd.testing.assert_frame_equal(
        small_model.utilisation(small_data, num_samples=50),
        loaded.utilisation(small_data, num_samples=50),
    )


def test_save_replaces_a_model_and_leaves_no_temporaries(
    small_model: InterferenceModel, tmp_path: Path
) -> None:
    target = tmp_path / "m"
    small_model.save(target)
    small_model.save(target)  # an existing model directory is replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert sorted(p.name for p in target.iterdir()) == [META, WEIGHTS]
    loaded = InterferenceModel.load(target)
    for name, (loc, _) in small_model.posterior.items():
        assert torch.equal(loaded.posterior[name][0], loc), name


def test_save_refuses_to_overwrite_foreign_paths(
    small_model: InterferenceModel, tmp_path: Path
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    with pytest.raises(InputError, match="exists and is not a directory"):
        small_model.save(file)
    assert file.read_text() == "mine"
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match=r"holds keep\.txt, which is not part of an interplace"):
        small_model.save(other)
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]
    # A saved model with a file of the user's beside it: replacing the model would delete it.
    small_model.save(other / "m")
    (other / "m" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match=r"holds notes\.txt"):
        small_model.save(other / "m")
    assert (other / "m" / "notes.txt").read_text() == "mine"
    with pytest.raises(InputError, match="output directory does not exist"):
        small_model.save(tmp_path / "missing" / "model")


# ------------------------------------------------------------------------------- no pickle


def test_saved_directory_holds_json_and_safetensors_only(saved: Path) -> None:
    assert sorted(p.name for p in saved.iterdir()) == [META, WEIGHTS]
    # Readable by a service running as another user (safetensors alone writes 0600).
    assert {(saved / f).stat().st_mode & 0o777 for f in (META, WEIGHTS)} == {0o644}
    meta = json.loads((saved / META).read_text())
    assert meta["format_version"] == FORMAT_VERSION
    raw = (saved / WEIGHTS).read_bytes()
    # Neither a pickle (protocol 2+ starts with 0x80) nor torch.save's zip archive.
    assert raw[:1] != b"\x80"
    assert raw[:4] != b"PK\x03\x04"
    # The safetensors layout: a little-endian u64 header length, then that much JSON.
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert header["__metadata__"]["format"] == meta["format"]
    tensor_names = {k for k in header if k != "__metadata__"}
    site_tensors = {f"{s}.{p}" for s in meta["sites"] for p in ("loc", "scale")}
    measured = {
        f"measured.{k}"
        for k in ("job", "co", "log_speed", "n", "expected", "offset", "spread")
    }
    # The default fit keeps its measured pairs, and lifts ceilings (hence the spread).
    assert meta["measured"] is not None
    assert tensor_names == site_tensors | measured
    floats = {"measured.log_speed", "measured.expected", "measured.offset", "measured.spread"}
    assert {header[k]["dtype"] for k in site_tensors | floats} == {"F64"}
    assert {header[f"measured.{k}"]["dtype"] for k in ("job", "co", "n")} == {"I64"}


def test_load_never_unpickles(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("load must not unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    loaded = InterferenceModel.load(saved)
    assert loaded.jobs


class _Trap:
    """Unpickling this creates a file: proof that something unpickled it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("writer", ["pickle", "torch"])
def test_a_pickled_weights_file_is_refused_unopened(saved: Path, writer: str) -> None:
    marker = saved.parent / "unpickled"
    payload = {"log_demand.loc": _Trap(marker)}
    if writer == "pickle":
        (saved / WEIGHTS).write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, saved / WEIGHTS)
    with pytest.raises(InputError, match="not a readable safetensors file"):
        InterferenceModel.load(saved)
    assert not marker.exists()


# ---------------------------------------------------------------------- tampered weights


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda b: b[: len(b) - 7], id="truncated"),
        pytest.param(lambda b: b[:8] + b"X" + b[9:], id="garbled-header"),
        pytest.param(lambda b: struct.pack("<Q", 1 << 40) + b[8:], id="huge-header-length"),
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b"\x00" * len(b), id="zeroed"),
    ],
)
def test_a_corrupt_weights_file_is_refused(saved: Path, tamper: Callable[[bytes], bytes]) -> None:
    path = saved / WEIGHTS
    path.write_bytes(tamper(path.read_bytes()))
    with pytest.raises(InputError, match=r"posterior\.safetensors: not a readable safetensors"):
        InterferenceModel.load(saved)


def test_an_extra_tensor_is_refused(saved: Path) -> None:
    _edit_tensors(saved, lambda t: t.update({"backdoor.loc": torch.zeros(3)}))
    with pytest.raises(InputError, match=r"unexpected tensor 'backdoor\.loc'"):
        InterferenceModel.load(saved)


def test_every_missing_tensor_is_refused(small_model: InterferenceModel, saved: Path) -> None:
    # (measured.spread is optional: a model without it, test_a_model_without_a_measured_...)
    names = sorted(set(load_file(str(saved / WEIGHTS))) - {"measured.spread"})
    for name in names:
        _edit_tensors(saved, lambda t, name=name: t.pop(name))
        with pytest.raises(InputError, match=re.escape(f"lacks {name!r}")):
            InterferenceModel.load(saved)
        small_model.save(saved)  # a fresh, untouched copy for the next site


_POISON = {
    "loc-nan": ("loc", float("nan"), "holds non-finite values"),
    "loc-inf": ("loc", float("-inf"), "holds non-finite values"),
    "scale-inf": ("scale", float("inf"), "holds non-finite values"),
    "scale-negative": ("scale", -1.0, r"has a negative scale"),
}


@pytest.mark.parametrize("poison", sorted(_POISON))
def test_non_finite_or_non_positive_tensors_are_refused(
    small_model: InterferenceModel, saved: Path, poison: str
) -> None:
    part, value, message = _POISON[poison]
    sites = sorted(
        {k.rsplit(".", 1)[0] for k in load_file(str(saved / WEIGHTS))} - {"measured"}
    )
    assert len(sites) >= 5
    for site in sites:
        key = f"{site}.{part}"

        def poisoned(t: dict[str, torch.Tensor], key: str = key) -> None:
            x = t[key].clone()
            x.view(-1)[-1] = value
            t[key] = x

        _edit_tensors(saved, poisoned)
        with pytest.raises(InputError, match=f"posterior site {site} {message}"):
            InterferenceModel.load(saved)
        small_model.save(saved)  # a fresh, untouched copy for the next site


def test_a_tensor_of_the_wrong_shape_is_refused(
    small_model: InterferenceModel, saved: Path
) -> None:
    names = sorted(load_file(str(saved / WEIGHTS)))
    for name in names:
        site = name.rsplit(".", 1)[0]

        def grow(t: dict[str, torch.Tensor], name: str = name) -> None:
            x = t[name]
            t[name] = torch.cat([x.reshape(-1), x.reshape(-1)[:1]]) if x.dim() < 2 else x[1:]

        _edit_tensors(saved, grow)
        message = f"posterior site {site} has shape"
        if site == "measured":
            message = (
                "must be a finite square"
                if name.endswith(("expected", "offset"))
                else r"spread must be a \(J, J\) array"
                if name.endswith("spread")
                else "job, co, log_speed and n must be"
            )
        with pytest.raises(InputError, match=message):
            InterferenceModel.load(saved)
        small_model.save(saved)


# ------------------------------------------------------------------------- model.json


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 1, 0, "3", None])
def test_another_format_version_is_refused(saved: Path, version: object) -> None:
    _edit_meta(saved, lambda m: m.update(format_version=version))
    with pytest.raises(InputError, match=rf"model format version {version!r}; this interplace"):
        InterferenceModel.load(saved)


def test_a_version_2_model_still_loads(
    small_model_rank0: InterferenceModel, tmp_path: Path
) -> None:
    # Version 3 only added job families, version 4 the pair term; a version 2 directory is one
    # without either (its hyper-parameters lack theirs, which take their defaults).
    saved = small_model_rank0.save(tmp_path / "model")

    def to_v2(meta: dict[str, Any]) -> None:
        meta["format_version"] = 2
        meta.pop("families")
        meta.pop("measured")
        meta["hyper"] = {
            k: v for k, v in meta["hyper"].items()
            if not k.startswith(("family", "pair", "measure"))
        }

    _edit_meta(saved, to_v2)
    loaded = InterferenceModel.load(saved)
    assert loaded.families is None and loaded.rank == 0
    q = _queries(small_model_rank0)
    np.testing.assert_array_equal(
        loaded.posterior_speed(q).speed.numpy(),
        small_model_rank0.posterior_speed(q).speed.numpy(),
    )


def test_a_version_3_model_loads_as_rank_0(
    small_model_rank0: InterferenceModel, tmp_path: Path
) -> None:
    saved = small_model_rank0.save(tmp_path / "model")
    _edit_meta(saved, lambda m: m.update(format_version=3))
    assert InterferenceModel.load(saved).rank == 0


def test_a_version_3_model_with_pair_tensors_is_refused(
    small_model: InterferenceModel, saved: Path
) -> None:
    assert small_model.rank > 0
    _edit_meta(saved, lambda m: m.update(format_version=3))
    with pytest.raises(InputError, match="version 3 model has no pair term"):
        InterferenceModel.load(saved)


def test_a_version_4_model_loads_without_measured_pairs(
    small_model_rank0: InterferenceModel, tmp_path: Path
) -> None:
    saved = small_model_rank0.save(tmp_path / "model")
    _edit_meta(saved, lambda m: m.update(format_version=4))
    assert InterferenceModel.load(saved).measured is None


def test_a_version_4_model_with_measured_pairs_is_refused(saved: Path) -> None:
    _edit_meta(saved, lambda m: m.update(format_version=4))
    with pytest.raises(InputError, match="version 4 model has no measured pairs"):
        InterferenceModel.load(saved)


def test_measured_pairs_round_trip(small_model: InterferenceModel, saved: Path) -> None:
    loaded = InterferenceModel.load(saved)
    assert loaded.measured is not None and small_model.measured is not None
    for key in ("job", "co", "log_speed", "n", "expected", "offset"):
        np.testing.assert_array_equal(
            getattr(loaded.measured, key), getattr(small_model.measured, key)
        )
    assert (loaded.measured.scale, loaded.measured.noise) == (
        small_model.measured.scale, small_model.measured.noise
    )
    # The default fit lifts ceilings, and each unmeasured pair's spread comes with it.
    assert small_model.measured.spread is not None and loaded.measured.spread is not None
    np.testing.assert_array_equal(loaded.measured.spread, small_model.measured.spread)


def test_a_model_without_a_measured_spread_loads_with_tau(saved: Path) -> None:
    # A fit that lifted no ceiling, or a model saved before version 8, has no spread: every
    # unmeasured pair's interval spread is tau, as it was saved.
    def drop(t: dict[str, torch.Tensor]) -> None:
        del t["measured.spread"]

    _edit_tensors(saved, drop)
    _edit_meta(saved, lambda m: _as_version(m, 7))
    m = InterferenceModel.load(saved).measured
    assert m is not None and m.spread is None
    assert bool((m.spreads(3) == m.scale).all())


def test_a_version_7_model_with_a_measured_spread_is_refused(saved: Path) -> None:
    _edit_meta(saved, lambda m: _as_version(m, 7))
    with pytest.raises(InputError, match="version 7 model has no measured-pair spread"):
        InterferenceModel.load(saved)


@pytest.mark.parametrize("bad", [-0.01, 0.0, float("nan")])
def test_a_bad_measured_spread_is_refused(saved: Path, bad: float) -> None:
    def poisoned(t: dict[str, torch.Tensor]) -> None:
        x = t["measured.spread"].clone()
        x[0, 1] = bad
        t["measured.spread"] = x

    _edit_tensors(saved, poisoned)
    with pytest.raises(InputError, match=r"spread must be a \(J, J\) array of finite scales > 0"):
        InterferenceModel.load(saved)


def test_measured_pair_tensors_without_their_description_are_refused(saved: Path) -> None:
    _edit_meta(saved, lambda m: m.update(measured=None))
    with pytest.raises(InputError, match="measured-pair tensors without their description"):
        InterferenceModel.load(saved)


def test_a_malformed_measured_description_is_refused(saved: Path) -> None:
    _edit_meta(saved, lambda m: m.update(measured={"scale": 0.1}))
    with pytest.raises(InputError, match="measured must hold kernel, kernel_weight, noise, scale"):
        InterferenceModel.load(saved)


def test_the_counter_kernel_round_trips(cold_model: InterferenceModel, tmp_path: Path) -> None:
    saved = cold_model.save(tmp_path / "model")
    loaded = InterferenceModel.load(saved).measured
    assert cold_model.measured is not None and cold_model.measured.kernel is not None
    assert loaded is not None and loaded.kernel == cold_model.measured.kernel
    assert loaded.kernel_weight == cold_model.measured.kernel_weight == 0.5


def test_a_version_9_model_loads_without_a_counter_kernel(saved: Path) -> None:
    # Saved before the kernel: its measured description holds the scales alone.
    _edit_meta(saved, lambda m: _as_version(m, 9))
    m = InterferenceModel.load(saved).measured
    assert m is not None and m.kernel is None and m.kernel_weight == 0.0


def test_a_direct_weight_is_saved_and_an_older_model_loads_without_one(
    small_model: InterferenceModel, tmp_path: Path
) -> None:
    # Hyper.direct_weight (format 11) acts in the fit's second stage; a model records it, and
    # one saved before it (format 10 or older) was fitted without it, whatever the default.
    model = dataclasses.replace(small_model, hyper=Hyper(direct_weight=0.25))
    saved = model.save(tmp_path / "model")
    assert InterferenceModel.load(saved).hyper.direct_weight == 0.25
    _edit_meta(saved, lambda m: _as_version(m, 10))
    assert "direct_weight" not in json.loads((saved / META).read_text())["hyper"]
    assert InterferenceModel.load(saved).hyper.direct_weight == 0.0


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        ({"length": 1.0}, "measured kernel must hold length, scale"),
        ({"length": -1.0, "scale": 0.3, "level": 0.1, "noise": 0.1, "columns": [0],
          "centre": [0.0], "spread": [1.0]}, "length must be a finite float > 0"),
        ({"length": 1.0, "scale": 0.3, "level": 0.1, "noise": 0.1, "columns": ["x"],
          "centre": [0.0], "spread": [1.0]}, "measured kernel: invalid literal"),
    ],
)
def test_a_malformed_counter_kernel_is_refused(
    cold_model: InterferenceModel, tmp_path: Path, kernel: dict[str, Any], message: str
) -> None:
    saved = cold_model.save(tmp_path / "model")
    _edit_meta(saved, lambda m: m["measured"].update(kernel=kernel))
    with pytest.raises(InputError, match=message):
        InterferenceModel.load(saved)
    _edit_meta(saved, lambda m: m["measured"].update(kernel=None, kernel_weight="half"))
    with pytest.raises(InputError, match="kernel_weight must be a number"):
        InterferenceModel.load(saved)


def test_a_non_finite_measured_speed_is_refused(saved: Path) -> None:
    def poisoned(t: dict[str, torch.Tensor]) -> None:
        x = t["measured.log_speed"].clone()
        x[0] = float("nan")
        t["measured.log_speed"] = x

    _edit_tensors(saved, poisoned)
    with pytest.raises(InputError, match="measured pairs: log speeds must be finite"):
        InterferenceModel.load(saved)


def test_a_negative_measured_scale_is_refused(saved: Path) -> None:
    _edit_meta(saved, lambda m: m["measured"].update(scale=-0.1))
    with pytest.raises(InputError, match="scale must be a finite float > 0"):
        InterferenceModel.load(saved)


def test_a_missing_format_version_is_refused(saved: Path) -> None:
    _edit_meta(saved, lambda m: m.pop("format_version") and None)
    with pytest.raises(InputError, match="model format version None"):
        InterferenceModel.load(saved)


@pytest.mark.parametrize(
    "foreign",
    [
        pytest.param({"name": "bert", "version": 1}, id="other-tool"),
        pytest.param({"format": "safetensors-model", "format_version": 1}, id="other-format"),
        pytest.param([1, 2, 3], id="list"),
        pytest.param("interplace-interference-model", id="string"),
        pytest.param(None, id="null"),
    ],
)
def test_foreign_json_is_refused(saved: Path, foreign: object) -> None:
    (saved / META).write_text(json.dumps(foreign))
    with pytest.raises(InputError, match=r"model\.json: not an interplace model description"):
        InterferenceModel.load(saved)


@pytest.mark.parametrize(
    "content", [b"{not json", b"\xff\xfe\x00garbage", b""], ids=["syntax", "binary", "empty"]
)
def test_a_meta_file_that_is_not_json_is_refused(saved: Path, content: bytes) -> None:
    (saved / META).write_bytes(content)
    with pytest.raises(InputError, match=r"model\.json: not valid JSON"):
        InterferenceModel.load(saved)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda m: m.pop("jobs") and None, "lacks 'jobs'", id="no-jobs"),
        pytest.param(lambda m: m.pop("hyper") and None, "lacks 'hyper'", id="no-hyper"),
        pytest.param(
            lambda m: m.update(jobs=["job0", "job1"]),
            r"posterior site \w+ has shape",
            id="fewer-jobs",
        ),
        pytest.param(
            lambda m: m.update(jobs=["a", "a", "b", "c"]), "distinct job names", id="dup-jobs"
        ),
        pytest.param(
            lambda m: m["hyper"].update(speed_df=-1.0), "hyper-parameter speed_df must be > 0",
            id="bad-hyper",
        ),
        pytest.param(
            lambda m: m["hyper"].update(nonsense=1.0), "malformed model", id="unknown-hyper"
        ),
        pytest.param(lambda m: m.update(hyper=[1, 2]), "malformed model", id="hyper-list"),
        pytest.param(
            lambda m: m.update(full_scale=["wide"] * len(m["metrics"])),
            "malformed model",
            id="full-scale-text",
        ),
        pytest.param(
            lambda m: m.update(full_scale=m["full_scale"][:-1]),
            "metrics and full_scale differ in length",
            id="full-scale-short",
        ),
    ],
)
def test_a_malformed_description_is_refused(
    saved: Path, change: Callable[[dict[str, Any]], Any], message: str
) -> None:
    _edit_meta(saved, change)
    with pytest.raises(InputError, match=message):
        InterferenceModel.load(saved)


# -------------------------------------------------------------------------- missing files


@pytest.mark.parametrize("missing", [META, WEIGHTS])
def test_a_missing_file_is_refused(saved: Path, missing: str) -> None:
    (saved / missing).unlink()
    with pytest.raises(InputError, match=r"not an interplace model \(needs model\.json and"):
        InterferenceModel.load(saved)


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such model directory"):
        InterferenceModel.load(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="file is a file, not a model directory"):
        InterferenceModel.load(tmp_path / "file")


def test_every_refusal_is_one_line(saved: Path) -> None:
    _edit_meta(saved, lambda m: m.update(format_version=99))
    with pytest.raises(InputError) as info:
        InterferenceModel.load(saved)
    assert "\n" not in str(info.value)
    assert str(saved) in str(info.value)


def test_loaded_predictions_are_finite(saved: Path) -> None:
    loaded = InterferenceModel.load(saved)
    p = loaded.posterior_speed(_queries(loaded), num_samples=100)
    assert np.isfinite(p.speed.numpy()).all()
    assert (p.speed > 0).all()
