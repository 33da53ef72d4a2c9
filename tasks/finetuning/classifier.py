"""What the fine-tuning tasks share: the classifier (backbone + a linear head), the training loop
over a task's batches, the top-1 read of a split, and :class:`LabelledFineTune`, a task that
fine-tunes each member on a class-balanced label subset and reads the test split once.

Each task keeps its own recipe (optimiser, learning-rate schedule, augmentation, batch order) and
hands the loop its batches; the loop runs the same steps for both, in the same order, so a recipe's
numbers do not depend on which task drives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import DatasetSplit, DatasetSplits, Encoder, TaskContext, normalize
from tasks.divergence import LossWatch
from tasks.members import modules_of, score_each_member
from tasks.subsets import class_balanced_subset, subset_record
from tasks.task_base import Scored, TaskBase


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


class LabelledFineTune(TaskBase):
    """Fine-tuning on a class-balanced subset (``cfg.label_fraction``, ``cfg.subset_seed``;
    docs/protocols/evaluation.md §2.3) of the training split of ``data(...)``: ``recipe``
    fine-tunes a deep copy of each member with a new head, and the full test split is read once per
    member (selection ``final``). The extra record: the members' aggregation, the subset
    (``subset_record``), the first member's recipe statistics and test count, ``data_extra``."""

    # whether test images are resized to the encoder's input size (when they differ from it)
    resize_test: ClassVar[bool] = False
    # the labelled subset and the test split of ``data(...)``, never the partition
    reads_partition: ClassVar[bool] = False

    def data(self, encoder: Encoder, ctx: TaskContext) -> DatasetSplits:
        """The dataset fine-tuned and tested on (the cell's own unless overridden)."""
        return ctx.dataset

    def recipe(
        self, backbone: nn.Module, feat_dim: int, train: DatasetSplit, **kw: Any
    ) -> tuple[nn.Module, dict[str, Any]]:
        """(fine-tuned model, statistics); ``kw``: mean, std, size, seed, device."""
        raise NotImplementedError

    def data_extra(self, ds: DatasetSplits) -> dict[str, Any]:
        return {}

    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        c = self.cfg
        ds = self.data(encoder, ctx)
        idx = class_balanced_subset(
            ds.train.labels, c.label_fraction, c.subset_seed, ds.num_classes
        )
        labelled = ds.train.subset(idx)

        def one(member: int) -> tuple[float, dict[str, Any]]:
            model, stats = self.recipe(
                modules_of(encoder)[member],
                encoder.feat_dim,
                labelled,
                mean=encoder.mean,
                std=encoder.std,
                size=encoder.input_size,
                seed=ctx.seed,
                device=ctx.device,
            )
            top1, n = evaluate(
                model,
                ds.test,
                mean=encoder.mean,
                std=encoder.std,
                size=encoder.input_size if self.resize_test else None,
                device=ctx.device,
            )  # the only read of the test split
            return top1, {**stats, "test_samples": n}

        values, extra, sides = score_each_member(encoder, one, self.main_metric)
        return values, {
            **extra,
            **subset_record(ds.train.labels, idx, c.label_fraction, ds.num_classes),
            **sides[0],
            **self.data_extra(ds),
        }
