"""Search spaces: parsing with one-line errors, encoding, decoding, constraints."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from interplace.errors import InputError
from interplace.placement.bo import (
    Choice,
    Constraint,
    Float,
    Int,
    Space,
    load_space,
    parse_space,
)

ISSUE_SPACE = {"params": [{"name": "g0", "type": "choice", "values": [0, 1, 2, 4, 8]},
                          {"name": "mps_pct", "type": "int", "low": 10, "high": 90},
                          {"name": "x", "type": "float", "low": 0.0, "high": 1.0}]}


def test_the_issue_space_parses() -> None:
    s = parse_space(ISSUE_SPACE)
    assert s.names == ("g0", "mps_pct", "x")
    assert isinstance(s.params[0], Choice) and s.params[0].ordinal
    assert s.params[1] == Int("mps_pct", 10, 90)
    assert s.params[2] == Float("x", 0.0, 1.0)
    assert s.bounds.tolist() == [[0.0, 10.0, 0.0], [8.0, 90.0, 1.0]]
    assert s.categorical == ()
    assert math.isinf(s.size())


@pytest.mark.parametrize(("param", "message"), [
    ({"name": "n", "type": "int", "low": 1}, "parameter 'n': missing 'high'"),
    ({"name": "n", "type": "int", "low": 1.5, "high": 3}, "parameter 'n': low must be an integer"),
    ({"name": "n", "type": "int", "low": 4, "high": 3}, "parameter 'n': low 4 must not exceed"),
    ({"name": "f", "type": "float", "low": 1, "high": 1}, "parameter 'f': low 1 must be below"),
    ({"name": "f", "type": "float", "low": 0, "high": 1, "log": True},
     "parameter 'f': a log-scaled range needs low > 0"),
    ({"name": "f", "type": "float", "low": "a", "high": 1}, "parameter 'f': low must be a finite"),
    ({"name": "c", "type": "choice", "values": []}, "parameter 'c': values must be a non-empty"),
    ({"name": "c", "type": "choice", "values": [1, 1.0]}, "parameter 'c': values must be distinct"),
    ({"name": "c", "type": "choice", "values": [[1]]}, "parameter 'c': values must be finite"),
    ({"name": "c", "type": "choice", "values": [True, 2]}, "parameter 'c': values must be finite"),
    ({"name": "c", "type": "choice", "values": ["4", 4]}, "parameter 'c': a string value equals"),
    ({"name": "c", "type": "choose", "values": [1]}, "parameter 'c': type must be"),
    ({"name": "c", "type": "int", "low": 0, "high": 1, "step": 2}, "parameter 'c': unknown key"),
    ({"type": "int", "low": 0, "high": 1}, "parameter #2: missing 'name'"),
    ({"name": "value", "type": "int", "low": 0, "high": 1}, "parameter 'value': the name is taken"),
])
def test_malformed_parameters_get_one_line_naming_them(param: dict[str, object],
                                                       message: str) -> None:
    spec = {"params": [{"name": "ok", "type": "int", "low": 0, "high": 3}, param]}
    with pytest.raises(InputError) as info:
        parse_space(spec)
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text


def test_malformed_spaces() -> None:
    for bad, msg in [([], "a space must be a JSON object"), ({}, "non-empty 'params'"),
                     ({"params": [], "x": 1}, "unknown space key 'x'"),
                     ({"params": [{"name": "a", "type": "int", "low": 0, "high": 2},
                                  {"name": "a", "type": "int", "low": 0, "high": 2}]},
                      "parameter 'a' appears twice")]:
        with pytest.raises(InputError, match=msg):
            parse_space(bad)


def test_constraints_parse_and_are_checked() -> None:
    spec = {"params": [{"name": "a", "type": "choice", "values": [0, 2, 4]},
                       {"name": "b", "type": "int", "low": 0, "high": 4}],
            "constraints": [{"params": ["a", "b"], "max": 4}]}
    s = parse_space(spec)
    assert s.constraints == (Constraint((("a", 1.0), ("b", 1.0)), 4),)
    assert s.feasible({"a": 2, "b": 2}) and not s.feasible({"a": 4, "b": 1})
    with pytest.raises(InputError, match="breaks a constraint"):
        s.check({"a": 4, "b": 1})
    assert len(list(s.grid())) == sum(1 for a in (0, 2, 4) for b in range(5) if a + b <= 4)
    assert parse_space(s.to_json()).to_json() == s.to_json()
    bad = dict(spec, constraints=[{"params": ["a", "zz"], "max": 4}])
    with pytest.raises(InputError, match="constraint #1: unknown parameter 'zz'"):
        parse_space(bad)
    cat = {"params": [{"name": "c", "type": "choice", "values": ["x", "y"]}],
           "constraints": [{"params": ["c"], "max": 1}]}
    with pytest.raises(InputError, match="parameter 'c': constraints take"):
        parse_space(cat)


def test_check_names_the_parameter() -> None:
    s = parse_space(ISSUE_SPACE)
    assert s.check({"g0": 4.0, "mps_pct": 10.0, "x": 1}) == {"g0": 4, "mps_pct": 10, "x": 1.0}
    for point, msg in [({"g0": 3, "mps_pct": 10, "x": 0.5}, "parameter 'g0': 3 is not one of"),
                       ({"g0": 4, "mps_pct": 10.5, "x": 0.5}, "parameter 'mps_pct': 10.5 is not"),
                       ({"g0": 4, "mps_pct": 91, "x": 0.5}, "parameter 'mps_pct': 91 is outside"),
                       ({"g0": 4, "mps_pct": 10, "x": 1.5}, "parameter 'x': 1.5 is outside"),
                       ({"g0": 4, "mps_pct": 10}, "parameter 'x' is missing"),
                       ({"g0": 4, "mps_pct": 10, "x": 0.1, "y": 1}, "unknown parameter 'y'")]:
        with pytest.raises(InputError, match=msg):
            s.check(point)


def test_encode_decode_round_trip_and_rounding() -> None:
    s = Space((Int("n", -3, 3), Float("lr", 1e-4, 1.0, log=True), Choice("opt", ("adam", "sgd")),
               Choice("g", (0, 1, 2, 4, 8))))
    p = {"n": -2, "lr": 0.01, "opt": "sgd", "g": 4}
    row = s.encode(p)
    assert row[1] == pytest.approx(math.log(0.01)) and row[2] == 1.0 and row[3] == 4.0
    back = s.decode(row)
    assert back["n"] == -2 and back["opt"] == "sgd" and back["g"] == 4
    assert back["lr"] == pytest.approx(0.01)
    # out-of-range rows decode to the nearest point inside
    assert s.decode([9.7, 5.0, -3.0, 5.9]) == {"n": 3, "lr": 1.0, "opt": "adam", "g": 4}
    assert s.decode([-0.4, -50.0, 0.6, 6.1]) == {"n": 0, "lr": 1e-4, "opt": "sgd", "g": 8}
    assert s.categorical == (2,)


def test_from_unit_covers_every_value_equally() -> None:
    s = Space((Int("a", 0, 3), Choice("c", ("x", "y", "z"))))
    us = [(i + 0.5) / 12 for i in range(12)]
    a = [s.from_unit([u, 0.0])["a"] for u in us]
    c = [s.from_unit([0.0, u])["c"] for u in us]
    assert [a.count(v) for v in range(4)] == [3, 3, 3, 3]
    assert [c.count(v) for v in "xyz"] == [4, 4, 4]
    assert s.from_unit([1.0, 1.0]) == {"a": 3, "c": "z"}


def test_trials_file_cells_parse_back() -> None:
    s = Space((Choice("c", ("auto", 4, 2.5)), Int("n", 0, 9)))
    assert s.parse_text("c", "auto") == "auto"
    assert s.parse_text("c", "4") == 4 and s.parse_text("c", "2.5") == 2.5
    with pytest.raises(InputError, match="parameter 'n': 'x' is not a number"):
        s.parse_text("n", "x")


def test_load_space_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "space.json"
    f.write_text(json.dumps(ISSUE_SPACE))
    assert load_space(f).names == ("g0", "mps_pct", "x")
    f.write_text('{"params": [{"name": "n", "type": "int", "low": 1}]}')
    with pytest.raises(InputError, match=r"space\.json: parameter 'n': missing 'high'"):
        load_space(f)
    f.write_text("{oops")
    with pytest.raises(InputError, match="not JSON"):
        load_space(f)
