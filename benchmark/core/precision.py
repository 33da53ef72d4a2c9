"""The precision policy, in one place: a cell's ``precision`` (fp32 | bf16 | fp16 | tf32) decides
the autocast dtype of every method's training step and, on CUDA, the TF32 and cuDNN settings
(:func:`cuda_precision`), and fp16 never runs without a gradient scaler.

- ``fp32``: no autocast (the specs' precision, and the default on every device). On CUDA, fp32
  means fp32: TF32 is off for matrix products and cuDNN convolutions (torch's default lets cuDNN
  convolutions run in TF32).
- ``tf32``: fp32 tensors and no autocast, with TF32 tensor-core maths allowed for CUDA matrix
  products and convolutions (10-bit mantissa inputs, fp32 accumulation). The same as fp32 on a CPU.
- ``bf16``: autocast to bfloat16, no scaler (bf16 has fp32's exponent range: gradients do not
  underflow).
- ``fp16``: autocast to float16 with a :class:`LossScaler` (torch's ``GradScaler``, dynamic loss
  scaling). Measured on a ResNet-18 SimCLR step at B = 256 in fp32, 98 % of the layer-output
  gradients lie below fp16's smallest normal number: without loss scaling they flush to zero.

Quantities that need fp32 whatever the precision (NT-Xent similarity matrices, Sinkhorn, cluster
logits, distillation targets) are computed under :func:`full_precision`, which disables autocast and
casts its inputs to fp32.

A method cannot opt out silently: every optimizer step taken while an fp16 cell pre-trains must go
through :meth:`LossScaler.step` (``guard_fp16_steps``, installed by the simulation for fp16 cells;
maths that must stay in fp32, such as Orchestra's server clustering, says so with
``FP32.scaler(device)``), and a method declares the precisions it supports
(``MethodBase.precisions``), which the grid checks at expansion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions: the grid validates ``precision`` without loading torch
# (benchmark.grids.expand)
PRECISIONS = ("fp32", "bf16", "fp16", "tf32")
# The evaluation precision policy (docs/precision.md, "Evaluation"): every downstream task, COCO
# detection with Detectron2 included (it runs in the cell's process), evaluates in fp32 tensors
# without autocast and, on CUDA, with TF32 tensor-core maths allowed for matrix products and cuDNN
# convolutions (deterministic cuDNN, no algorithm chosen by timing): ``cuda_precision`` of this name.
# The runner sets it after the pre-training (``env.cuda_precision["evaluation"]`` of a GPU record
# says what ran); ``plan`` prices the tasks and detection at its peak (benchmark.grids.cost). On a
# CPU there is no TF32: evaluation is plain fp32 and a CPU record carries no CUDA flags.
EVALUATION_PRECISION = "tf32"
F = TypeVar("F")
_SCALED = "_fssl_scaled_step"  # set on an optimizer by LossScaler.step for the one step it takes


class PrecisionError(RuntimeError):
    """An fp16 training step was taken without the gradient scaler."""


@dataclass(frozen=True)
class Precision:
    name: str = "fp32"

    def __post_init__(self) -> None:
        if self.name not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.name!r}")

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.name, torch.float32)

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The forward pass's context: autocast to this precision's dtype on ``device``; a no-op in
        fp32 and tf32."""
        if self.name in ("fp32", "tf32"):
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device.type, dtype=self.dtype)

    def scaler(self, device: torch.device) -> LossScaler:
        """A fresh loss scaler: dynamic scaling in fp16, a pass-through otherwise."""
        return LossScaler(enabled=self.name == "fp16", device=device)


FP32 = Precision("fp32")


def supports(declared: tuple[str, ...], precision: str) -> bool:
    """Whether a method that declares ``declared`` can train a cell in ``precision``: tf32 asks
    nothing of a method's code (fp32 tensors, no autocast), so an fp32 method supports it."""
    return precision in declared or (precision == "tf32" and "fp32" in declared)


@dataclass(frozen=True)
class CudaPrecision:
    """The CUDA maths settings a cell runs under, as recorded in ``env.cuda_precision``."""

    tf32_matmul: bool  # torch.backends.cuda.matmul.allow_tf32
    tf32_cudnn: bool  # torch.backends.cudnn.allow_tf32
    cudnn_benchmark: bool  # torch.backends.cudnn.benchmark: algorithms chosen by timing
    cudnn_deterministic: bool  # torch.backends.cudnn.deterministic

    def as_dict(self) -> dict[str, bool]:
        return dataclasses.asdict(self)


