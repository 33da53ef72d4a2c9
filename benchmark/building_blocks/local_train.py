"""The client's local loop, written once: epochs over shuffled batches, optimizer steps, non-finite
loss policy; and the one way to measure it (:func:`probe_steps`, ``doctor --calibrate``)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from benchmark.contracts.types import Diverged, RoundContext
from benchmark.contracts.unlabeled_view import UnlabeledView
from benchmark.core.host_to_device import to_device
from benchmark.core.precision import LossScaler


@dataclass
class LocalStats:
    steps: int = 0
    batches: int = 0
    loss_sum: float = 0.0
    skipped: int = 0
    scaler_skipped: int = 0  # fp16 only: steps the loss scaler skipped on non-finite gradients
    losses: list[float] = field(default_factory=list)
    # training examples the optimizer steps drew (an image once per step, however many views of it):
    # the sample budget the leaderboard shows beside the step budget
    samples: int = 0

    def as_dict(self) -> dict[str, float]:
        out = {
            "loss": self.loss_sum / max(self.steps, 1),
            "steps": float(self.steps),
            "samples": float(self.samples),
            "skipped_steps": float(self.skipped),
        }
        if self.scaler_skipped:
            out["scaler_skipped_steps"] = float(self.scaler_skipped)
        return out


@dataclass(frozen=True)
class UpdateTiming:
    """One local update as :func:`probe_steps` saw it: optimizer steps, images in them, and the
    seconds of its step loop (the device synchronised at both ends: the client's data copy before
    the loop and the host read of its losses after it are not in ``loop_s``)."""

    steps: int
    samples: int
    loop_s: float
    batch_size: int = 0  # the update's batch size (a client smaller than it may take no step)


@dataclass(frozen=True)
class StepReplay:
    """What a bare loop needs to repeat the last probed update's step: the method's own step
    function, optimizer, gradient scaler and after-step hook, one of its batches (on the device),
    the precision and the device."""

    step_loss: Callable[[torch.Tensor], torch.Tensor]
    optimizer: torch.optim.Optimizer
    after_step: Callable[[], None] | None
    batch: torch.Tensor
    precision: object  # benchmark.core.precision.Precision
    device: torch.device


@dataclass
class StepProbe:
    """Measurement of every local update run while :func:`probe_steps` is active."""

    max_steps: int | None = None  # cap on each update's optimizer steps (None: the full epochs)
    updates: list[UpdateTiming] = field(default_factory=list)
    last: StepReplay | None = None

    def start(self, device: torch.device) -> float:
        synchronize(device)
        return time.perf_counter()

    def finish(self, t0: float, steps: int, samples: int, ctx: RoundContext, step: tuple) -> None:
        """End of an update's step loop: its timing, and ``step`` = (step_loss, optimizer,
        after_step, last batch, batch size) kept for a replay when it took a step."""
        synchronize(ctx.device)
        step_loss, optimizer, after_step, batch, batch_size = step
        self.updates.append(UpdateTiming(steps, samples, time.perf_counter() - t0, batch_size))
        if batch is not None:
            self.last = StepReplay(
                step_loss, optimizer, after_step, batch, ctx.precision, ctx.device
            )


_PROBE: ContextVar[StepProbe | None] = ContextVar("fssl_step_probe", default=None)
# True while a local update's step loop runs (``run_local_epochs``): what the calibration's
# synchronisation watch (benchmark.calibration.sync) reads to tell a step's host synchronisation
# (a failed check) from one outside the steps (data copies, evaluation, checkpoints: reported)
_IN_STEPS: ContextVar[bool] = ContextVar("fssl_in_steps", default=False)


def in_step_loop() -> bool:
    """Whether the caller runs inside a local update's step loop."""
    return _IN_STEPS.get()


@contextlib.contextmanager
def probe_steps(max_steps: int | None = None) -> Iterator[StepProbe]:
    """Measure the local loop of every :func:`run_local_epochs` call inside the block (this thread
    or task only), optionally capping each call at ``max_steps`` optimizer steps.

    For ``doctor --calibrate`` only: a capped update is not the cell's training, so nothing run
    under a cap may become a leaderboard record. Outside the block ``run_local_epochs`` neither
    synchronises the device nor keeps a reference to anything.
    """
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    probe = StepProbe(max_steps=max_steps)
    token = _PROBE.set(probe)
    try:
        yield probe
    finally:
        _PROBE.reset(token)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on the CPU, whose work is synchronous."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def local_drop_last(num_examples: int, batch_size: int, drop_last: bool | None) -> bool:
    """The small-client policy every method's local loop obeys (docs/protocols/small-clients.md):
    a partial last batch is dropped only when the client also has a full one. A client with fewer
    images than a batch (but at least two) trains one batch of all of them each epoch, whatever the
    method's loader does with the partial batch of a larger client (``drop_last``: True drops it,
    False keeps it, None is the Dec-SSL rule, which is this policy)."""
    return drop_last is not False and num_examples > batch_size


