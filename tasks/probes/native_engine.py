"""The probe engine of the papers' own evaluation protocols (docs/protocols/evaluation.md §3.3,
§3.5, §3.6): ONE engine driven by card fields; ``tasks/probes/native_probe.py`` holds its tasks.

Every behaviour comes from the resolved card (``tasks/cards/*.json`` plus the task's overrides),
never from a branch on the card's name: optimizer (sgd / adam / adamw; lr scaled by
batch/``lr_reference_batch`` when set), schedule (``cosine_per_step`` stepped every iteration,
``multistep_per_epoch``, ``constant``), epochs, batch size, shuffle and drop_last of the train
loader, test batch size and drop_last, the batched train augmentation
(:func:`benchmark.api.augment`), normalisation (the encoder's or the card's), BN mode of the
backbone (``eval``; ``train_first_epoch``: Dec-SSL's classifier module is in train mode during epoch
1 only, so the frozen backbone's running statistics move on augmented images; ``train ...``: BN in
train mode while training), head initialisation (``pytorch default`` or MoCo's ``normal(0, 0.01),
bias 0``), trainable parameters (``head`` or ``all``), loss (``cross_entropy`` or
``log_softmax_nll``), cached features (EasyFL) or features recomputed every step, selection
(``final``: the test split is read once, after the last epoch; ``best_epoch_test``: the test split
after every epoch and the maximum reported, which selects on the test set) and metric
(``top1_samples`` over the scored samples, or EasyFL's ``top1_batch_mean``, the mean of per-batch
accuracies).

The encoder is never mutated: the engine works on a deep copy (Dec-SSL's probe changes BN buffers).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    AugmentConfig,
    DatasetSplit,
    Encoder,
    Stream,
    adam,
    adamw,
    augment,
    normalize,
    rows_to,
    scoped_torch_seed,
    to_device,
    torch_gen,
)
from tasks.divergence import LossWatch

# ------------------------------------------------------------------------------------------ pure
# pieces


def effective_lr(s: Mapping[str, Any]) -> float:
    """lr x batch / reference batch when the card scales it (Orchestra: 30 x bs/256), else the
    card's lr."""
    ref = s.get("lr_reference_batch")
    return float(s["lr"]) * (int(s["batch_size"]) / int(ref) if ref else 1.0)


def batch_indices(
    n: int, batch_size: int, *, shuffle: bool, drop_last: bool, gen: torch.Generator | None = None
) -> list[torch.Tensor]:
    """One epoch of index batches: a fresh permutation when shuffling, index order otherwise;
    drop_last drops the trailing incomplete batch (10,000 test images in batches of 256 → 39
    batches, 9,984 scored)."""
    order = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    out = list(order.split(batch_size))
    if drop_last and out and len(out[-1]) < batch_size:
        out.pop()
    return out