def cuda_precision(precision: str) -> CudaPrecision:
    """The CUDA settings ``precision`` asks for (pure). TF32 only for ``tf32``: fp32 means fp32, and
    in bf16/fp16 what autocast leaves in fp32 (similarity matrices, Sinkhorn, losses; ``fp32_math``)
    must be fp32 too. cuDNN: deterministic algorithms, none chosen by timing (``benchmark`` picks by
    measured speed, which can differ between runs and so change the numbers)."""
    Precision(precision)  # ValueError on an unknown name
    tf32 = precision == "tf32"
    return CudaPrecision(
        tf32_matmul=tf32, tf32_cudnn=tf32, cudnn_benchmark=False, cudnn_deterministic=True
    )


def current_cuda_precision() -> CudaPrecision:
    """The settings torch holds now (what a record says ran)."""
    import torch

    return CudaPrecision(
        tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
    )


def apply_cuda_precision(settings: CudaPrecision) -> CudaPrecision:
    """Set torch's process-wide flags to ``settings`` and return them as read back. The flags are
    plain settings (this runs on a machine without CUDA too: the tests read them back); the
    runner applies them only when the cell runs on CUDA."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = settings.tf32_matmul
    torch.backends.cudnn.allow_tf32 = settings.tf32_cudnn
    torch.backends.cudnn.benchmark = settings.cudnn_benchmark
    torch.backends.cudnn.deterministic = settings.cudnn_deterministic
    return current_cuda_precision()


class LossScaler:
    """``backward`` + ``step`` of one training step, the only shared implementation (FLESD's
    included).

    Disabled (fp32, bf16), it is ``loss.backward(); optimizer.step()``. Enabled (fp16), it scales
    the loss, unscales the gradients, skips the step when they hold inf/NaN and adapts the scale
    (torch.amp.GradScaler, which also works on the CPU); ``skipped`` counts the steps skipped that
    way.
    """

    def __init__(self, *, enabled: bool, device: torch.device) -> None:
        import torch

        self.enabled = enabled
        # built only when it scales: the disabled scaler is made once per client per round
        # (perf/p8)
        self._scaler = torch.amp.GradScaler(device.type) if enabled else None
        self.skipped = 0

    def backward(self, loss: torch.Tensor) -> None:
        (self._scaler.scale(loss) if self._scaler is not None else loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring the gradients to their true scale before clipping them (a no-op when disabled)."""
        if self._scaler is not None:
            self._scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step (skipped on non-finite gradients in fp16) and the scale update; True
        if it stepped."""
        setattr(optimizer, _SCALED, True)
        try:
            if self._scaler is None:
                optimizer.step()
                return True
            before = self._scaler.get_scale()
            self._scaler.step(optimizer)
        finally:
            setattr(optimizer, _SCALED, False)
        self._scaler.update()
        stepped = self._scaler.get_scale() >= before
        self.skipped += not stepped
        return stepped


def full_precision(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` in fp32; call inside ``torch.autocast(..., enabled=False)`` (see
    :func:`no_autocast`) so the maths that follows stays in fp32 under an enclosing autocast region."""
    return tuple(t.float() for t in tensors)


def fp32_math(fn: F) -> F:
    """Run ``fn`` with autocast off and its floating-point tensor arguments in fp32, whatever the
    enclosing precision.

    For the quantities the policy keeps in fp32 (similarity matrices, Sinkhorn, cluster logits,
    distillation targets): under autocast a matmul of fp32 inputs is cast back to fp16/bf16, so
    ``.float()`` alone is not enough. In an fp32 cell it changes nothing (``.float()`` of an fp32
    tensor is the tensor itself)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import torch

        device_type = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
        args = tuple(_as_fp32(a) for a in args)
        kwargs = {k: _as_fp32(v) for k, v in kwargs.items()}
        with torch.autocast(device_type, enabled=False):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _as_fp32(value: Any) -> Any:
    import torch

    if (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.dtype != torch.float32
    ):
        return value.float()
    return value


def no_autocast(device_type: str) -> contextlib.AbstractContextManager:
    """A region where autocast is off: matmuls run in their inputs' dtype (cast them with
    :func:`full_precision`)."""
    import torch

    return torch.autocast(device_type, enabled=False)


def _guard_hook(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    if not getattr(optimizer, _SCALED, False):
        raise PrecisionError(
            f"{type(optimizer).__name__}.step() ran in an fp16 cell without the gradient scaler: take the step "
            "through ctx.precision.scaler(device).step(optimizer) (benchmark.core.precision.LossScaler)"
        )


@contextlib.contextmanager
def guard_fp16_steps(precision: Precision) -> Iterator[None]:
    """While active in an fp16 cell, an optimizer step not taken by :meth:`LossScaler.step` raises
    PrecisionError."""
    if precision.name != "fp16":
        yield
        return
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    handle = register_optimizer_step_pre_hook(_guard_hook)
    try:
        yield
    finally:
        handle.remove()
