"""A task's training loop watches its loss without a host read per step.

``if not torch.isfinite(loss)`` and ``float(loss)`` after every step each wait for the device's
queue (on a GPU: a stall per step). :class:`LossWatch` keeps the first non-finite loss and its step
on the device and the host looks at them only when asked (``check``: once per epoch, or every
``every`` steps), in one read. A finite run computes exactly what a per-step check computes; a
diverged one trains on at most until the next check before it stops (its model is discarded)."""

from __future__ import annotations

import torch

from benchmark.api import Diverged


class LossWatch:
    """The losses of one training loop: ``see(loss)`` after each step's forward, ``check()`` where
    the loop may read (raises :class:`Diverged` naming ``what`` and the first non-finite step)."""

    def __init__(self, what: str, *, every: int = 0) -> None:
        self.what, self.every = what, every
        self.steps = 0
        self._last: torch.Tensor | None = None
        self._first_bad: torch.Tensor | None = None  # 1-based step of the first non-finite loss
        self._bad_loss: torch.Tensor | None = None

    def see(self, loss: torch.Tensor) -> None:
        """Record this step's loss (no host read); every ``every`` steps, ``check``."""
        last = loss.detach().reshape(())
        if self._first_bad is None:
            self._first_bad = torch.zeros((), dtype=torch.long, device=last.device)
            self._bad_loss = torch.zeros((), dtype=last.dtype, device=last.device)
        self.steps += 1
        new_bad = (self._first_bad == 0) & ~torch.isfinite(last)
        self._first_bad = torch.where(new_bad, self.steps, self._first_bad)
        self._bad_loss = torch.where(new_bad, last, self._bad_loss)
        self._last = last
        if self.every and self.steps % self.every == 0:
            self.check()

    def check(self) -> float | None:
        """The last loss seen (None before any), after one host read; raises ``Diverged`` when a
        loss seen so far was not finite."""
        if self._last is None:
            return None
        at, bad, last = (
            torch.stack([self._first_bad.double(), self._bad_loss.double(), self._last.double()])
            .cpu()
            .tolist()
        )
        if at:
            raise Diverged(f"{self.what} loss became {bad} at step {int(at)}")
        return last


__all__ = ["LossWatch"]
