"""The portable kernel mode (``kernels: portable`` in a grid; docs/reproducibility.md): CPU numbers
that do not depend on which x86-64 CPU computed them.

torch picks its CPU kernels at run time for the machine: ATen's vectorised kernels for the best
instruction set it finds (AVX-512 on this project's reference machine, AVX2 on most laptops),
oneDNN's convolutions JIT-compiled for the CPU, MKL's matrix products and vector maths for the CPU's
vendor and instruction set. Each choice adds floating-point numbers in another order, so one cell
gives another final state on another CPU (measured: docs/reproducibility.md). The mode pins every
choice to a code path that every x86-64 CPU with AVX2 runs alike (revision 2,
``PORTABLE_REVISION``):

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's vectorised kernels at AVX2 (not AVX-512);
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's convolutions (and GELU) JIT-compiled for AVX2 whatever
  the CPU offers (measured: the same bits on Intel and emulated AMD CPUs with other cache sizes;
  revision 1 bypassed oneDNN, at 2.5 times the cost of a convolution step);
- ``MKL_CBWR=COMPATIBLE``: MKL's matrix products in its conditional numerical reproducibility mode
  on the one branch MKL documents for Intel and non-Intel CPUs alike (the AVX2 branch exists for
  Intel CPUs only; elsewhere MKL silently falls back to its AUTO branch);
- no MKL vector maths: the branch does not pin MKL's element-wise functions (``sqrt``, ``log10``
  and ``atan`` differ between AMD and Intel CPUs under it), so under the mode the project computes
  them in ATen's own kernels and builds Adam and AdamW fused (``benchmark.portable.math_ops``).

ATen, oneDNN and MKL read these variables once, at their first use, so they must be in the
environment before torch is imported: the mode belongs to a process. ``enter`` sets it in a fresh
process; ``activate`` (every cell calls it first) enters the mode when torch is not imported yet and
otherwise refuses a cell whose mode is not the process's; the launchers run each cell in a process
started in its mode. Thread count is pinned elsewhere (one intra-op thread per cell,
``RunOptions.cell_threads``). On a GPU, or a CPU that is not x86-64 with AVX2, the mode does not
apply: it says so (a warning, and the record's environment) and the cell runs.

This module is torch-free: it reads torch's state only when torch is already imported (or
``activate`` imports it).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmark.core.errors import UsageError

NATIVE, PORTABLE = "native", "portable"
# what the portable mode computes, in a portable cell's identity (``kernels_revision``): 1, the
# first mode, bypassed oneDNN and left Adam's square root and PSNR's log10 to MKL's vector maths,
# whose bits depend on the CPU's vendor; 2 keeps oneDNN capped at AVX2 and computes those in ATen's
# own kernels (benchmark.portable.math_ops)
PORTABLE_REVISION = 2
KERNELS = (NATIVE, PORTABLE)
# the mode this process was started in (set together with PORTABLE_ENV, before torch)
MARK = "FSSL_KERNELS"
PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "COMPATIBLE",
}
# every variable that changes which CPU kernels run: recorded in each record's environment when set
WATCHED = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    MARK,
)
CPUINFO = Path("/proc/cpuinfo")


class KernelModeError(UsageError):
    """A cell asks for a kernel mode this process cannot give it (torch was imported in the other
    mode)."""


def check_kernels(value: Any) -> str:
    if value not in KERNELS:
        raise UsageError(f"kernels must be one of {', '.join(KERNELS)}, got {value!r}")
    return str(value)


def _cpu_flags() -> set[str] | None:
    """The CPU's feature flags (Linux), None where they cannot be read."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return None


def not_applicable(device: str = "cpu") -> str | None:
    """Why the portable mode does not cover a run on ``device`` on this machine, or None when it
    does."""
    if device.startswith("cuda"):
        return f"{device}: GPU kernels are not covered (the mode pins CPU kernels only)"
    arch = platform.machine().lower()
    if arch not in ("x86_64", "amd64"):
        return f"this CPU is {arch or 'of unknown architecture'}, not x86-64"
    flags = _cpu_flags()
    if flags is not None and not {"avx2", "fma"} <= flags:
        return "this x86-64 CPU has no AVX2/FMA, the instruction set the mode pins"
    return None


