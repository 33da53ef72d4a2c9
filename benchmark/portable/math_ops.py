"""The few operations whose CPU result depends on the CPU's vendor under the portable kernel mode,
in forms that do not (docs/reproducibility.md, *Which operations part AMD from Intel*).

ATen hands element-wise ``exp``, ``log``, ``log2``, ``log10``, ``sqrt``, ``tanh``, ``erf``,
``erfinv``, ``atan`` and ``pow(x, 0.5)`` of float32 and float64 CPU tensors to MKL's vector-maths
library (VML), not to its own vectorised kernels. VML picks its code for the CPU it finds, and
``MKL_CBWR=COMPATIBLE``, which pins MKL's matrix products on Intel and AMD CPUs alike, does not pin
VML: measured, ``sqrt``, ``log10`` and ``atan`` give other bits on an AMD EPYC than on an Intel Xeon
under the mode (Adam's and AdamW's square root among them: every quickstart cell that trained with
Adam differed). The others agreed on the CPUs measured, but VML promises that for none of them, so
under the mode the project computes none of them in VML:

- :func:`adam` and :func:`adamw` build ATen's fused optimizer (``fused=True``): one ATen kernel of
  IEEE additions, multiplications, divisions and square roots, the same bits on every AVX2 CPU;
- :func:`exp`, :func:`sqrt` and :func:`log10` compose ATen's own kernels (``exp2``, ``rsqrt``,
  ``reciprocal``, ``log1p``, in float64), which ATen computes with its own AVX2 code.

Outside the mode (native kernels, or a GPU) each function is exactly the torch operation it
replaces, so native cells compute what they always did.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from benchmark.portable.mode import PORTABLE, process_kernels

# the ATen operators whose float32 / float64 CPU kernels call MKL's vector maths (ATen's vml.h:
# IMPLEMENT_VML_MKL), in place and foreach forms included; pow with exponent ±0.5 runs sqrt's kernel
VML_FUNCTIONS = [
    "acos",
    "asin",
    "atan",
    "cos",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "log",
    "log10",
    "log2",
    "sin",
    "sqrt",
    "tan",
    "tanh",
]
VML_OPS = frozenset(
    f"aten.{prefix}{name}{suffix}"
    for name in VML_FUNCTIONS
    for prefix in ("", "_foreach_")
    for suffix in ("", "_")
)
LOG2_E = 1.0 / math.log(2.0)
INV_LN_10 = 1.0 / math.log(10.0)


def _portable_cpu(device: torch.device | str) -> bool:
    return process_kernels() == PORTABLE and torch.device(device).type == "cpu"


def exp(x: torch.Tensor) -> torch.Tensor:
    """e^x; under the mode on the CPU 2^(x·log2 e) in ATen's own ``exp2``, in float64 for a float32
    ``x`` (so within a unit in the last place of float32's e^x, and the same bits on every AVX2
    CPU)."""
    if _portable_cpu(x.device) and x.is_floating_point():
        return torch.exp2(x.double() * LOG2_E).to(x.dtype)
    return torch.exp(x)


def sqrt(x: torch.Tensor) -> torch.Tensor:
    """√x; under the mode on the CPU 1 / (1/√x) in ATen's own ``rsqrt`` and ``reciprocal``, in
    float64 for a float32 ``x`` (within a unit in the last place of float32's √x; √0 = 0,
    √∞ = ∞)."""
    if _portable_cpu(x.device) and x.is_floating_point():
        return torch.rsqrt(x.double()).reciprocal().to(x.dtype)
    return torch.sqrt(x)


def log10(x: torch.Tensor) -> torch.Tensor:
    """log10 x; under the mode on the CPU log1p(x − 1) / ln 10 in ATen's own ``log1p``, exact to a
    few units in the last place where x − 1 is (float64 callers: the reconstruction PSNR)."""
    if _portable_cpu(x.device) and x.is_floating_point():
        return torch.log1p(x - 1.0) * INV_LN_10
    return torch.log10(x)


def _first_device(params: list[Any]) -> torch.device | None:
    for p in params:
        tensors = p["params"] if isinstance(p, dict) else [p]
        for t in tensors:
            if isinstance(t, torch.Tensor):
                return t.device
    return None


def optimizer_kwargs(params: list[Any]) -> dict[str, Any]:
    """``{"fused": True}`` for parameters on the CPU under the mode, else ``{}``."""
    device = _first_device(params)
    return {"fused": True} if device is not None and _portable_cpu(device) else {}


def adam(params: Iterable[Any], **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam(params, **kwargs)``, fused under the mode on the CPU (see above)."""
    params = list(params)
    return torch.optim.Adam(params, **kwargs, **optimizer_kwargs(params))


def adamw(params: Iterable[Any], **kwargs: Any) -> torch.optim.AdamW:
    """``torch.optim.AdamW(params, **kwargs)``, fused under the mode on the CPU (see above)."""
    params = list(params)
    return torch.optim.AdamW(params, **kwargs, **optimizer_kwargs(params))


def calls_vml(op: str, args: tuple = ()) -> bool:
    """Does a call of ``op`` (``aten.sqrt.default``) on ``args`` run in MKL's vector maths on the
    CPU (a float tensor among its arguments)?"""
    base = op.rpartition(".")[0]
    pow_half = base == "aten.pow" and any(isinstance(a, float) and abs(a) == 0.5 for a in args)
    if base not in VML_OPS and not pow_half:
        return False
    return any(
        isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype in VML_DTYPES
        for a in args
        for t in (a if isinstance(a, (list, tuple)) else [a])
    )


VML_DTYPES = (torch.float32, torch.float64)

__all__ = [
    "VML_OPS",
    "adam",
    "adamw",
    "calls_vml",
    "exp",
    "log10",
    "optimizer_kwargs",
    "sqrt",
]
