"""One ATen operation call, written down and replayed: the unit of the kernel fingerprint
(``benchmark.commands.kernel_fingerprint``).

A call is its operator (``aten.mm.default``) and its arguments, each tensor written as its shape,
strides, storage offset and dtype (never its values, but for tensors of at most ``SMALL`` elements,
such as Adam's step counts), and each other argument as itself. Replaying a call builds every
tensor from integers (exact in any floating-point type, on any CPU: ``torch.randn`` itself would
depend on ATen's instruction set), runs the operator once and hashes what it returned and what it
wrote in place. Two CPUs whose kernels compute that call alike give the same digest.

Operations that only move, compare or select values (views, copies, indexing, comparisons,
``relu``, pooling by maximum, ...) round nothing and are not written down (``EXACT``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

SMALL = 8  # tensors of at most this many elements are written with their values
# operators that round nothing: their result is the same bits on any CPU whatever the kernel
_EXACT_WORDS = """_local_scalar_dense _to_copy _unsafe_view abs abs_ alias all any arange argmax argmin
    as_strided bitwise_and bitwise_not bitwise_or bitwise_or_ bitwise_xor cat ceil clamp clamp_
    clamp_max clamp_min clone constant_pad_nd copy_ detach empty empty_like empty_strided eq expand
    eye fill_ flip floor full full_like ge gather gt index index_copy_ index_fill_
    index_select le lift_fresh lt masked_fill masked_fill_ max max_pool2d_with_indices
    max_pool2d_with_indices_backward maximum min minimum ne neg neg_ new_empty new_empty_strided
    new_full new_ones new_zeros nonzero ones ones_like permute reflection_pad2d relu relu_ repeat
    roll round round_ scalar_tensor scatter scatter_ select set_ sign slice sort split
    split_with_sizes squeeze stack t threshold_backward topk transpose trunc unbind unfold
    unsqueeze view where zero_ zeros zeros_like"""
EXACT = frozenset(_EXACT_WORDS.split())


class Unwritable(ValueError):
    """An argument this module cannot write down (the call is left out of the fingerprint)."""


def op_name(func: Any) -> str:
    """``aten.mm.default`` for the OpOverload ``torch.ops.aten.mm.default``."""
    return str(func)


def is_exact(name: str) -> bool:
    parts = name.split(".")
    return len(parts) < 2 or parts[0] != "aten" or parts[1] in EXACT


def _tensor_spec(t: torch.Tensor) -> dict[str, Any]:
    if t.device.type != "cpu" or t.layout != torch.strided or t.is_quantized:
        raise Unwritable(f"a {t.device.type}/{t.layout} tensor")
    spec: dict[str, Any] = {
        "T": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "offset": int(t.storage_offset()),
    }
    if t.numel() <= SMALL:
        spec["values"] = [float(v).hex() for v in t.detach().reshape(-1).double().tolist()]
    elif t.dtype == torch.bool:
        # how many are true: a mask that selects rows (x[mask] = v) must select as many as v has
        spec["count"] = int(t.sum())
    elif not t.is_floating_point():
        spec["range"] = [int(t.min()), int(t.max())] if t.numel() else [0, 0]
    else:
        spec["nonneg"] = bool(t.numel() and float(t.min()) >= 0)
    return spec


def encode(x: Any) -> Any:
    """A JSON form of one argument (tensors as specs); raises ``Unwritable``."""
    if isinstance(x, torch.Tensor):
        return _tensor_spec(x)
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return {"F": x.hex()}
    if isinstance(x, (list, tuple)):
        return {"L": [encode(v) for v in x]}
    if isinstance(x, torch.dtype):
        return {"dtype": str(x).removeprefix("torch.")}
    if isinstance(x, torch.device):
        return {"device": x.type}
    if isinstance(x, torch.layout):
        return {"layout": str(x).removeprefix("torch.")}
    if isinstance(x, torch.memory_format):
        return {"memory_format": str(x).removeprefix("torch.")}
    if isinstance(x, torch.Generator):
        return {"generator": 0}
    raise Unwritable(f"an argument of type {type(x).__name__}")


def call_of(func: Any, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "op": op_name(func),
        "args": [encode(a) for a in args],
        "kwargs": {k: encode(v) for k, v in kwargs.items()},
    }


# operators whose kernel path depends on a float argument's value (pow(x, 0.5) is a square root)
VALUE_OPS = ("aten.pow.",)


def _key_part(x: Any, keep_floats: bool) -> Any:
    if isinstance(x, torch.Tensor):
        return (str(x.dtype), x.device.type, tuple(x.shape), x.stride(), x.storage_offset())
    if isinstance(x, float):
        return x if keep_floats else float
    if isinstance(x, (list, tuple)):
        return tuple(_key_part(v, keep_floats) for v in x)
    if isinstance(x, torch.Generator):
        return "generator"
    return x if x is None or isinstance(x, (bool, int, str)) else str(x)


def shape_key(func: Any, args: tuple, kwargs: Mapping[str, Any]) -> str:
    """The call without its data (tensor values, integer ranges, and float arguments but where they
    choose the kernel, ``VALUE_OPS``): calls with one key run one kernel path, so the census keeps
    the first of them. Cheap: no tensor is read."""
    name = op_name(func)
    keep = name.startswith(VALUE_OPS)
    parts = (
        tuple(_key_part(a, keep) for a in args),
        tuple((k, _key_part(v, keep)) for k, v in sorted(kwargs.items())),
    )
    return f"{name}{parts}"


def _pattern(n: int, salt: int) -> torch.Tensor:
    """n integers in [0, 8191), a fixed scramble of 0..n-1 (exact in any dtype)."""
    i = torch.arange(n, dtype=torch.int64)
    return (i * 40503 + salt * 9973 + 17) % 8191


def _build_tensor(spec: Mapping[str, Any], salt: int) -> torch.Tensor:
    dtype = getattr(torch, spec["T"])
    shape, stride, offset = spec["shape"], spec["stride"], spec["offset"]
    size = offset + 1 + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0)
    size = size if all(s > 0 for s in shape) else offset
    if "values" in spec:
        flat = torch.tensor([float.fromhex(v) for v in spec["values"]], dtype=torch.float64)
        return flat.to(dtype).reshape(shape).clone() if shape else flat.to(dtype).reshape(())
    p = _pattern(max(size, 0), salt)
    if dtype == torch.bool and "count" in spec:
        return _mask(shape, stride, offset, size, spec["count"], salt)
    if dtype == torch.bool:
        base = p % 3 == 0
    elif dtype.is_floating_point or dtype.is_complex:
        base = ((p + 1) if spec.get("nonneg") else (p - 4095)).to(torch.float64) / 2048
    else:
        lo, hi = spec.get("range", [0, 0])
        base = lo + p % (hi - lo + 1)
    return base.to(dtype).as_strided(shape, stride, offset)


def _mask(
    shape: list[int], stride: list[int], offset: int, size: int, count: int, salt: int
) -> torch.Tensor:
    """A boolean tensor of ``shape`` with exactly ``count`` true elements, at places the pattern
    scrambles (the first ``count`` of its order)."""
    n = 1
    for s in shape:
        n *= s
    flat = torch.zeros(n, dtype=torch.bool)
    flat[torch.argsort(_pattern(n, salt), stable=True)[:count]] = True
    out = torch.zeros(max(size, 0), dtype=torch.bool).as_strided(shape, stride, offset)
    try:
        out.copy_(flat.reshape(shape))
    except RuntimeError:  # overlapping strides (an expanded mask): its values, contiguous
        return flat.reshape(shape)
    return out


def decode(x: Any, salt: Iterator[int]) -> Any:
    if isinstance(x, dict):
        if "T" in x:
            return _build_tensor(x, next(salt))
        if "F" in x:
            return float.fromhex(x["F"])
        if "L" in x:
            return [decode(v, salt) for v in x["L"]]
        if "dtype" in x:
            return getattr(torch, x["dtype"])
        if "device" in x:
            return torch.device(x["device"])
        if "layout" in x:
            return getattr(torch, x["layout"])
        if "memory_format" in x:
            return getattr(torch, x["memory_format"])
        if "generator" in x:
            return torch.Generator().manual_seed(0)
    return x


def resolve(name: str) -> Callable[..., Any]:
    """``torch.ops.aten.mm.default`` for ``aten.mm.default``."""
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def _flat_tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def _digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach()
        if t.is_floating_point():
            t = torch.where(torch.isnan(t), torch.zeros((), dtype=t.dtype), t)  # any NaN alike
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def replay(call: Mapping[str, Any]) -> str:
    """The digest of one replayed call: what it returned and every argument it wrote in place;
    ``error: ...`` when the call cannot be replayed here."""
    try:
        func = resolve(call["op"])
        salt = iter(range(1, 1_000_000))
        args = [decode(a, salt) for a in call["args"]]
        kwargs = {k: decode(v, salt) for k, v in call["kwargs"].items()}
        torch.manual_seed(0)
        out = func(*args, **kwargs)
        written = [
            args[i] if i < len(args) else kwargs.get(a.name)
            for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        ]
        return _digest(_flat_tensors(out) + _flat_tensors(written))
    except Exception as exc:  # noqa: BLE001 - a call this torch cannot run: reported, never fatal
        return f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


__all__ = [
    "EXACT",
    "SMALL",
    "VALUE_OPS",
    "Unwritable",
    "call_of",
    "decode",
    "encode",
    "is_exact",
    "op_name",
    "replay",
    "resolve",
    "shape_key",
]
