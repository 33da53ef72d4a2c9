"""What the fine-tuning tasks share: the classifier (backbone + a linear head), the training loop
over a task's batches, and the top-1 read of a split.

Each task keeps its own recipe (optimiser, learning-rate schedule, augmentation, batch order) and
hands the loop its batches; the loop runs the same steps for both, in the same order, so a recipe's
numbers do not depend on which task drives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import DatasetSplit, normalize
from tasks.divergence import LossWatch


class Classifier(nn.Module):
    """backbone (pooled features) → Linear(d, C).

    ``head_init_std``: the head's weights drawn from a truncated normal of that deviation and its
    bias zeroed (MAE's fine-tuning); None keeps ``nn.Linear``'s own initialisation.
    """

    def __init__(
        self,
        backbone: nn.Module,
        feat_dim: int,
        num_classes: int,
        head_init_std: float | None = None,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feat_dim, num_classes)
        if head_init_std is not None:
            nn.init.trunc_normal_(self.head.weight, std=head_init_std)
            nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# steps between the host's looks at the losses (tasks/divergence.py): a diverged fine-tune trains on
# at most this many steps before it is stopped
DIVERGENCE_CHECK_STEPS = 100


def fine_tune(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    opt: torch.optim.Optimizer,
    *,
    loss_fn: Loss,
    what: str,
    after_step: Callable[[], None] | None = None,
) -> tuple[int, float]:
    """Train ``model`` on ``batches`` ((inputs, targets) on the model's device, each drawn just
    before its step): one optimiser step per batch, ``after_step`` after each (a scheduler's step).
    Returns (steps, the last step's loss); a non-finite loss raises ``Diverged`` naming ``what``
    and the step where it first happened. No host read per step: the losses are looked at every
    ``DIVERGENCE_CHECK_STEPS`` steps and at the end (:class:`tasks.divergence.LossWatch`)."""
    watch = LossWatch(what, every=DIVERGENCE_CHECK_STEPS)
    for x, target in batches:
        loss = loss_fn(model(x), target)
        watch.see(loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if after_step is not None:
            after_step()
    last = watch.check()
    return watch.steps, 0.0 if last is None else last


@torch.no_grad()
def evaluate(
    model: nn.Module,
    split: DatasetSplit,
    *,
    mean,
    std,
    device: torch.device,
    size: int | None = None,
    batch_size: int = 512,
) -> tuple[float, int]:
    """(top-1 %, samples scored) over every sample of ``split`` (read once), model in eval mode, no
    augmentation; with ``size``, a bicubic resize to it only when the images are not already that
    size."""
    model.eval()
    images, labels = split.images, torch.as_tensor(split.labels)
    correct = 0
    for start in range(0, len(labels), batch_size):
        x = normalize(images[start : start + batch_size].to(device).float().div_(255.0), mean, std)
        if size is not None and (x.shape[-1] != size or x.shape[-2] != size):
            x = F.interpolate(
                x, size=(size, size), mode="bicubic", align_corners=False, antialias=True
            )
        correct += int((model(x).argmax(1).cpu() == labels[start : start + batch_size]).sum())
    return 100.0 * correct / max(len(labels), 1), len(labels)
