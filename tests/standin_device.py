"""A stand-in accelerator on the CPU: what CUDA would reject or wait for, found without a GPU
(issue 45).

The engine is given ``torch.device("meta")`` as its device. Under :func:`standin_device` a tensor
"on the device" is a :class:`DeviceTensor`: it reports the ``meta`` device, so every device check of
the code under test sees a device that is not the host, and it carries a real CPU tensor, so the
code computes real numbers and takes its real data-dependent branches. A dispatch mode runs each
operation on the carried tensors and records, with the code line that caused it:

- ``read``: a host read of a device value, which waits for the device's queue on CUDA —
  ``.item()``/``float()``/``int()``/``bool()`` (``_local_scalar_dense``), ``.cpu()``/``.tolist()``
  (a copy to the host), and operations whose output shape depends on device values (``nonzero``,
  boolean masks, ``unique``, ``masked_select``, ``repeat_interleave`` without ``output_size``…);
- ``blocking_copy``: a host tensor copied to the device without ``non_blocking=True`` (CUDA then
  synchronises the stream), including ``torch.tensor(values, device=...)`` and indexing a device
  tensor with host indices;
- ``pageable_copy``: a non-blocking host-to-device copy whose source is not pinned: CUDA performs
  it synchronously (the host waits for the stream), so it counts as a synchronisation. Pinning is
  modelled on the CPU: under :func:`standin_device` the stand-in device is one whose copies leave
  from pinned memory (``benchmark.core.host_to_device.pins``), and ``pin_memory()`` and
  ``torch.empty(..., pin_memory=True)`` give CPU tensors whose storage the harness marks pinned
  (``is_pinned()`` answers from the marks; views share their storage's mark);
- ``copy``: a non-blocking host-to-device copy from pinned memory (no wait; counted, not a
  synchronisation); ``pin``: a host copy into pinned memory by ``pin_memory()`` (not a
  synchronisation; counted so that a second host copy of data gathered pinned shows);
- ``violation``: what CUDA refuses — a host tensor (not a 0-dim scalar) mixed into an operation on
  device tensors, a host generator drawing device numbers, a tensor with no carried data (the stand-in
  lost track of it: a harness gap, reported rather than guessed).

bf16 autocast: torch has no autocast for ``meta``, so ``torch.autocast`` is replaced for the block by
one that, for the stand-in device type, casts the floating inputs of the operations CUDA's autocast
runs in lower precision (convolutions, linear layers, matrix products, attention) at the function
level, above autograd, as CUDA's does; ``enabled=False`` regions switch it off. Other device types get
torch's own autocast.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

DEVICE = torch.device("meta")
REPO = Path(__file__).resolve().parents[1]
_HERE = Path(__file__).resolve()
aten = torch.ops.aten

# output shape depends on device values: CUDA must wait for them
_DATA_DEPENDENT = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten._unique.default,
    aten.unique_dim.default,
    aten.repeat_interleave.Tensor,
    aten.bincount.default,
    aten.argwhere.default,
    aten.equal.default,
    aten.is_nonzero.default,
}
_RANDOM_WITH_GENERATOR_KW = "generator"
SYNC_KINDS = ("read", "blocking_copy", "pageable_copy")


class DeviceTensor(torch.Tensor):
    """A tensor on the stand-in device: reports ``meta``, carries real CPU data (``elem``)."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=DEVICE,
            requires_grad=elem.requires_grad,
        )
        r.elem = elem
        return r

    @property
    def is_meta(self) -> bool:  # type: ignore[override]
        """An accelerator's tensor, not a meta one (the harness's own code sizes models on meta)."""
        return False

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"DeviceTensor({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} on a stand-in device tensor outside standin_device()")


@dataclass
class Report:
    """What the code under test did on the stand-in device."""

    events: Counter = field(default_factory=Counter)  # (kind, site, what) -> count
    in_steps: Counter = field(default_factory=Counter)  # the same, inside a local step loop
    steps: int = 0  # optimizer steps taken

    def count(self, kind: str) -> int:
        return sum(n for (k, _, _), n in self.events.items() if k == kind)

    def syncs(self) -> int:
        return self.count("read") + self.count("blocking_copy") + self.count("pageable_copy")

    def step_syncs(self) -> Counter:
        """The synchronisations inside a local update's step loop
        (``benchmark.building_blocks.local_train.in_step_loop``), by site."""
        out: Counter = Counter()
        for (k, site, what), n in self.in_steps.items():
            if k in SYNC_KINDS:
                out[f"{k} {what} at {site}"] += n
        return out

    def by_site(self, *kinds: str) -> Counter:
        out: Counter = Counter()
        for (k, site, what), n in self.events.items():
            if k in kinds:
                out[f"{k} {what} at {site}"] += n
        return out

    def violations(self) -> list[str]:
        return [f"{n}x {line}" for line, n in self.by_site("violation").items()]


