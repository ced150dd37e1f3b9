"""Reference PyTorch workloads for co-location profiling, and the progress protocol they speak.

Each built-in is a module run as
``python -m interplace.collectors.workloads.<name> --device cpu|cuda --seconds S [--size N]``:

=================  ===============================================================  ==========
name               what it stresses                                                 unit
=================  ===============================================================  ==========
``gemm``           tensor cores: fp16 (bf16 where supported) N x N matmul on CUDA,  flop
                   float32 on CPU
``memcpy``         device-memory bandwidth: copy of an N MiB buffer                 bytes
``h2d``            PCIe host->device: pinned N MiB buffer copied to the device      bytes
                   (on CPU a host memcpy stands in, and says so on stderr)
``d2h``            PCIe device->host into a pinned buffer (host memcpy on CPU)      bytes
``launch``         kernel-launch overhead: a loop of tiny in-place adds             kernels
``cnn``            a small CNN training step on a batch of N 32x32 images           samples
``transformer``    a small transformer-encoder training step on N sequences         samples
``cpu_pipeline``   a CPU preprocessing pipeline (crop, flip, normalise) feeding a   samples
                   small model on the device, batches of N
=================  ===============================================================  ==========

The progress protocol
---------------------
Any program (your own training job too) can be profiled by
:func:`interplace.collectors.profile.profile` if it writes these lines to **stdout**, each
flushed at once:

1. ``INTERPLACE_UNIT <name>`` once, when set-up is done (model built, memory allocated), e.g.
   ``INTERPLACE_UNIT samples``. Throughput is reported in ``<name>`` per second.
2. If the environment variable ``INTERPLACE_WAIT_GO`` is ``1``, read one line (``GO``) from
   stdin before starting the timed work: the profiler releases co-runners together this way.
   A job that ignores this simply starts at once (the warm-up window absorbs the difference).
3. ``INTERPLACE_PROGRESS <t> <units>`` at least every 0.2 s while working, where ``<t>`` is
   ``time.monotonic()`` (CLOCK_MONOTONIC, shared by all processes of the machine) and
   ``<units>`` the total units done since the start (non-decreasing). On a GPU, synchronise
   (``torch.cuda.synchronize()``) before taking ``<t>`` so the units counted are finished.

Other stdout lines are ignored. A job may run until it is stopped (``SIGTERM``) once the
measurement window has passed; the profiler substitutes ``{device}`` and ``{seconds}`` in a
user command with the device and the seconds it needs the job to run.

>>> from interplace.collectors.workloads import BUILTINS
>>> sorted(BUILTINS)[:3]
['cnn', 'cpu_pipeline', 'd2h']
"""

from __future__ import annotations

__all__ = ["BUILTINS", "PROGRESS_TAG", "UNIT_TAG", "WAIT_GO_ENV"]

BUILTINS: tuple[str, ...] = (
    "gemm", "memcpy", "h2d", "d2h", "launch", "cnn", "transformer", "cpu_pipeline",
)
"""The names of the built-in workloads (modules of this package)."""

UNIT_TAG = "INTERPLACE_UNIT"
PROGRESS_TAG = "INTERPLACE_PROGRESS"
WAIT_GO_ENV = "INTERPLACE_WAIT_GO"