def _batches(
    view: UnlabeledView,
    batch_size: int,
    ctx: RoundContext,
    epochs: int,
    drop_last: bool | None,
    cap: int | None,
) -> Iterator[torch.Tensor]:
    """The update's index batches, epoch after epoch; at most ``cap`` of them when capped."""
    n = 0
    drop_last = local_drop_last(len(view), batch_size, drop_last)
    for _ in range(epochs):
        for idx in view.batch_indices(batch_size, ctx.generator, drop_last=drop_last):
            if cap is not None and n >= cap:
                return
            n += 1
            yield idx


def run_local_epochs(
    view: UnlabeledView,
    step_loss: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    ctx: RoundContext,
    *,
    batch_size: int,
    epochs: int,
    drop_last: bool | None = None,
    nan_policy: str = "raise",
    after_step: Callable[[], None] | None = None,
    scaler: LossScaler | None = None,
) -> LocalStats:
    """Run ``epochs`` passes of ``step_loss`` over ``view`` with batches shuffled by
    ``ctx.generator``.

    ``step_loss(uint8_batch_on_device) -> scalar loss``; augmentation happens inside it on the
    device. A non-finite loss raises :class:`Diverged` (``nan_policy="raise"``, the project rule) or
    skips the step (``"skip"``, the Dec-SSL code's behaviour, counted in ``skipped_steps``).

    The forward pass runs under the cell's precision (``ctx.precision``: autocast to bf16/fp16, none
    in fp32) and every step goes through a :class:`LossScaler` (dynamic loss scaling in fp16;
    ``scaler`` lets a caller keep one across calls, as FLESD's local and distillation phases do).
    Steps the fp16 scaler skips on inf/NaN gradients are counted in ``scaler_skipped_steps``.
    """
    stats = LocalStats()
    scaler = scaler if scaler is not None else ctx.precision.scaler(ctx.device)
    skipped_before = scaler.skipped
    view = view.to(ctx.device)
    # nan_policy "raise": the step losses stay on the device and are read once, when the update ends
    # (a host read per step would stall a GPU's queue every step); a non-finite one then raises
    # Diverged and the update is discarded. Until then the steps after a non-finite loss still run
    # (on NaN weights), so a step function and an ``after_step`` hook must not raise on NaN inputs
    # themselves. "skip" must decide before each step: it reads each.
    pending: list[torch.Tensor] = []
    probe = _PROBE.get()  # doctor --calibrate's measurement (probe_steps), else None
    t0 = probe.start(ctx.device) if probe is not None else 0.0
    batch = None
    in_steps = _IN_STEPS.set(True)  # the synchronisation watch attributes what it catches
    try:
        for idx in _batches(view, batch_size, ctx, epochs, drop_last, probe and probe.max_steps):
            # the batch's indices, drawn on the host: copied from pinned memory, no wait
            batch = view.images[to_device(idx, view.images.device)]
            with ctx.precision.autocast(ctx.device):
                loss = step_loss(batch)
            stats.batches += 1
            if nan_policy == "raise":
                pending.append(loss.detach())
            else:
                value = float(loss.detach())
                if not math.isfinite(value):
                    stats.skipped += 1
                    optimizer.zero_grad(set_to_none=True)
                    continue
                stats.loss_sum += value
                stats.losses.append(value)
            optimizer.zero_grad(set_to_none=True)
            scaler.backward(loss)
            scaler.step(optimizer)
            if after_step is not None:
                after_step()
            stats.steps += 1
            stats.samples += len(idx)
    finally:
        _IN_STEPS.reset(in_steps)
    if probe is not None:
        step = (step_loss, optimizer, after_step, batch, batch_size)
        probe.finish(t0, stats.steps, stats.samples, ctx, step)
    if pending:
        _read_losses(pending, stats, ctx)
    stats.scaler_skipped = scaler.skipped - skipped_before
    return stats


def _read_losses(pending: list[torch.Tensor], stats: LocalStats, ctx: RoundContext) -> None:
    """The one host read of an update's losses (float64 holds a float32/bf16/fp16/float64 loss
    exactly): a non-finite one raises Diverged naming its step, else their sum into ``stats``."""
    values = torch.stack([v.reshape(()) for v in pending]).double().cpu().tolist()
    bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if bad is not None:
        raise Diverged(
            f"non-finite loss {values[bad]} at client {ctx.client_id}, round {ctx.round}, step {bad + 1}"
        )
    for value in values:  # the same float64 sum, in the same order, as reading each step
        stats.loss_sum += value
    stats.losses = values


class IndexView:
    """A view whose "images" are the row indices 0..n−1, so :func:`run_local_epochs` batches rows: a
    step that also needs labels or per-row targets looks them up by the same indices (Dec-SL,
    FeatARC)."""

    def __init__(self, n: int, mean, std) -> None:
        self.n, self.mean, self.std = n, mean, std
        self.images = torch.arange(n)

    def __len__(self) -> int:
        return self.n

    def to(self, device):
        return self

    def batch_indices(self, batch_size, generator, *, drop_last=None, shuffle=True):
        return UnlabeledView.batch_indices(
            self, batch_size, generator, drop_last=drop_last, shuffle=shuffle
        )
