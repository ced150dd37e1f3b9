r"""Search spaces: integer, continuous and choice parameters, and linear capacity constraints.

A :class:`Space` is an ordered tuple of parameters and optional linear constraints. Points are
plain dicts ``{name: value}``. For the Gaussian process every point is *encoded* as a row of
``d`` floats, one column per parameter:

============================  =================================  ============================
parameter                     encoded column                     in the optimiser
============================  =================================  ============================
``Int(low, high)``            the integer itself                 discrete (ordinal) values
``Float(low, high)``          the value (``log=True``: its log)  continuous
``Choice`` of numbers         the number itself                  discrete (ordinal) values
``Choice`` with a string      the index of the value             categorical
============================  =================================  ============================

Numbers offered as a choice (``[0, 1, 2, 4, 8]`` GPUs) are ordered, and the GP sees their
distance; a choice with any string value is categorical (only equality counts). A
:class:`Constraint` is :math:`\sum_i w_i x_i \le c` over int, float (not log) and numeric
choice parameters, e.g. "at most 16 GPUs in all"; every point the tuner suggests satisfies
it (the search itself is constrained, no penalty is involved).

Decoding rounds: an integer column to the nearest integer inside ``[low, high]``, an ordinal
choice to the nearest offered value, a categorical column to the nearest index, a float is
clipped to its bounds. So any row of reals decodes to a point of the space (constraints
apart, which the tuner checks).

>>> s = Space((Choice("g0", (0, 1, 2, 4, 8)), Int("mps_pct", 10, 90), Float("x", 0.0, 1.0)))
>>> s.names
('g0', 'mps_pct', 'x')
>>> s.decode([3.2, 49.6, 1.5])
{'g0': 4, 'mps_pct': 50, 'x': 1.0}
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from interplace.errors import InputError, is_int, is_real, plain_number, read_json

__all__ = [
    "Choice",
    "Constraint",
    "Float",
    "Int",
    "Param",
    "Point",
    "Space",
    "load_space",
    "parse_space",
]

Value: TypeAlias = int | float | str
Point: TypeAlias = dict[str, Value]
"""A point of a space: ``{parameter name: value}``."""

_FloatArray: TypeAlias = "np.ndarray[Any, np.dtype[np.float64]]"

RESERVED = ("value", "status", "error")
"""Column names of a trials file after the parameters; no parameter may take them."""




def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name or name != name.strip() or "," in name or any(
            c in name for c in "\n\r\t"):
        raise InputError(f"name must be a non-empty string without commas, control "
                         f"characters or surrounding blanks, not {name!r}")
    return name


@dataclass(frozen=True)
class Int:
    """An integer parameter in ``[low, high]`` (both included).

    >>> Int("workers", 1, 8).size
    8
    >>> Int("w", 3, 2)
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: parameter 'w': low 3 must not exceed high 2
    """

    name: str
    low: int
    high: int

    def __post_init__(self) -> None:
        _check_name(self.name)
        for k in ("low", "high"):
            v = getattr(self, k)
            if not is_int(v):
                raise InputError(f"parameter {self.name!r}: {k} must be an integer, not {v!r}")
        if self.low > self.high:
            raise InputError(f"parameter {self.name!r}: low {self.low} must not exceed high "
                             f"{self.high}")

    @property
    def size(self) -> int:
        """The number of values."""
        return self.high - self.low + 1


@dataclass(frozen=True)
class Float:
    """A real parameter in ``[low, high]``; ``log=True`` searches ``log(value)`` (``low > 0``).

    >>> Float("lr", 1e-4, 1e-1, log=True).log
    True
    >>> Float("lr", 0.0, 1.0, log=True)
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: parameter 'lr': a log-scaled range needs low > 0, not 0.0
    """

    name: str
    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        _check_name(self.name)
        for k in ("low", "high"):
            v = getattr(self, k)
            if not is_real(v):
                raise InputError(f"parameter {self.name!r}: {k} must be a finite number, "
                                 f"not {v!r}")
        if not isinstance(self.log, bool):
            raise InputError(f"parameter {self.name!r}: log must be true or false, "
                             f"not {self.log!r}")
        if not self.low < self.high:
            raise InputError(f"parameter {self.name!r}: low {self.low} must be below high "
                             f"{self.high}")
        if self.log and self.low <= 0:
            raise InputError(f"parameter {self.name!r}: a log-scaled range needs low > 0, "
                             f"not {self.low}")


@dataclass(frozen=True)
class Choice:
    """One of ``values``: numbers (ordered, e.g. GPU counts) or strings (categorical).

    >>> Choice("g", (0, 1, 2, 4, 8)).ordinal, Choice("opt", ("adam", "sgd")).ordinal
    (True, False)
    >>> Choice("g", (1, 1))
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: parameter 'g': values must be distinct, got (1, 1)
    """

    name: str
    values: tuple[Value, ...]

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.values, tuple) or not self.values:
            raise InputError(f"parameter {self.name!r}: values must be a non-empty list")
        for v in self.values:
            if not (is_real(v, finite=False) or isinstance(v, str)) or (
                    isinstance(v, float) and not math.isfinite(v)):
                raise InputError(f"parameter {self.name!r}: values must be finite numbers or "
                                 f"strings, not {v!r}")
            if isinstance(v, str) and any(c in v for c in "\n\r"):
                # a trials file keeps one trial a line: such a value could not be read back
                raise InputError(f"parameter {self.name!r}: value {v!r} holds a line break")
        keys = [str(v) if isinstance(v, str) else float(v) for v in self.values]
        if len(set(keys)) != len(keys):
            raise InputError(f"parameter {self.name!r}: values must be distinct, got "
                             f"{self.values!r}")
        if any(isinstance(v, str) for v in self.values) and any(
                str(v) in {str(w) for w in self.values if not isinstance(w, str)}
                for v in self.values if isinstance(v, str)):
            raise InputError(f"parameter {self.name!r}: a string value equals a number's "
                             "text, so trials files could not tell them apart")

    @property
    def ordinal(self) -> bool:
        """True when every value is a number (the GP sees their order and distance)."""
        return all(is_real(v, finite=False) for v in self.values)


Param: TypeAlias = Int | Float | Choice


@dataclass(frozen=True)
class Constraint:
    r"""A linear constraint :math:`\sum_i w_i x_i \le` ``max`` over numeric parameters.

    ``terms``: ``((name, weight), ...)``.

    >>> Constraint((("g0", 1.0), ("g1", 1.0)), 16).max
    16
    """

    terms: tuple[tuple[str, float], ...]
    max: float

    def __post_init__(self) -> None:
        if not isinstance(self.terms, tuple) or not self.terms:
            raise InputError("a constraint needs at least one parameter")
        for t in self.terms:
            if (not isinstance(t, tuple) or len(t) != 2 or not isinstance(t[0], str)
                    or not is_real(t[1])):
                raise InputError(f"constraint term {t!r} must be (parameter name, finite "
                                 "weight)")
        names = [n for n, _ in self.terms]
        if len(set(names)) != len(names):
            raise InputError(f"constraint names a parameter twice: {', '.join(names)}")
        if not is_real(self.max):
            raise InputError(f"constraint max must be a finite number, not {self.max!r}")


@dataclass(frozen=True, eq=False)
class Space:
    """An ordered search space: ``params`` and linear ``constraints`` over them.

    >>> Space((Int("a", 0, 3), Int("a", 0, 1)))
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: parameter 'a' appears twice
    >>> s = Space((Int("a", 0, 8), Int("b", 0, 8)), (Constraint((("a", 1), ("b", 1)), 8),))
    >>> s.feasible({"a": 4, "b": 4}), s.feasible({"a": 5, "b": 4})
    (True, False)
    """

    params: tuple[Param, ...]
    constraints: tuple[Constraint, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.params, tuple) or not self.params:
            raise InputError("a space needs at least one parameter")
        seen: set[str] = set()
        for p in self.params:
            if not isinstance(p, Int | Float | Choice):
                raise InputError(f"not a parameter: {p!r}")
            if p.name in seen:
                raise InputError(f"parameter {p.name!r} appears twice")
            if p.name in RESERVED:
                raise InputError(f"parameter {p.name!r}: the name is taken by a trials-file "
                                 "column")
            seen.add(p.name)
        by_name = {p.name: p for p in self.params}
        if not isinstance(self.constraints, tuple):
            raise InputError("constraints must be a tuple of Constraint")
        for c in self.constraints:
            if not isinstance(c, Constraint):
                raise InputError(f"not a constraint: {c!r}")
            for n, _ in c.terms:
                q = by_name.get(n)
                if q is None:
                    raise InputError(f"constraint names unknown parameter {n!r}")
                if (isinstance(q, Choice) and not q.ordinal) or (isinstance(q, Float) and q.log):
                    raise InputError(f"parameter {n!r}: constraints take int, linear float and "
                                     "numeric choice parameters only")

    # ------------------------------------------------------------------ shape
    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names in order."""
        return tuple(p.name for p in self.params)

    @property
    def dim(self) -> int:
        """Number of parameters (encoded columns)."""
        return len(self.params)

    @property
    def bounds(self) -> _FloatArray:
        """``(2, d)`` lower and upper bounds of the encoded columns."""
        lo, hi = [], []
        for p in self.params:
            if isinstance(p, Int):
                lo.append(float(p.low))
                hi.append(float(p.high))
            elif isinstance(p, Float):
                lo.append(math.log(p.low) if p.log else float(p.low))
                hi.append(math.log(p.high) if p.log else float(p.high))
            elif p.ordinal:
                vals = [float(v) for v in p.values]
                lo.append(min(vals))
                hi.append(max(vals))
            else:
                lo.append(0.0)
                hi.append(float(len(p.values) - 1))
        return np.array([lo, hi], dtype=np.float64)

    @property
    def categorical(self) -> tuple[int, ...]:
        """Columns of categorical (string) choices."""
        return tuple(i for i, p in enumerate(self.params)
                     if isinstance(p, Choice) and not p.ordinal)

    def discrete_values(self, most: int | None = None) -> dict[int, tuple[float, ...]]:
        """Encoded values of every non-float column (ints, ordinal and categorical choices);
        with ``most``, an integer or ordinal column of more values is left out unlisted (a
        wide integer would fill memory).

        >>> Space((Int("a", 1, 3), Choice("c", ("x", "y")))).discrete_values()
        {0: (1.0, 2.0, 3.0), 1: (0.0, 1.0)}
        >>> Space((Int("a", 1, 10**9), Choice("c", ("x", "y")))).discrete_values(most=1000)
        {1: (0.0, 1.0)}
        """
        out: dict[int, tuple[float, ...]] = {}
        for i, p in enumerate(self.params):
            if isinstance(p, Int):
                if most is not None and p.high - p.low + 1 > most:
                    continue
                out[i] = tuple(float(v) for v in range(p.low, p.high + 1))
            elif isinstance(p, Choice):
                if most is not None and p.ordinal and len(p.values) > most:
                    continue
                out[i] = (tuple(sorted(float(v) for v in p.values)) if p.ordinal
                          else tuple(float(k) for k in range(len(p.values))))
        return out

    def size(self) -> float:
        """Number of points when no parameter is a float (constraints ignored), else ``inf``.

        >>> Space((Int("a", 1, 3), Choice("c", ("x", "y")))).size()
        6.0
        """
        n = 1.0
        for p in self.params:
            if isinstance(p, Float):
                return math.inf
            n *= p.size if isinstance(p, Int) else len(p.values)
        return n

    # ------------------------------------------------------------------ points
    def check(self, point: Mapping[str, Any]) -> Point:
        """``point`` as a clean point of the space, or an :class:`InputError` naming the
        parameter that is missing, unknown or out of range (constraints are checked too).

        >>> s = Space((Int("a", 0, 3), Choice("c", ("x", "y"))))
        >>> s.check({"a": 2.0, "c": "y"})
        {'a': 2, 'c': 'y'}
        >>> s.check({"a": 4, "c": "y"})
        Traceback (most recent call last):
        ...
        interplace.errors.InputError: parameter 'a': 4 is outside [0, 3]
        """
        if not isinstance(point, Mapping):
            raise InputError(f"a point must be a mapping of parameter names to values, not "
                             f"{point!r}")
        extra = sorted(set(point) - set(self.names))
        if extra:
            raise InputError(f"unknown parameter {extra[0]!r} (the space has "
                             f"{', '.join(self.names)})")
        out: Point = {}
        for p in self.params:
            if p.name not in point:
                raise InputError(f"parameter {p.name!r} is missing")
            v = plain_number(point[p.name])
            if isinstance(p, Int):
                if not is_real(v) or not (isinstance(v, int) or float(v).is_integer()):
                    raise InputError(f"parameter {p.name!r}: {v!r} is not an integer")
                iv = int(v)
                if not p.low <= iv <= p.high:
                    raise InputError(f"parameter {p.name!r}: {iv} is outside [{p.low}, "
                                     f"{p.high}]")
                out[p.name] = iv
            elif isinstance(p, Float):
                if not is_real(v):
                    raise InputError(f"parameter {p.name!r}: {v!r} is not a finite number")
                if not p.low <= v <= p.high:
                    raise InputError(f"parameter {p.name!r}: {v!r} is outside [{p.low}, "
                                     f"{p.high}]")
                out[p.name] = float(v)
            else:
                out[p.name] = self._choice_value(p, v)
        if not self.feasible(out):
            raise InputError(f"point {out} breaks a constraint of the space")
        return out

    @staticmethod
    def _choice_value(p: Choice, v: object) -> Value:
        for w in p.values:
            if isinstance(w, str):
                if isinstance(v, str) and v == w:
                    return w
            elif is_real(v, finite=False) and float(v) == float(w):
                return w
        raise InputError(f"parameter {p.name!r}: {v!r} is not one of "
                         f"{', '.join(map(repr, p.values))}")

    def parse_text(self, name: str, text: str) -> Value:
        """The value of parameter ``name`` written as ``text`` (a trials-file cell).

        >>> Space((Choice("g", (0, 2, 4)),)).parse_text("g", "4")
        4
        """
        p = self.params[self.names.index(name)]
        v: Any = text
        if isinstance(p, Int | Float) or (isinstance(p, Choice) and p.ordinal):
            try:
                v = float(text)
            except ValueError:
                raise InputError(f"parameter {name!r}: {text!r} is not a number") from None
        elif isinstance(p, Choice) and not any(isinstance(w, str) and w == text
                                               for w in p.values):
            with contextlib.suppress(ValueError):
                v = float(text)
        return self.check_one(name, v)

    def check_one(self, name: str, v: object) -> Value:
        """One parameter's value, checked (constraints are not)."""
        p = self.params[self.names.index(name)]
        single = Space((p,))
        return single.check({name: v})[name]

    def feasible(self, point: Mapping[str, Any]) -> bool:
        """Whether ``point`` satisfies every constraint (its values are assumed in range)."""
        for c in self.constraints:
            total = math.fsum(float(w) * float(point[n]) for n, w in c.terms)
            if total > c.max + 1e-9 * max(1.0, abs(c.max)):
                return False
        return True

    def encode(self, point: Mapping[str, Any]) -> list[float]:
        """The encoded row of a (checked) point.

        >>> Space((Float("lr", 1.0, 100.0, log=True), Choice("c", ("x", "y")))).encode(
        ...     {"lr": 10.0, "c": "y"})
        [2.302585092994046, 1.0]
        """
        row = []
        for p in self.params:
            v = point[p.name]
            if isinstance(p, Float) and p.log:
                row.append(math.log(float(v)))
            elif isinstance(p, Choice) and not p.ordinal:
                row.append(float(p.values.index(v)))
            else:
                row.append(float(v))
        return row

    def decode(self, row: Sequence[float]) -> Point:
        """The point nearest the encoded ``row`` (see the module docstring); constraints are
        not checked."""
        if len(row) != self.dim:
            raise InputError(f"an encoded point needs {self.dim} columns, got {len(row)}")
        out: Point = {}
        for p, x in zip(self.params, row, strict=True):
            x = float(x)
            if not math.isfinite(x):
                raise InputError(f"parameter {p.name!r}: encoded value {x!r} is not finite")
            if isinstance(p, Int):
                out[p.name] = int(min(max(round(x), p.low), p.high))
            elif isinstance(p, Float):
                v = math.exp(x) if p.log else x
                out[p.name] = min(max(v, float(p.low)), float(p.high))
            elif p.ordinal:
                out[p.name] = min(p.values, key=lambda w: (abs(float(w) - x), float(w)))
            else:
                out[p.name] = p.values[int(min(max(round(x), 0), len(p.values) - 1))]
        return out

    def from_unit(self, u: Sequence[float]) -> Point:
        """The point at ``u`` in the unit cube, each parameter's values equally likely.

        >>> Space((Int("a", 0, 3), Choice("c", ("x", "y")))).from_unit([0.99, 0.2])
        {'a': 3, 'c': 'x'}
        """
        out: Point = {}
        for p, x in zip(self.params, u, strict=True):
            x = min(max(float(x), 0.0), 1.0)
            if isinstance(p, Int):
                out[p.name] = p.low + min(int(x * p.size), p.size - 1)
            elif isinstance(p, Float):
                if p.log:
                    lo, hi = math.log(p.low), math.log(p.high)
                    out[p.name] = min(max(math.exp(lo + x * (hi - lo)), p.low), p.high)
                else:
                    out[p.name] = min(p.low + x * (p.high - p.low), p.high)
            else:
                k = len(p.values)
                out[p.name] = p.values[min(int(x * k), k - 1)]
        return out

    def to_unit(self, point: Mapping[str, Any]) -> list[float]:
        """A unit-cube point that :meth:`from_unit` maps to ``point`` (a checked point).

        >>> s = Space((Int("a", 0, 3), Choice("c", ("x", "y"))))
        >>> s.from_unit(s.to_unit({"a": 2, "c": "y"}))
        {'a': 2, 'c': 'y'}
        """
        out: list[float] = []
        for p in self.params:
            v = point[p.name]
            if isinstance(p, Int):
                out.append((int(v) - p.low + 0.5) / p.size)
            elif isinstance(p, Float):
                lo, hi, x = ((math.log(p.low), math.log(p.high), math.log(float(v))) if p.log
                             else (p.low, p.high, float(v)))
                out.append(0.0 if hi == lo else (x - lo) / (hi - lo))
            else:
                out.append((p.values.index(v) + 0.5) / len(p.values))
        return out

    def key(self, point: Mapping[str, Any]) -> tuple[float, ...]:
        """A hashable identity of a point (its encoded row)."""
        return tuple(self.encode(point))

    def grid(self) -> Iterable[Point]:
        """Every feasible point of a space without float parameters, in lexicographic order."""
        axes: list[Sequence[Value]] = []
        for p in self.params:
            if isinstance(p, Float):
                raise InputError("a space with float parameters has no finite grid")
            axes.append(range(p.low, p.high + 1) if isinstance(p, Int) else p.values)
        for combo in itertools.product(*axes):
            pt: Point = dict(zip(self.names, combo, strict=True))
            if self.feasible(pt):
                yield pt

    def to_json(self) -> dict[str, Any]:
        """The space in the ``space.json`` format (:func:`parse_space` reads it back).

        >>> parse_space(Space((Int("a", 0, 3),)).to_json()).names
        ('a',)
        """
        params: list[dict[str, Any]] = []
        for p in self.params:
            if isinstance(p, Int):
                params.append({"name": p.name, "type": "int", "low": p.low, "high": p.high})
            elif isinstance(p, Float):
                d: dict[str, Any] = {"name": p.name, "type": "float", "low": p.low,
                                     "high": p.high}
                if p.log:
                    d["log"] = True
                params.append(d)
            else:
                params.append({"name": p.name, "type": "choice", "values": list(p.values)})
        out: dict[str, Any] = {"params": params}
        if self.constraints:
            out["constraints"] = [{"params": [n for n, _ in c.terms],
                                   "weights": [w for _, w in c.terms], "max": c.max}
                                  for c in self.constraints]
        return out