def _site() -> str:
    """The innermost line of the repository's code (not this file, not torch) on the stack."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename).resolve()
        if path == _HERE or REPO not in path.parents:
            continue
        return f"{path.relative_to(REPO)}:{frame.lineno}"
    return "?"


def _is_dev(t) -> bool:
    return isinstance(t, DeviceTensor)


def _unwrap(t):
    return t.elem if isinstance(t, DeviceTensor) else t


def _wrap(t):
    return DeviceTensor(t) if isinstance(t, torch.Tensor) and not _is_dev(t) else t


class _Pinned:
    """The host storages the code under test pinned (kept alive, so no address is reused)."""

    def __init__(self) -> None:
        self.storages: dict[int, torch.UntypedStorage] = {}

    def mark(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        self.storages[storage.data_ptr()] = storage
        return t

    def holds(self, t: torch.Tensor) -> bool:
        return t.device.type == "cpu" and t.untyped_storage().data_ptr() in self.storages


def _target_device(kwargs) -> torch.device | None:
    d = kwargs.get("device")
    return None if d is None else torch.device(d)


class _Dispatch(TorchDispatchMode):
    def __init__(self, report: Report, pinned: _Pinned) -> None:
        super().__init__()
        self.report = report
        self.pinned = pinned

    def _host_to_device(self, src: torch.Tensor, non_blocking: bool) -> str:
        if not non_blocking:
            return "blocking_copy"
        return "copy" if self.pinned.holds(src) else "pageable_copy"

    def note(self, kind: str, what: str) -> None:
        from benchmark.building_blocks.local_train import in_step_loop

        key = (kind, _site(), what)
        self.report.events[key] += 1
        if in_step_loop():
            self.report.in_steps[key] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        leaves = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_dev = any(_is_dev(t) for t in leaves)
        target = _target_device(kwargs)
        to_dev = target is not None and target.type == DEVICE.type
        for t in leaves:
            if not _is_dev(t) and t.device.type == DEVICE.type:
                self.note("violation", f"{func}: a meta tensor without data (stand-in lost track)")
                raise RuntimeError(f"stand-in device: {func} got a tensor without data")
        if func in (aten._to_copy.default, aten.copy_.default):
            return self._copy(func, args, kwargs, on_dev, to_dev)
        if func is aten._foreach_copy_.default:
            non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
            for dst, src in zip(args[0], args[1]):
                self._copy(aten.copy_.default, (dst, src, non_blocking), {}, True, False)
            return None
        if to_dev:
            kwargs["device"] = torch.device("cpu")
            if isinstance(kwargs.get(_RANDOM_WITH_GENERATOR_KW), torch.Generator):
                self._generator(kwargs[_RANDOM_WITH_GENERATOR_KW], func)
        if on_dev:
            self._check_mixing(func, args, kwargs)
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if not (on_dev or to_dev):
            return out
        if func is aten._local_scalar_dense.default:
            self.note("read", ".item()/float()/int()/bool()")
            return out
        if func in _DATA_DEPENDENT or (
            func is aten.repeat_interleave.self_Tensor and kwargs.get("output_size") is None
        ):
            self.note("read", f"{func.__name__} (output shape from device values)")
        return tree_map(_wrap, out)

    def _generator(self, gen: torch.Generator, func) -> None:
        if gen.device.type != DEVICE.type:
            self.note("violation", f"{func.__name__}: a {gen.device.type} generator on the device")

    def _check_mixing(self, func, args, kwargs) -> None:
        if isinstance(kwargs.get(_RANDOM_WITH_GENERATOR_KW), torch.Generator):
            self._generator(kwargs[_RANDOM_WITH_GENERATOR_KW], func)
        if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
            self._index(func, args)
            return
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor) and not _is_dev(t) and t.dim() > 0:
                self.note("violation", f"{func.__name__}: host tensor {tuple(t.shape)} mixed in")

    def _index(self, func, args) -> None:
        """CUDA accepts host indices (it copies them, blocking) and boolean masks (it reads them:
        nonzero)."""
        for idx in args[1]:
            if idx is None:
                continue
            if idx.dtype in (torch.bool, torch.uint8):
                self.note("read", f"{func.__name__} with a boolean mask (nonzero)")
            elif not _is_dev(idx) and idx.dim() > 0:
                self.note("blocking_copy", f"{func.__name__} with host indices")
        if func is not aten.index.Tensor and not _is_dev(args[2]) and args[2].dim() > 0:
            self.note("violation", f"{func.__name__}: host values {tuple(args[2].shape)}")

    def _copy(self, func, args, kwargs, on_dev, to_dev):
        non_blocking = bool(kwargs.get("non_blocking", False)) or (
            func is aten.copy_.default and len(args) > 2 and bool(args[2])
        )
        if func is aten._to_copy.default:
            src = args[0]
            dst_dev = to_dev or (target_is_same(kwargs) and _is_dev(src))
            if to_dev:
                kwargs["device"] = torch.device("cpu")
            out = func(_unwrap(src), **kwargs)
            if _is_dev(src) and not dst_dev:
                self.note("read", ".cpu()/.to(host)/.tolist()")
                return out
            if not _is_dev(src) and dst_dev:
                self.note(self._host_to_device(src, non_blocking), "host -> device .to()")
            return _wrap(out) if dst_dev else out
        dst, src = args[0], args[1]
        func(_unwrap(dst), _unwrap(src), *args[2:])
        if _is_dev(dst) and not _is_dev(src) and src.dim() > 0:
            self.note(self._host_to_device(src, non_blocking), "host -> device copy_")
        elif _is_dev(src) and not _is_dev(dst):
            self.note("read", "device -> host copy_")
        return dst


def target_is_same(kwargs) -> bool:
    return kwargs.get("device") is None


# ---------------------------------------------------------------------------------------------
# torch.tensor(values, device=...) and friends bypass the dispatch mode: caught at function level

_NEW_FROM_DATA = {torch.tensor, torch.as_tensor, torch.Tensor.new_tensor}
_LOWER_PRECISION = {
    F.conv1d,
    F.conv2d,
    F.conv3d,
    F.conv_transpose1d,
    F.conv_transpose2d,
    F.linear,
    torch.matmul,
    torch.mm,
    torch.bmm,
    torch.addmm,
    torch.baddbmm,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.Tensor.mm,
    torch.Tensor.bmm,
    torch.einsum,
    F.scaled_dot_product_attention,
}


@dataclass
class _Autocast:
    stack: list = field(default_factory=list)  # (enabled, dtype) per entered region

    def dtype(self) -> torch.dtype | None:
        for enabled, dtype in reversed(self.stack):
            return dtype if enabled else None
        return None


_STATE = threading.local()


class _Functions(TorchFunctionMode):
    def __init__(self, autocast: _Autocast, pinned: _Pinned, report: Report) -> None:
        super().__init__()
        self.autocast = autocast
        self.pinned = pinned
        self.report = report

    def _pinning(self, func, args, kwargs):
        """Pinned memory on a CPU-only build (where torch refuses it): a CPU tensor, marked."""
        if func is torch.Tensor.is_pinned:
            return self.pinned.holds(args[0])
        if func is torch.Tensor.pin_memory:
            t = args[0]
            if self.pinned.holds(t):
                return t
            # a host copy into pinned memory (not a synchronisation): counted, by dimensions
            self.report.events[("pin", _site(), f"pin_memory() of a {t.dim()}-D tensor")] += 1
            return self.pinned.mark(t.clone())
        return self.pinned.mark(func(*args, **{**kwargs, "pin_memory": False}))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.is_pinned, torch.Tensor.pin_memory) or kwargs.get("pin_memory"):
            return self._pinning(func, args, kwargs)
        if func in _NEW_FROM_DATA:
            target = _target_device(kwargs)
            if target is not None and target.type == DEVICE.type:
                host = func(*args, **{**kwargs, "device": "cpu"})
                return host.to(DEVICE)  # the blocking copy the dispatch mode counts
        dtype = self.autocast.dtype()
        if dtype is not None and func in _LOWER_PRECISION:
            args, kwargs = tree_map(lambda t: _cast(t, dtype), (args, kwargs))
        return func(*args, **kwargs)


def _cast(t, dtype):
    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype and _is_dev(t):
        return t.to(dtype)
    return t


class _StandinAutocast:
    """``torch.autocast`` for the block: the stand-in device's regions go to ``_Autocast``."""

    def __init__(self, state: _Autocast, real) -> None:
        self.state, self.real = state, real

    def __call__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type != DEVICE.type:
            return self.real(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        return self._region(bool(enabled), dtype or torch.bfloat16)

    @contextlib.contextmanager
    def _region(self, enabled: bool, dtype: torch.dtype) -> Iterator[None]:
        self.state.stack.append((enabled, dtype))
        try:
            yield
        finally:
            self.state.stack.pop()


@contextlib.contextmanager
def standin_device() -> Iterator[Report]:
    """Run the block with the stand-in device active; yields the :class:`Report`."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from benchmark.core import host_to_device as transfer

    report = Report()
    state = _Autocast()
    pinned = _Pinned()
    real = torch.autocast

    def on_step(optimizer, args, kwargs) -> None:
        report.steps += 1

    handle = register_optimizer_step_post_hook(on_step)
    torch.autocast = _StandinAutocast(state, real)  # type: ignore[misc]
    transfer.PINNED_DEVICE_TYPES.add(DEVICE.type)  # the stand-in needs pinned sources, as CUDA
    real_empty = transfer._pinned_empty  # pinned buffers in any thread (modes are per thread)
    transfer._pinned_empty = lambda shape, dtype: pinned.mark(torch.empty(shape, dtype=dtype))
    try:
        with _Functions(state, pinned, report), _Dispatch(report, pinned):
            yield report
    finally:
        transfer._pinned_empty = real_empty
        transfer.PINNED_DEVICE_TYPES.discard(DEVICE.type)
        torch.autocast = real  # type: ignore[misc]
        handle.remove()