def environment(kernels: str, base: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The environment a fresh process needs to start in ``kernels`` (None: the variable must be
    unset), started from ``base`` (default: this process's environment)."""
    check_kernels(kernels)
    if kernels == PORTABLE:
        return {**PORTABLE_ENV, MARK: PORTABLE}
    # a native process must not inherit the portable variables from a portable parent
    inherited = (os.environ if base is None else base).get(MARK) == PORTABLE
    return {**{k: None for k in PORTABLE_ENV if inherited}, MARK: NATIVE}


def _apply(env: Mapping[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# one child_environment block at a time: two threads each saving and restoring os.environ would
# restore each other's values (the second saves the first's mode as "before" and puts it back last)
_ENV_LOCK = threading.RLock()


def child_env(kernels: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (this process's environment) set for a child process of ``kernels``
    mode: pass it to ``subprocess`` as ``env``; this process's own environment is not touched."""
    with _ENV_LOCK:  # not a half-applied child_environment block of another thread
        out = dict(os.environ if base is None else base)
    for key, value in environment(kernels, out).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@contextlib.contextmanager
def child_environment(kernels: str) -> Iterator[None]:
    """This process's environment set for ``kernels`` while child processes are started that
    inherit it (a process pool's workers), restored after; one block at a time across threads.
    A child started with ``subprocess`` takes ``child_env`` instead."""
    with _ENV_LOCK:
        env = environment(kernels)
        before = {k: os.environ.get(k) for k in env}
        _apply(env)
        try:
            yield
        finally:
            _apply(before)


def enter(kernels: str) -> None:
    """Put this process in ``kernels`` mode: before torch is imported (a worker's first act)."""
    if "torch" in sys.modules and process_kernels() != kernels:
        raise KernelModeError(_refusal(kernels))
    _apply(environment(kernels))


def process_kernels() -> str:
    """The mode this process was started in (``native`` unless ``enter`` or a launcher set it)."""
    return PORTABLE if os.environ.get(MARK) == PORTABLE else NATIVE


def _refusal(kernels: str) -> str:
    return (
        f"this cell asks for {kernels} kernels, but this process imported torch in "
        f"{process_kernels()} mode (the kernel settings are read once, when torch starts). Run it "
        "with `python -m benchmark run` or `run_grid` (their launchers start each cell in a "
        f"process of its mode), or start Python with {MARK}={kernels} and the variables of "
        f"benchmark.portable.mode.environment({kernels!r}) set"
    )


_warned: set[str] = set()


def activate(kernels: str, device: str = "cpu") -> dict[str, Any]:
    """Make this process run ``kernels`` for a cell on ``device``, or raise ``KernelModeError``;
    return ``state``.

    Enters the mode when torch is not imported yet; otherwise checks that the process is in it
    (environment and ATen's chosen instruction set). Where the mode does not apply (GPU, not x86-64
    with AVX2) it warns and goes on.
    """
    check_kernels(kernels)
    if "torch" not in sys.modules:
        enter(kernels)
    if process_kernels() != kernels:
        raise KernelModeError(_refusal(kernels))
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if kernels == PORTABLE:
        # convolutions in oneDNN's kernels JIT-compiled for AVX2 (ONEDNN_MAX_CPU_ISA), whatever a
        # caller set before
        torch.backends.mkldnn.enabled = True
        reason = not_applicable(device)
        if reason is None and any(os.environ.get(k) != v for k, v in PORTABLE_ENV.items()):
            raise KernelModeError(
                f"portable mode: {', '.join(f'{k}={v}' for k, v in PORTABLE_ENV.items())} "
                "must stay set in this process"
            )
        if reason is None and torch.backends.cpu.get_cpu_capability() != "AVX2":
            raise KernelModeError(
                f"portable mode: ATen dispatches to {torch.backends.cpu.get_cpu_capability()}, "
                "not AVX2: " + _refusal(kernels)
            )
        if reason is not None and reason not in _warned:
            _warned.add(reason)
            warnings.warn(
                f"portable kernel mode does not apply: {reason}; the cell runs, its record says so",
                stacklevel=2,
            )
    return state(device)


def state(device: str = "cpu") -> dict[str, Any]:
    """What decided this process's CPU kernels, for a record's environment: the mode, whether it
    applies on ``device`` (and why not), ATen's instruction set and whether oneDNN was on (when
    torch is imported), and every watched variable that is set."""
    out: dict[str, Any] = {"mode": process_kernels()}
    reason = not_applicable(device)
    if out["mode"] == PORTABLE:
        out["revision"] = PORTABLE_REVISION
        out["applies"] = reason is None
        if reason is not None:
            out["reason"] = reason
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):  # provenance must never fail a finished cell
            out["aten"] = str(torch.backends.cpu.get_cpu_capability())
            out["onednn"] = bool(torch.backends.mkldnn.enabled)
    out["env"] = {k: os.environ[k] for k in WATCHED if k in os.environ}
    return out


def describe(kernels_state: Mapping[str, Any] | None) -> str:
    """One line for a recorded ``state``: ``portable (ATen AVX2, oneDNN on,
    MKL_CBWR=COMPATIBLE, ...)``."""
    if not kernels_state:
        return "not recorded"
    parts = []
    if "aten" in kernels_state:
        parts.append(f"ATen {kernels_state['aten']}")
    if "onednn" in kernels_state:
        parts.append("oneDNN " + ("on" if kernels_state["onednn"] else "off"))
    env = dict(kernels_state.get("env") or {})
    parts += [
        f"{k}={v}" for k, v in env.items() if k not in (MARK, "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    ]
    if kernels_state.get("applies") is False:
        parts.append(f"does not apply: {kernels_state.get('reason', '?')}")
    return (
        f"{kernels_state.get('mode', '?')} ({', '.join(parts)})"
        if parts
        else str(kernels_state.get("mode"))
    )


__all__ = [
    "KERNELS",
    "MARK",
    "NATIVE",
    "PORTABLE",
    "PORTABLE_ENV",
    "PORTABLE_REVISION",
    "KernelModeError",
    "activate",
    "check_kernels",
    "child_environment",
    "describe",
    "enter",
    "environment",
    "not_applicable",
    "process_kernels",
    "state",
]