_PARAM_KEYS = {"int": {"name", "type", "low", "high"},
               "float": {"name", "type", "low", "high", "log"},
               "choice": {"name", "type", "values"}}


def parse_space(obj: Any) -> Space:
    """A :class:`Space` from its JSON form; every error is one line naming the parameter.

    ``{"params": [{"name", "type": "int", "low", "high"}, {"name", "type": "float", "low",
    "high", "log"?}, {"name", "type": "choice", "values": [...]}], "constraints"?: [{"params":
    [names], "weights"?: [numbers, default 1], "max": number}]}``.

    >>> parse_space({"params": [{"name": "g0", "type": "choice", "values": [0, 1, 2, 4, 8]},
    ...     {"name": "mps_pct", "type": "int", "low": 10, "high": 90},
    ...     {"name": "x", "type": "float", "low": 0.0, "high": 1.0}]}).names
    ('g0', 'mps_pct', 'x')
    >>> parse_space({"params": [{"name": "n", "type": "int", "low": 1}]})
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: parameter 'n': missing 'high'
    """
    if not isinstance(obj, dict):
        raise InputError("a space must be a JSON object with a 'params' list")
    unknown = sorted(set(obj) - {"params", "constraints"})
    if unknown:
        raise InputError(f"unknown space key {unknown[0]!r} (keys: params, constraints)")
    items = obj.get("params")
    if not isinstance(items, list) or not items:
        raise InputError("a space needs a non-empty 'params' list")
    params: list[Param] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(f"parameter #{i + 1} must be a JSON object, not {item!r}")
        name: Any = item.get("name")
        label = repr(name) if isinstance(name, str) else f"#{i + 1}"
        if "name" not in item:
            raise InputError(f"parameter {label}: missing 'name'")
        kind = item.get("type")
        if kind not in _PARAM_KEYS:
            raise InputError(f"parameter {label}: type must be 'int', 'float' or 'choice', "
                             f"not {kind!r}")
        extra = sorted(set(item) - _PARAM_KEYS[kind])
        if extra:
            raise InputError(f"parameter {label}: unknown key {extra[0]!r} for type {kind!r}")
        need = ("values",) if kind == "choice" else ("low", "high")
        for k in need:
            if k not in item:
                raise InputError(f"parameter {label}: missing {k!r}")
        try:
            if kind == "int":
                low, high = item["low"], item["high"]
                for k, v in (("low", low), ("high", high)):
                    if not is_real(v) or float(v) != int(v):
                        raise InputError(f"parameter {label}: {k} must be an integer, not {v!r}")
                params.append(Int(name, int(low), int(high)))
            elif kind == "float":
                params.append(Float(name, item["low"], item["high"], item.get("log", False)))
            else:
                vals = item["values"]
                if not isinstance(vals, list):
                    raise InputError(f"parameter {label}: values must be a list")
                params.append(Choice(name, tuple(vals)))
        except InputError as exc:
            msg = str(exc)
            raise InputError(msg if msg.startswith("parameter") else
                             f"parameter {label}: {msg}") from None
    names = {p.name for p in params}
    cons: list[Constraint] = []
    raw = obj.get("constraints", [])
    if not isinstance(raw, list):
        raise InputError("'constraints' must be a list")
    for j, c in enumerate(raw):
        where = f"constraint #{j + 1}"
        if not isinstance(c, dict) or set(c) - {"params", "weights", "max"}:
            raise InputError(f"{where} must be an object with params, weights (optional), max")
        pn, mx = c.get("params"), c.get("max")
        if not isinstance(pn, list) or not pn or not all(isinstance(n, str) for n in pn):
            raise InputError(f"{where}: 'params' must be a non-empty list of parameter names")
        for n in pn:
            if n not in names:
                raise InputError(f"{where}: unknown parameter {n!r}")
        ws = c.get("weights", [1.0] * len(pn))
        if not isinstance(ws, list) or len(ws) != len(pn):
            raise InputError(f"{where}: 'weights' must list one number per parameter")
        try:
            cons.append(Constraint(tuple(zip(pn, ws, strict=True)), mx))  # type: ignore[arg-type]
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    return Space(tuple(params), tuple(cons))


def load_space(path: str | os.PathLike[str]) -> Space:
    """:func:`parse_space` of the JSON file ``path`` (errors name the file)."""
    obj = read_json(path, "space")
    try:
        return parse_space(obj)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
