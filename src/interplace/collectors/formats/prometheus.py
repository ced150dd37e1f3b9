"""Parse the Prometheus text exposition of dcgm-exporter (``curl host:9400/metrics``).

The input format
----------------
``# HELP`` / ``# TYPE`` comment lines and one sample per line, ``name{labels} value
[timestamp_ms]``::

    # HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
    # TYPE DCGM_FI_DEV_GPU_UTIL gauge
    DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-...",device="nvidia0",Hostname="node1"} 45

Several scrapes may be concatenated in one file: a new scrape starts when a ``# HELP`` line
repeats a metric already described in the current scrape, or when a sample repeats a series
(name and labels) already seen in it. Label values may use the ``\\"``, ``\\\\`` and ``\\n``
escapes. Summary and histogram series (labels ``quantile`` / ``le``) are skipped.

Mapping
-------
``DCGM_FI_DEV_GPU_UTIL`` -> ``gpu_util_pct``, ``DCGM_FI_DEV_MEM_COPY_UTIL`` -> ``mem_util_pct``,
``DCGM_FI_DEV_FB_USED`` (MiB, x 1048576) -> ``fb_used_bytes``, ``DCGM_FI_DEV_SM_CLOCK`` ->
``sm_clock_mhz``, ``DCGM_FI_DEV_MEM_CLOCK`` -> ``mem_clock_mhz``, ``DCGM_FI_DEV_POWER_USAGE``
(W, x 1000) -> ``power_mw``, ``DCGM_FI_DEV_GPU_TEMP`` -> ``temp_c``,
``DCGM_FI_PROF_PCIE_{TX,RX}_BYTES`` (bytes/s, / 1000) -> ``pcie_{tx,rx}_kbps``,
``DCGM_FI_DEV_PCIE_{TX,RX}_THROUGHPUT`` (NVML's PCIe throughput, KB/s) -> ``pcie_{tx,rx}_kbps``,
``DCGM_FI_PROF_NVLINK_{TX,RX}_BYTES`` (bytes/s, / 1000) -> ``nvlink_{tx,rx}_kbps``. When a file
has both the ``PROF`` and the ``DEV`` PCIe field, the ``PROF`` one (DCGM's profiling counter)
gets the canonical name and the ``DEV`` one keeps its own. Every other metric keeps its
original name unchanged (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``), in DCGM's unit.

A value that is NaN is a missing sample; an infinite value or one of DCGM's "blank" sentinels
(integers from 0x7ffffffffffffff0 up, floats 2^47 to 2^47 + 15: field not supported / not
found / no permission) is skipped and its metric listed in ``df.attrs["unsupported"]``.

Host, device, time: ``host`` is the ``Hostname`` label, else the ``host`` argument. ``device`` is
the ``gpu`` label (``"<gpu>/mig<GPU_I_ID>"`` for a MIG instance, ``"<gpu>/nvlink<n>"`` for one
link's series), else ``"nvswitch<n>"`` or ``"cpu<n>"`` from those labels, ``"host"`` for a
series with none of them. When every sample has a timestamp, ``t_s`` = (timestamp - earliest
timestamp) / 1000; when none has, ``t_s`` = scrape index x ``interval_s`` (default 1 s); a mix
raises. ``t_s`` starts at 0.

>>> df = parse('# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\\n'
...            '# TYPE DCGM_FI_DEV_FB_USED gauge\\n'
...            'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="node1"} 1234\\n'
...            '# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\\n'
...            'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="node1"} 1235\\n')
>>> list(df.itertuples(index=False, name=None))  # doctest: +NORMALIZE_WHITESPACE
[(0.0, 'node1', '0', 'fb_used_bytes', 1293942784.0),
 (1.0, 'node1', '0', 'fb_used_bytes', 1294991360.0)]
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from interplace.collectors.formats._common import lines, samples_frame
from interplace.errors import InputError

__all__ = ["parse", "sniff"]

# exposition name -> (canonical metric, factor)
_CANONICAL: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", 1048576.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_mw", 1000.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_kbps", 0.001),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_kbps", 0.001),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("pcie_tx_kbps", 1.0),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("pcie_rx_kbps", 1.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_kbps", 0.001),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_kbps", 0.001),
}
# the lower-priority source of a canonical metric, used only when the other is absent
_FALLBACK = {
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "DCGM_FI_PROF_PCIE_RX_BYTES",
}
_INT64_BLANK = float(0x7FFFFFFFFFFFFFF0)
_FP64_BLANK = 140737488355328.0  # 2^47

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})\s*(?:\{{(.*)\}})?\s+(\S+)(?:\s+(-?\d+))?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_HELP = re.compile(rf"^#\s*(HELP|TYPE)\s+({_NAME})")
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _device(labels: dict[str, str]) -> str:
    """The ``device`` of a series from its labels (module docstring).

    >>> _device({"gpu": "0", "GPU_I_ID": "1"}), _device({"gpu": "1", "nvlink": "3"})
    ('0/mig1', '1/nvlink3')
    >>> _device({"nvswitch": "2"}), _device({"cpu": "0"}), _device({"Hostname": "n1"})
    ('nvswitch2', 'cpu0', 'host')
    """
    gpu = labels.get("gpu", "")
    if gpu:
        for label, part in (("GPU_I_ID", "mig"), ("nvlink", "nvlink")):
            if labels.get(label, ""):
                return f"{gpu}/{part}{labels[label]}"
        return gpu
    for label in ("nvswitch", "cpu"):
        if labels.get(label, ""):
            return f"{label}{labels[label]}"
    return "host"


def _labels(body: str | None, line_no: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    body = body or ""
    while pos < len(body.rstrip()):
        m = _LABEL.match(body, pos)
        if m is None:
            raise InputError(f"line {line_no}: malformed labels near {body[pos : pos + 30]!r}")
        out[m.group(1)] = re.sub(r"\\.", lambda e: _UNESCAPE.get(e.group(0), e.group(0)),
                                 m.group(2))  # fmt: skip
        pos = m.end()
    return out


def _value(token: str, line_no: int) -> float:
    try:
        return float(token)
    except ValueError as e:
        raise InputError(f"line {line_no}: sample value {token!r} is not a number") from e


def sniff(text: str) -> bool:
    """True when the text starts with ``# HELP`` / ``# TYPE`` or a ``name{labels} value`` sample.

    >>> sniff('# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\\n')
    True
    >>> sniff('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\\n'), sniff("1.001,123,,cycles,1000,100.00,,\\n")
    (True, False)
    """
    for _, line in lines(text):
        if line.startswith("#"):
            if _HELP.match(line):
                return True
            continue
        m = _SAMPLE.match(line)
        if m is None:
            return False
        try:
            float(m.group(3))
        except ValueError:
            return False
        return True
    return False


def _is_blank(v: float) -> bool:
    return v >= _INT64_BLANK or _FP64_BLANK <= v < _FP64_BLANK + 16


def parse(text: str, host: str = "localhost", *, interval_s: float = 1.0) -> pd.DataFrame:
    """Parse dcgm-exporter's Prometheus text into the long sample table (see the module doc).

    ``interval_s`` is the scrape interval, used only when the samples carry no timestamps.
    """
    if not (interval_s > 0 and math.isfinite(interval_s)):
        raise InputError(f"interval_s must be a positive number of seconds, got {interval_s}")
    scrape = 0
    helped: set[str] = set()
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    stamps: list[float] = []  # per kept sample: ms timestamp or NaN
    scrapes: list[int] = []
    hosts: list[str] = []
    device: list[str] = []
    source: list[str] = []
    value: list[float] = []
    unsupported: set[str] = set()
    n_stamped = n_unstamped = 0
    for line_no, line in lines(text):
        if line.startswith("#"):
            m = _HELP.match(line)
            if m is not None and m.group(1) == "HELP":
                if m.group(2) in helped:
                    scrape, helped, series = scrape + 1, set(), set()
                helped.add(m.group(2))
            continue
        sm = _SAMPLE.match(line)
        if sm is None:
            raise InputError(f"line {line_no}: not a Prometheus sample: {line[:60]!r}")
        name, labels = sm.group(1), _labels(sm.group(2), line_no)
        key = (name, tuple(sorted(labels.items())))
        if key in series:
            scrape, helped, series = scrape + 1, set(), set()
        series.add(key)
        if sm.group(4) is None:
            n_unstamped += 1
        else:
            n_stamped += 1
        if n_stamped and n_unstamped:
            raise InputError(f"line {line_no}: some samples have timestamps and others not")
        if "quantile" in labels or "le" in labels:
            continue
        v = _value(sm.group(3), line_no)
        canon = _CANONICAL.get(name)
        if math.isnan(v):
            continue
        if math.isinf(v) or _is_blank(v):
            unsupported.add(name)
            continue
        dev = _device(labels)
        stamps.append(float(sm.group(4)) if sm.group(4) is not None else math.nan)
        scrapes.append(scrape)
        hosts.append(labels.get("Hostname") or host)
        device.append(dev)
        source.append(name)
        value.append(v * canon[1] if canon else v)
    present = set(source)
    metric = [
        name if name not in _CANONICAL or _FALLBACK.get(name) in present else _CANONICAL[name][0]
        for name in source
    ]
    # A blank field is listed by the metric it would give, or by its own name where that
    # metric has readings from another field (a blank DEV PCIe field beside a PROF one).
    unsupported = {
        name if name not in _CANONICAL or _CANONICAL[name][0] in metric else _CANONICAL[name][0]
        for name in unsupported
    }
    if n_stamped:
        ms = np.asarray(stamps, dtype=np.float64)
        t = (ms - ms.min()) / 1000.0 if len(ms) else ms
    else:
        t = np.asarray(scrapes, dtype=np.float64) * interval_s
        t = t - t.min() if len(t) else t
    return samples_frame(
        "Prometheus exposition", t, hosts, device, metric, value, unsupported=unsupported
    )
