"""GPU counters read live through NVML, or replayed from a recording, one reading per call.

A :class:`GpuCounterBackend` has devices ``0..device_count()-1``, each with a device id for the
long table (:meth:`~GpuCounterBackend.device_id`, ``"0"``, ``"1"``, ... for GPUs), and
:meth:`~GpuCounterBackend.read` returns one reading of a device: canonical metric name ->
value (see :data:`interplace.collectors.table.CANONICAL_METRICS` for the units). A metric a
device cannot give is left out of the reading and listed in
:attr:`~GpuCounterBackend.unsupported` as ``(device id, metric)``. A device that cannot be read
at all this time (a GPU that fell off the bus) raises :class:`DeviceLost`, and a recording that
has nothing more to give raises :class:`EndOfRecording`.

:class:`PynvmlSampler` reads, per GPU and sample:

=========================================  =====================================================
metric                                     NVML call
=========================================  =====================================================
``gpu_util_pct``, ``mem_util_pct``         ``nvmlDeviceGetUtilizationRates``
``fb_used_bytes``                          ``nvmlDeviceGetMemoryInfo().used``
``sm_clock_mhz``, ``mem_clock_mhz``        ``nvmlDeviceGetClockInfo`` (``NVML_CLOCK_SM`` / ``_MEM``)
``power_mw``                               ``nvmlDeviceGetPowerUsage``
``temp_c``                                 ``nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)``
``pcie_tx_bytes_total``, ``_rx_``          ``nvmlDeviceGetFieldValues`` with
                                           ``NVML_FI_DEV_PCIE_COUNT_TX_BYTES`` / ``RX_BYTES``
``pcie_tx_kbps``, ``pcie_rx_kbps``         rate of the two byte counters above between two
                                           reads, from the field values' own microsecond
                                           timestamps; where those fields are unsupported,
                                           ``nvmlDeviceGetPcieThroughput`` (~20 ms a call)
``nvlink_tx_kbps``, ``nvlink_rx_kbps``     rate of ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`` /
                                           ``RX`` (KiB over all links) between two reads, from
                                           the field values' own microsecond timestamps
=========================================  =====================================================

Each call is made on its own: an ``NVMLError`` from one call marks its metrics unsupported for
that GPU, and the call is not tried again. ``NVML_ERROR_GPU_IS_LOST`` (or a GPU whose handle
cannot be had) raises :class:`DeviceLost` for that read instead. NVLink and PCIe rates appear
from the second read of a GPU on (the ``nvmlDeviceGetPcieThroughput`` fallback too).

A rate from a cumulative counter :math:`C` read at field timestamps :math:`t_{k-1} < t_k` is

.. math:: r_k = \\frac{C_k - C_{k-1}}{t_k - t_{k-1}}

converted to KB/s (1 KB = 1000 bytes: bytes / 1000, KiB x 1.024). A counter that went down
(it wrapped or was reset) or a timestamp that did not advance gives no rate for that read; the
next read is measured from this one. PCIe totals are emitted on every read, rates or not.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from interplace.errors import InputError, is_real, parse_json, read_json

__all__ = [
    "DeviceLost",
    "EndOfRecording",
    "GpuCounterBackend",
    "PynvmlSampler",
    "ReplayGpuBackend",
]

_REPLAY_FORMAT = "interplace-gpu-counters"
_REPLAY_VERSION = 1
_ALL_LINKS = 0xFFFFFFFF  # scopeId that sums an NVLink field over every link
_KIB_TO_KB = 1024.0 / 1000.0
_BYTES_TO_KB = 1.0 / 1000.0


class DeviceLost(Exception):
    """A whole device could not be read this time (e.g. NVML's "GPU is lost")."""


class EndOfRecording(Exception):
    """A replayed recording has no reading left for the device asked for."""


@runtime_checkable
class GpuCounterBackend(Protocol):
    """Counter readings per device index ``0..device_count()-1``."""

    def device_count(self) -> int:
        """Number of devices."""
        ...

    def device_id(self, index: int) -> str:
        """The ``device`` column value of device ``index`` (``str(index)`` for a GPU)."""
        ...

    def read(self, index: int) -> dict[str, float]:
        """One reading of device ``index``: canonical metric -> value."""
        ...

    @property
    def unsupported(self) -> frozenset[tuple[str, str]]:
        """``(device id, metric)`` pairs found unsupported so far."""
        ...


def _field_number(fv: Any, nv: Any) -> float:
    """The value of an ``nvmlFieldValue_t`` as a float, by its ``valueType``."""
    attr = {
        int(getattr(nv, "NVML_VALUE_TYPE_DOUBLE", 0)): "dVal",
        int(getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_INT", 1)): "uiVal",
        int(getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_LONG", 2)): "ulVal",
        int(getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3)): "ullVal",
        int(getattr(nv, "NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4)): "sllVal",
        int(getattr(nv, "NVML_VALUE_TYPE_SIGNED_INT", 5)): "siVal",
        int(getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6)): "usVal",
    }.get(int(fv.valueType), "ullVal")
    return float(getattr(fv.value, attr))


def _rate(now: tuple[float, float], before: tuple[float, float], scale: float) -> float | None:
    """``scale * dC / dt`` between two ``(value, timestamp s)`` reads of a cumulative counter.

    ``None`` when the counter went down (wrapped or reset) or the time did not advance.

    >>> _rate((3_000_000.0, 10.5), (1_000_000.0, 10.0), 1 / 1000)  # 2e6 B in 0.5 s, in KB/s
    4000.0
    >>> _rate((5.0, 11.0), (9.0, 10.0), 1.0) is None  # wrapped
    True
    """
    dc, dt = now[0] - before[0], now[1] - before[1]
    if dc < 0 or not dt > 0:
        return None
    return dc * scale / dt


_Read = tuple[float, float]


def _tx_rx_rates(
    names: tuple[str, str], now: tuple[_Read, _Read], before: tuple[_Read, _Read] | None,
    scale: float,
) -> dict[str, float]:
    """:func:`_rate` of a (tx, rx) pair of counters, each direction dropped on its own.

    >>> _tx_rx_rates(("tx", "rx"), ((4.0, 2.0), (1.0, 2.0)), ((2.0, 1.0), (3.0, 1.0)), 1.0)
    {'tx': 2.0}
    """
    if before is None:
        return {}
    out = {}
    for name, a, b in zip(names, now, before, strict=True):
        rate = _rate(a, b, scale)
        if rate is not None:
            out[name] = rate
    return out


class _FieldUnsupported(Exception):
    """A field value came back with a non-success ``nvmlReturn``."""


class PynvmlSampler:
    """Live GPU counters through NVML (``pynvml``); use it as a context manager.

    ``with PynvmlSampler() as gpus:`` initialises NVML and shuts it down on exit. A missing
    library or driver raises :class:`InputError` ``"NVML is not available: <reason>"``.
    ``nvml`` replaces the ``pynvml`` module (an object with the same functions and constants);
    left out, ``pynvml`` is imported.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._module: Any = nvml
        self._nv: Any = None
        self._handles: dict[int, Any] = {}
        self._unsupported: dict[int, set[str]] = {}
        self._nvlink_last: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {}
        self._pcie_last: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {}

    def __enter__(self) -> PynvmlSampler:
        if self._nv is not None:
            return self
        nv: Any = self._module
        if nv is None:
            try:
                import pynvml
            except ImportError as exc:
                raise InputError(f"NVML is not available: {exc}") from None
            nv = pynvml
        try:
            nv.nvmlInit()
        except (nv.NVMLError, OSError) as exc:
            raise InputError(f"NVML is not available: {exc}") from None
        self._nv = nv
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        nv, self._nv = self._nv, None
        self._handles.clear()
        self._nvlink_last.clear()
        self._pcie_last.clear()
        if nv is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()

    def _live(self) -> Any:
        if self._nv is None:
            raise InputError("NVML is not initialised: use PynvmlSampler in a 'with' block")
        return self._nv

    def device_count(self) -> int:
        """Number of GPUs NVML sees."""
        nv = self._live()
        try:
            return int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            raise InputError(f"NVML nvmlDeviceGetCount failed: {exc}") from None

    def device_id(self, index: int) -> str:
        """``str(index)``: GPUs are named by their NVML index."""
        return str(index)

    @property
    def unsupported(self) -> frozenset[tuple[str, str]]:
        """``(GPU index, metric)`` pairs whose NVML call failed once and is no longer made."""
        return frozenset((str(i), m) for i, ms in self._unsupported.items() for m in ms)

    def _lost(self, exc: Exception) -> bool:
        return getattr(exc, "value", None) == getattr(self._nv, "NVML_ERROR_GPU_IS_LOST", 15)

    def _handle(self, index: int) -> Any:
        nv = self._live()
        if index not in self._handles:
            try:
                self._handles[index] = nv.nvmlDeviceGetHandleByIndex(index)
            except nv.NVMLError as exc:
                raise DeviceLost(f"GPU {index}: {exc}") from None
        return self._handles[index]

    def _fields(self, h: Any, ids: list[tuple[int, int]]) -> list[tuple[float, float]]:
        """``(value, timestamp in s)`` of each field; one failed field fails them all."""
        nv = self._nv
        values = nv.nvmlDeviceGetFieldValues(h, ids)
        ok = int(getattr(nv, "NVML_SUCCESS", 0))
        out: list[tuple[float, float]] = []
        for fv in values:
            if int(fv.nvmlReturn) != ok:
                raise _FieldUnsupported(f"field {fv.fieldId}: return {fv.nvmlReturn}")
            out.append((_field_number(fv, nv), float(fv.timestamp) / 1e6))
        return out

    def _groups(self, index: int,
                h: Any) -> list[tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """``(metrics, read)`` per NVML call; a failed call marks ``metrics`` unsupported.

        ``read()`` gives ``metrics`` and, for the PCIe byte counters, their rates as well.
        """
        nv = self._nv

        def util() -> dict[str, float]:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            return {"gpu_util_pct": float(u.gpu), "mem_util_pct": float(u.memory)}

        def pcie_counts() -> dict[str, float]:
            tx, rx = self._fields(h, [(nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
                                      (nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)])
            last = self._pcie_last.get(index)
            self._pcie_last[index] = (tx, rx)
            return {"pcie_tx_bytes_total": tx[0], "pcie_rx_bytes_total": rx[0],
                    **_tx_rx_rates(("pcie_tx_kbps", "pcie_rx_kbps"), (tx, rx), last,
                                   _BYTES_TO_KB)}

        def pcie_rate() -> dict[str, float]:
            tx = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)
            rx = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)
            return {"pcie_tx_kbps": float(tx), "pcie_rx_kbps": float(rx)}

        def nvlink() -> dict[str, float]:
            tx, rx = self._fields(h, [(nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _ALL_LINKS),
                                      (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, _ALL_LINKS)])
            last = self._nvlink_last.get(index)
            self._nvlink_last[index] = (tx, rx)
            return _tx_rx_rates(("nvlink_tx_kbps", "nvlink_rx_kbps"), (tx, rx), last, _KIB_TO_KB)

        def one(metric: str, fn: Callable[[], Any]) -> Callable[[], dict[str, float]]:
            return lambda: {metric: float(fn())}

        pcie_rate_metrics: tuple[str, ...] = ()
        if {"pcie_tx_bytes_total", "pcie_rx_bytes_total"} <= self._unsupported.get(index, set()):
            pcie_rate_metrics = ("pcie_tx_kbps", "pcie_rx_kbps")
        groups: list[tuple[tuple[str, ...], Callable[[], dict[str, float]]]] = [
            (("gpu_util_pct", "mem_util_pct"), util),
            (("fb_used_bytes",), one("fb_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).used)),
            (("sm_clock_mhz",),
             one("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            (("mem_clock_mhz",),
             one("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))),
            (("power_mw",), one("power_mw", lambda: nv.nvmlDeviceGetPowerUsage(h))),
            (("temp_c",),
             one("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            (("pcie_tx_bytes_total", "pcie_rx_bytes_total"), pcie_counts),
        ]
        if pcie_rate_metrics:
            groups.append((pcie_rate_metrics, pcie_rate))
        groups.append((("nvlink_tx_kbps", "nvlink_rx_kbps"), nvlink))
        return groups

    def read(self, index: int) -> dict[str, float]:
        """One reading of GPU ``index``; raises :class:`DeviceLost` if the GPU is gone."""
        nv = self._live()
        h = self._handle(index)
        bad = self._unsupported.setdefault(index, set())
        out: dict[str, float] = {}
        for metrics, fn in self._groups(index, h):
            if bad.issuperset(metrics):
                continue
            try:
                values = fn()
            except nv.NVMLError as exc:
                if self._lost(exc):
                    self._handles.pop(index, None)
                    raise DeviceLost(f"GPU {index}: {exc}") from None
                bad.update(metrics)
                continue
            except (_FieldUnsupported, AttributeError):
                bad.update(metrics)  # a field or function this driver / pynvml lacks
                continue
            out.update(values)
        return out


class ReplayGpuBackend:
    """Recorded GPU readings served one per :meth:`read` call, per device.

    The document is ``{"format": "interplace-gpu-counters", "version": 1, "devices":
    [[reading, ...], ...], "unsupported": [[device index, metric], ...]}`` (``format``,
    ``version`` and ``unsupported`` optional): one list of readings per device, a reading being
    ``{metric: number}`` or ``null`` for a read where the device was lost (it raises
    :class:`DeviceLost`). Reading device ``i`` past its last reading raises
    :class:`EndOfRecording`. :meth:`record` captures such a document from any backend.

    >>> rb = ReplayGpuBackend({"devices": [[{"temp_c": 40}, None, {"temp_c": 42}]]})
    >>> rb.device_count(), rb.device_id(0), rb.read(0)
    (1, '0', {'temp_c': 40.0})
    >>> rb.read(0)
    Traceback (most recent call last):
    ...
    interplace.collectors.nvml.DeviceLost: recorded GPU 0 was lost at reading 1
    >>> rb.read(0), rb.remaining(0)
    ({'temp_c': 42.0}, 0)
    """

    def __init__(self, data: Mapping[str, Any], what: str = "GPU counter recording") -> None:
        self.what = what
        if not isinstance(data, Mapping):
            raise InputError(f"malformed {what}: expected a JSON object")
        if data.get("format", _REPLAY_FORMAT) != _REPLAY_FORMAT:
            raise InputError(f"malformed {what}: format is {data.get('format')!r}, "
                             f"expected {_REPLAY_FORMAT!r}")
        version = data.get("version", _REPLAY_VERSION)
        if version != _REPLAY_VERSION:
            raise InputError(f"unsupported {what}: version {version!r} (this release reads 1)")
        devices = data.get("devices")
        if not isinstance(devices, list):
            raise InputError(f"malformed {what}: 'devices' must be a list")
        self._readings: list[list[dict[str, float] | None]] = []
        for i, dev in enumerate(devices):
            if not isinstance(dev, list):
                raise InputError(f"malformed {what}: devices[{i}] must be a list of readings")
            self._readings.append([self._reading(r, f"devices[{i}][{j}]")
                                   for j, r in enumerate(dev)])
        unsupported = data.get("unsupported", [])
        if not isinstance(unsupported, list):
            raise InputError(f"malformed {what}: 'unsupported' must be a list")
        self._unsupported: set[tuple[str, str]] = set()
        for k, pair in enumerate(unsupported):
            ok = (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)
                  and isinstance(pair[0], int) and not isinstance(pair[0], bool)
                  and 0 <= pair[0] < len(devices))
            if not ok:
                raise InputError(f"malformed {what}: unsupported[{k}] must be "
                                 f"[device index, metric name]")
            self._unsupported.add((str(pair[0]), pair[1]))
        self._next = [0] * len(self._readings)

    def _reading(self, r: Any, where: str) -> dict[str, float] | None:
        if r is None:
            return None
        if not isinstance(r, Mapping):
            raise InputError(f"malformed {self.what}: {where} must be an object or null")
        out: dict[str, float] = {}
        for k, v in r.items():
            if not is_real(v):
                raise InputError(f"malformed {self.what}: {where}.{k} must be a finite number")
            out[str(k)] = float(v)
        return out

    @classmethod
    def from_json(cls, text: str | bytes, what: str = "GPU counter recording") -> ReplayGpuBackend:
        """Parse a JSON document."""
        return cls(parse_json(text, what), what=what)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ReplayGpuBackend:
        """Load a recording written from :meth:`record`."""
        what = "GPU counter recording"
        return cls(read_json(path, what), what=f"{what} {path}")

    @staticmethod
    def record(backend: GpuCounterBackend, samples: int) -> dict[str, Any]:
        """``samples`` readings of every device of ``backend`` as a JSON-ready document.

        A device lost during a read is recorded as ``null``. No pause is made between reads;
        call it from a loop of your own for readings spaced in time.

        >>> src = ReplayGpuBackend({"devices": [[{"power_mw": 1e5}, {"power_mw": 2e5}]]})
        >>> ReplayGpuBackend.record(src, 2)["devices"]
        [[{'power_mw': 100000.0}, {'power_mw': 200000.0}]]
        """
        if samples < 0:
            raise InputError(f"samples must be >= 0, got {samples}")
        n = backend.device_count()
        devices: list[list[dict[str, float] | None]] = [[] for _ in range(n)]
        for _ in range(samples):
            for i in range(n):
                try:
                    devices[i].append(dict(backend.read(i)))
                except DeviceLost:
                    devices[i].append(None)
        index = {backend.device_id(i): i for i in range(n)}
        unsupported = sorted([index[d], m] for d, m in backend.unsupported if d in index)
        return {"format": _REPLAY_FORMAT, "version": _REPLAY_VERSION, "devices": devices,
                "unsupported": unsupported}

    def device_count(self) -> int:
        """Number of recorded devices."""
        return len(self._readings)

    def device_id(self, index: int) -> str:
        """``str(index)``."""
        return str(index)

    def remaining(self, index: int) -> int:
        """Readings of device ``index`` not yet served."""
        return len(self._readings[index]) - self._next[index]

    @property
    def unsupported(self) -> frozenset[tuple[str, str]]:
        """The recorded unsupported ``(device id, metric)`` pairs."""
        return frozenset(self._unsupported)

    def read(self, index: int) -> dict[str, float]:
        """The next recorded reading of device ``index``."""
        if not 0 <= index < len(self._readings):
            raise InputError(f"{self.what} has no GPU {index} ({len(self._readings)} recorded)")
        j = self._next[index]
        if j >= len(self._readings[index]):
            raise EndOfRecording(f"{self.what}: GPU {index} has no reading {j}")
        self._next[index] = j + 1
        r = self._readings[index][j]
        if r is None:
            raise DeviceLost(f"recorded GPU {index} was lost at reading {j}")
        return dict(r)
