"""Host values to an accelerator without making the host wait (issue 45).

A blocking host-to-device copy (``tensor.to(device)``, ``torch.tensor(values, device=device)``)
drains the device's queue on CUDA: the host stops until every kernel queued so far has run. The
training loops therefore send what they compute on the host in one non-blocking copy:
:class:`Shipment` packs host tensors into one float64 buffer (pinned on CUDA), copies it once with
``non_blocking=True`` and hands out slices of the device copy in each value's own dtype.

float64 holds every value shipped this way exactly — float32/bf16/fp16 numbers, Python floats
(rounded to the target dtype on the device exactly as ``torch.tensor(values, dtype=...)`` rounds
them) and integers below 2**53 (indices) — so a value reads back bit for bit: the numbers are the
same whichever device runs, and on the CPU the copy is no copy at all.

A non-blocking copy from pageable host memory is synchronous on CUDA (the driver stages it and the
host waits), so every host tensor bound for CUDA leaves from pinned memory: :func:`to_device` pins
what is not pinned yet, and :func:`host_rows` gathers rows of a host tensor straight into a pinned
buffer (one host copy, not a gather and then a pin). On the CPU neither pins nor copies anything:
the tensors, and so the numbers, are the ones plain indexing gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Parcel:
    """Where one value sits in a shipment: its offset, shape and dtype."""

    offset: int
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


# device types whose host copies leave from pinned memory (tests/standin_device.py adds its own)
PINNED_DEVICE_TYPES: set[str] = {"cuda"}


def pins(device: torch.device | str) -> bool:
    """Whether host data bound for ``device`` goes through pinned memory (CUDA)."""
    return torch.device(device).type in PINNED_DEVICE_TYPES


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` on ``device`` without making the host wait: non-blocking, from pinned memory where the
    device needs it (a host tensor not pinned yet is pinned first); ``t`` itself when it is there."""
    if t.device.type == "cpu" and pins(device) and not t.is_pinned():
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def host_rows(
    src: torch.Tensor, idx: torch.Tensor, device: torch.device | str | None = None
) -> torch.Tensor:
    """``src[idx]`` (rows of a host tensor, ``idx`` 1-D integer indices on the host); bound for a
    device that pins, gathered straight into a pinned buffer."""
    if device is None or not pins(device) or src.device.type != "cpu":
        return src[idx]
    return torch.index_select(src, 0, idx, out=_pinned_empty((len(idx), *src.shape[1:]), src.dtype))


def _pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A page-locked host buffer (tests/standin_device.py models it on the CPU, in every thread)."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def rows_to(src: torch.Tensor, idx: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``src[idx]`` of a host tensor on ``device``: gathered into pinned memory, copied without
    making the host wait (on the CPU: plain indexing)."""
    return to_device(host_rows(src, idx, device), device)


class Shipment:
    """Host tensors (and Python numbers) bound for one device, sent in one copy."""

    def __init__(self) -> None:
        self._parts: list[torch.Tensor] = []
        self._size = 0

    def add(
        self, value: torch.Tensor | Sequence[float], dtype: torch.dtype | None = None
    ) -> Parcel:
        """Add a host tensor (or a sequence of Python numbers); ``dtype`` is what it reads back as
        (default: the tensor's own dtype, float32 for numbers)."""
        t = value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float64)
        if t.device.type != "cpu":
            raise ValueError(f"a shipment carries host tensors, got one on {t.device}")
        if dtype is None:
            dtype = t.dtype if isinstance(value, torch.Tensor) else torch.float32
        flat = t.reshape(-1).to(torch.float64)
        parcel = Parcel(self._size, tuple(t.shape), dtype)
        self._parts.append(flat)
        self._size += flat.numel()
        return parcel

    def send(self, device: torch.device) -> Received:
        """The one copy: pinned and non-blocking on CUDA, a no-op on the CPU."""
        buf = torch.cat(self._parts) if self._parts else torch.empty(0, dtype=torch.float64)
        return Received(to_device(buf, device))


@dataclass(frozen=True)
class Received:
    """The device copy of a shipment."""

    buffer: torch.Tensor

    def __getitem__(self, parcel: Parcel) -> torch.Tensor:
        """The parcel's value on the device, in its dtype (exactly the host value)."""
        flat = self.buffer[parcel.offset : parcel.offset + parcel.numel]
        if parcel.dtype == torch.bool:
            return (flat != 0).view(parcel.shape)
        return flat.to(parcel.dtype).view(parcel.shape)


__all__ = [
    "PINNED_DEVICE_TYPES",
    "Parcel",
    "Received",
    "Shipment",
    "host_rows",
    "pins",
    "rows_to",
    "to_device",
]