def scored_count(n: int, batch_size: int, drop_last: bool) -> int:
    return (n // batch_size) * batch_size if drop_last else n


def augment_config(raw: Any) -> AugmentConfig | None:
    if not isinstance(raw, Mapping):
        return None  # "none"
    return AugmentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


def norm_stats(
    s: Mapping[str, Any], encoder: Encoder
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The encoder's pre-training statistics unless the card fixes its own (Orchestra / MoCo: mean =
    std = 0.5)."""
    raw = s.get("normalisation", "encoder")
    if isinstance(raw, Mapping):
        return tuple(raw["mean"]), tuple(raw["std"])
    return tuple(encoder.mean), tuple(encoder.std)


def make_head(
    feat_dim: int, num_classes: int, s: Mapping[str, Any], seed: int, path: int
) -> nn.Linear:
    with scoped_torch_seed(seed, Stream.TASK, path, 1):
        head = nn.Linear(feat_dim, num_classes, bias=bool(s.get("head_bias", True)))
    init = str(s.get("head_init", "pytorch default"))
    if init.startswith("normal(0, 0.01)"):  # MoCo main_lincls: fc.weight ~ N(0, 0.01), fc.bias = 0
        with torch.no_grad():
            head.weight.normal_(0.0, 0.01, generator=torch_gen(seed, Stream.TASK, path, 3))
            if head.bias is not None:
                head.bias.zero_()
    elif not init.startswith("pytorch default"):
        raise ValueError(f"unknown head_init {init!r}")
    return head


def make_optimizer(params: list[nn.Parameter], s: Mapping[str, Any]) -> torch.optim.Optimizer:
    name, lr, wd = s["optimizer"], effective_lr(s), float(s.get("weight_decay") or 0.0)
    if name == "sgd":
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=float(s.get("momentum") or 0.0),
            nesterov=bool(s.get("nesterov", False)),
            weight_decay=wd,
        )
    if name in ("adam", "adamw"):
        build = adam if name == "adam" else adamw
        return build(params, lr=lr, betas=tuple(s.get("betas") or (0.9, 0.999)), weight_decay=wd)
    raise ValueError(f"unknown optimizer {name!r}")


def make_schedule(
    opt: torch.optim.Optimizer, s: Mapping[str, Any], steps_per_epoch: int
) -> tuple[Any, str]:
    """(scheduler or None, 'step' | 'epoch'): when the engine calls ``scheduler.step()``."""
    kind = s.get("schedule", "constant")
    if s.get("warmup"):
        raise ValueError("warmup is not supported by the native probe engine")
    if kind == "cosine_per_step":  # cosine to 0 over all iterations (Orchestra: per iteration)
        total = max(1, int(s["epochs"]) * steps_per_epoch)
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total, eta_min=0.0), "step"
    if kind == "multistep_per_epoch":  # MoCo lincls: lr x gamma at each milestone epoch
        return torch.optim.lr_scheduler.MultiStepLR(
            opt, milestones=list(s["milestones"]), gamma=float(s["gamma"])
        ), "epoch"
    if kind == "constant":
        return None, "epoch"
    raise ValueError(f"unknown schedule {kind!r}")


def loss_fn(logits: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    # Dec-SSL: the classifier ends in log_softmax, trained with NLLLoss
    if kind == "log_softmax_nll":
        return F.nll_loss(F.log_softmax(logits, dim=1), y)
    if kind == "cross_entropy":
        return F.cross_entropy(logits, y)
    raise ValueError(f"unknown loss {kind!r}")


def batch_mean_accuracy(correct: list[int], sizes: list[int]) -> float:
    """EasyFL's metric: the mean over test batches of each batch's accuracy (a short last batch
    weighs the same)."""
    return 100.0 * float(np.mean([c / n for c, n in zip(correct, sizes)])) if sizes else 0.0


# ------------------------------------------------------------------------------------------ the
# engine


class Probe(nn.Module):
    def __init__(self, backbone: nn.Module, head: nn.Linear) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


@dataclass(frozen=True)
class ProbeResult:
    value: float  # the reported number under the card's selection and metric
    # test metric after each evaluated epoch (one entry for `final` cards)
    per_epoch_test: tuple[float, ...]
    test_evaluations: int
    test_scored: int
    train_batches_per_epoch: int
    final_train_loss: float


def _bn_train_during(s: Mapping[str, Any], epoch: int) -> bool:
    mode = str(s["bn_mode"])
    if mode == "eval":
        return False
    if mode == "train_first_epoch":
        return epoch == 1
    if mode.startswith("train"):
        return True
    raise ValueError(f"unknown bn_mode {mode!r}")


@torch.no_grad()
def evaluate_split(
    forward: Callable[[torch.Tensor], torch.Tensor],
    inputs: Callable[[torch.Tensor], torch.Tensor],
    labels: torch.Tensor,
    s: Mapping[str, Any],
    device: torch.device,
) -> tuple[float, int]:
    """(metric, samples scored) over the test split in index order, batches of
    ``test_batch_size``."""
    n = labels.shape[0]
    bs = int(s.get("test_batch_size") or 512)
    hits, sizes = [], []
    on_device = to_device(labels, device)
    for idx in batch_indices(n, bs, shuffle=False, drop_last=bool(s.get("test_drop_last", False))):
        pred = forward(inputs(idx)).argmax(1)
        hits.append((pred == on_device[to_device(idx, device)]).sum())
        sizes.append(len(idx))
    # the one host read of an evaluation: every batch's count of correct predictions
    correct = [int(c) for c in torch.stack(hits).cpu().tolist()] if hits else []
    scored = sum(sizes)
    if scored == 0:
        raise ValueError(
            f"{n} test images make no full test batch of {bs} with drop_last: nothing would be scored"
        )
    if s["metric"] == "top1_batch_mean":
        return batch_mean_accuracy(correct, sizes), scored
    if s["metric"] == "top1_samples":
        return 100.0 * sum(correct) / max(scored, 1), scored
    raise ValueError(f"unknown metric {s['metric']!r}")


@dataclass(frozen=True)
class ProbeIO:
    """How a probe reads its data: a batch's inputs from its indices (train, test) and the forward
    pass that trains on them or scores them."""

    train_in: Callable[[torch.Tensor], torch.Tensor]
    test_in: Callable[[torch.Tensor], torch.Tensor]
    train_fwd: Callable[[torch.Tensor], torch.Tensor]
    test_fwd: Callable[[torch.Tensor], torch.Tensor]


def check_engine_card(s: Mapping[str, Any]) -> bool:
    """Refuse what the engine does not implement; returns whether the test split is read after every
    epoch."""
    if s["trainable"] not in ("head", "all"):
        raise ValueError(f"unknown trainable {s['trainable']!r}")
    selection = s["selection"]
    if selection not in ("final", "best_epoch_test"):
        raise ValueError(
            f"the probe engine implements selection final and best_epoch_test, not {selection!r}"
        )
    every_epoch = bool(s.get("test_every_epoch", False))
    if (selection == "best_epoch_test") != every_epoch:
        raise ValueError(
            "best_epoch_test needs test_every_epoch, and final reads the test split once"
        )
    return every_epoch


def plain_inputs(
    split: DatasetSplit, mean: tuple[float, ...], std: tuple[float, ...], device: torch.device
) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda idx: normalize(rows_to(split.images, idx, device), mean, std)


def cached_io(
    model: Probe,
    train: DatasetSplit,
    test: DatasetSplit,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    device: torch.device,
) -> ProbeIO:
    """EasyFL: features once, eval mode, no augmentation; the head trains on them."""
    model.backbone.eval()
    with torch.no_grad():
        feats = {
            name: torch.cat(
                [
                    model.backbone(plain_inputs(sp, mean, std, device)(idx)).float()
                    for idx in batch_indices(len(sp), 512, shuffle=False, drop_last=False)
                ]
            )
            for name, sp in (("train", train), ("test", test))
        }
    return ProbeIO(
        train_in=lambda idx: feats["train"][to_device(idx, feats["train"].device)],
        test_in=lambda idx: feats["test"][to_device(idx, feats["test"].device)],
        train_fwd=model.head,
        test_fwd=model.head,
    )


def live_io(
    model: Probe,
    train: DatasetSplit,
    test: DatasetSplit,
    s: Mapping[str, Any],
    *,
    aug: AugmentConfig | None,
    gen_aug: torch.Generator,
    size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    device: torch.device,
) -> ProbeIO:
    """Images through the backbone at every step (augmented as the card says); a frozen backbone
    runs without gradients."""

    def train_in(idx: torch.Tensor) -> torch.Tensor:
        x = rows_to(train.images, idx, device)
        if aug is None:  # the batch's rows, normalised (plain_inputs)
            return normalize(x, mean, std)
        return augment(x, aug, gen_aug, size=size, mean=mean, std=std)

    def train_fwd(x: torch.Tensor) -> torch.Tensor:
        if s["trainable"] == "head":
            with torch.no_grad():
                f = model.backbone(x)
            return model.head(f)
        return model(x)

    return ProbeIO(
        train_in=train_in,
        test_in=plain_inputs(test, mean, std, device),
        train_fwd=train_fwd,
        test_fwd=model,
    )


def train_epoch(
    model: Probe,
    io: ProbeIO,
    batches: Iterable[torch.Tensor],
    train_y: torch.Tensor,
    s: Mapping[str, Any],
    *,
    opt: torch.optim.Optimizer,
    sched: Any,
    when: str,
    epoch: int,
    device: torch.device,
) -> float | None:
    """One epoch of steps; returns the last step's loss (None when no step ran)."""
    model.train()
    trainable = s["trainable"]
    model.backbone.train(
        _bn_train_during(s, epoch) if trainable == "head" else str(s["bn_mode"]) != "eval"
    )
    # the losses stay on the device and are read once, when the epoch ends (tasks/divergence.py)
    watch = LossWatch(f"native probe (epoch {epoch})")
    for idx in batches:
        if trainable == "all" and len(idx) < 2 and model.backbone.training:
            # DEVIATION: BatchNorm in train mode cannot normalise one sample (as semisup@v1)
            continue
        loss = loss_fn(
            io.train_fwd(io.train_in(idx)),
            rows_to(train_y, idx, device),
            str(s["loss"]),
        )
        watch.see(loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None and when == "step":
            sched.step()
    if sched is not None and when == "epoch":
        sched.step()
    return watch.check()


def probe_io(
    model: Probe,
    train: DatasetSplit,
    test: DatasetSplit,
    s: Mapping[str, Any],
    *,
    size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    gen_aug: torch.Generator,
    device: torch.device,
) -> ProbeIO:
    """Cached features (the card's ``cached``: no augmentation, a frozen backbone, BN in eval mode)
    or images through the backbone at every step."""
    aug = augment_config(s.get("train_augmentation"))
    if bool(s.get("cached", False)):
        if aug is not None or s["trainable"] != "head" or str(s["bn_mode"]) != "eval":
            raise ValueError(
                "cached features need no augmentation, a frozen backbone and BN in eval mode"
            )
        return cached_io(model, train, test, mean, std, device)
    return live_io(
        model,
        train,
        test,
        s,
        aug=aug,
        gen_aug=gen_aug,
        size=size,
        mean=mean,
        std=std,
        device=device,
    )


def build_probe(
    backbone: nn.Module,
    feat_dim: int,
    train: DatasetSplit,
    s: Mapping[str, Any],
    *,
    seed: int,
    path: int,
    device: torch.device,
) -> tuple[Probe, list[nn.Parameter]]:
    """A deep copy of ``backbone`` with the card's head, and the parameters that train."""
    trainable = s["trainable"]
    model = Probe(
        copy.deepcopy(backbone), make_head(feat_dim, train.num_classes, s, seed, path)
    ).to(device)
    for p in model.backbone.parameters():
        p.requires_grad_(trainable == "all")
    params = [p for p in (model.parameters() if trainable == "all" else model.head.parameters())]
    return model, params


def run_probe(
    backbone: nn.Module,
    feat_dim: int,
    train: DatasetSplit,
    test: DatasetSplit,
    s: Mapping[str, Any],
    *,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    size: int,
    seed: int,
    device: torch.device,
    path: int,
    on_epoch_end: Callable[[int, Probe], None] | None = None,
) -> ProbeResult:
    """Train a head (or everything) on a deep copy of ``backbone`` as the card ``s`` says; returns
    the result."""
    every_epoch = check_engine_card(s)
    model, params = build_probe(backbone, feat_dim, train, s, seed=seed, path=path, device=device)
    train_y = torch.as_tensor(train.labels, dtype=torch.long)
    test_y = torch.as_tensor(test.labels, dtype=torch.long)
    io = probe_io(
        model,
        train,
        test,
        s,
        size=size or int(train.images.shape[-1]),
        mean=mean,
        std=std,
        gen_aug=torch_gen(seed, Stream.TASK, path, 4),
        device=device,
    )
    gen_order = torch_gen(seed, Stream.TASK, path, 2)
    bs, epochs = int(s["batch_size"]), int(s["epochs"])
    shuffle, drop_last = bool(s["shuffle"]), bool(s["drop_last"])
    steps_per_epoch = len(train) // bs if drop_last else math.ceil(len(train) / bs)
    if steps_per_epoch == 0:
        raise ValueError(f"{len(train)} training images make no full batch of {bs} with drop_last")
    opt = make_optimizer(params, s)
    sched, when = make_schedule(opt, s, steps_per_epoch)
    per_epoch: list[float] = []
    evaluations, scored, last_loss = 0, 0, 0.0

    def test_once() -> float:
        nonlocal evaluations, scored
        model.eval()
        value, scored = evaluate_split(io.test_fwd, io.test_in, test_y, s, device)
        evaluations += 1
        return value

    for epoch in range(1, epochs + 1):
        batches = batch_indices(len(train), bs, shuffle=shuffle, drop_last=drop_last, gen=gen_order)
        loss = train_epoch(
            model,
            io,
            batches,
            train_y,
            s,
            opt=opt,
            sched=sched,
            when=when,
            epoch=epoch,
            device=device,
        )
        last_loss = last_loss if loss is None else loss
        if every_epoch:
            per_epoch.append(test_once())
        if on_epoch_end is not None:
            on_epoch_end(epoch, model)
    if not every_epoch:
        per_epoch.append(test_once())  # `final`: the test split is read once, here
    return ProbeResult(
        value=max(per_epoch) if s["selection"] == "best_epoch_test" else per_epoch[-1],
        per_epoch_test=tuple(per_epoch),
        test_evaluations=evaluations,
        test_scored=scored,
        train_batches_per_epoch=steps_per_epoch,
        final_train_loss=last_loss,
    )
