"""The papers' own evaluation protocols (docs/protocols/evaluation.md §3.3, §3.5, §3.6) as tasks of
ONE probe engine driven by card fields (``tasks/probes/native_engine.py``, which says what each
field does).

Tasks: ``linear_native`` (card ``orchestra`` | ``decssl`` | ``easyfl`` | ``moco-lincls``),
``semisup_native`` (card ``orchestra``) and ``transfer_native`` (card ``decssl``). Their scores
carry the native card, so a card that does not select ``final`` has ``selects_on_test`` True and the
leaderboard shows it only in reproduction tables. The encoder is never mutated: the engine works on
a deep copy (Dec-SSL's probe changes BN buffers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from benchmark.api import (
    DatasetSplit,
    Encoder,
    ProtocolCard,
    TaskContext,
    load_dataset_splits,
)
from tasks.cards import load_card
from tasks.members import modules_of, score_each_member
from tasks.probes.native_engine import ProbeResult, effective_lr, norm_stats, run_probe
from tasks.subsets import class_balanced_subset, subset_digest
from tasks.task_base import Scored, TaskBase

# Stream.TASK sub-paths
_STREAM = {"linear_native": 41, "semisup_native": 42, "transfer_native": 43}


# ------------------------------------------------------------------------------------------ the
# tasks


def _overrides(cfg: Any) -> dict[str, Any]:
    return {
        k: getattr(cfg, k) for k in ("epochs", "batch_size", "lr") if getattr(cfg, k) is not None
    }


def _check(cfg: Any) -> None:
    for k in ("epochs", "batch_size"):
        v = getattr(cfg, k)
        if v is not None and v < 1:
            raise ValueError(f"{k} must be >= 1")
    if cfg.lr is not None and cfg.lr <= 0:
        raise ValueError("lr must be > 0")


class _NativeTask(TaskBase):
    family: ClassVar[str]

    def card_overrides(self) -> dict[str, Any]:
        return _overrides(self.cfg)

    def card(self) -> ProtocolCard:
        name = f"{self.family}/{self.cfg.card}"
        spec = load_card(name)
        o = self.card_overrides()
        s = spec.resolve(o).settings
        summary = (
            f"{name}: {s['optimizer']} lr {effective_lr(s):g}, {s['epochs']} ep, batch {s['batch_size']}, "
            f"{s['selection']}"
        )
        return spec.protocol_card(o, summary=summary)

    def splits(self, ctx: TaskContext) -> tuple[DatasetSplit, DatasetSplit, dict[str, Any]]:
        return ctx.dataset.train, ctx.dataset.test, {}

    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        s = self.card().settings
        train, test, extra = self.splits(ctx)
        mean, std = norm_stats(s, encoder)

        def one(member: int) -> tuple[float, ProbeResult]:
            r = run_probe(
                modules_of(encoder)[member],
                encoder.feat_dim,
                train,
                test,
                s,
                mean=mean,
                std=std,
                size=int(train.images.shape[-1]),
                seed=ctx.seed,
                device=ctx.device,
                path=_STREAM[self.name],
            )
            return r.value, r

        values, members, results = score_each_member(encoder, one, "top1")
        r = results[0]
        return values, {
            **members,
            **extra,
            "per_epoch_test": list(r.per_epoch_test),
            "test_evaluations": r.test_evaluations,
            "test_samples": len(test),
            "test_samples_scored": r.test_scored,
            "train_samples": len(train),
            "train_batches_per_epoch": r.train_batches_per_epoch,
            "final_train_loss": r.final_train_loss,
            "effective_lr": effective_lr(s),
        }


@dataclass(frozen=True, kw_only=True)
class LinearNativeConfig:
    # tasks/cards/linear_<card>.json
    card: Literal["orchestra", "decssl", "easyfl", "moco-lincls"] = "orchestra"
    epochs: int | None = None  # None: the card's value; any other value changes the card digest
    batch_size: int | None = None
    # moco-lincls: 0.03 (ResNet-18, the card) or 0.3 (ResNet-50, FLESD README)
    lr: float | None = None

    def __post_init__(self) -> None:
        _check(self)


class LinearNative(_NativeTask):
    """A paper's own linear evaluation (linear/orchestra, linear/decssl, linear/easyfl,
    linear/moco-lincls)."""

    name: ClassVar[str] = "linear_native"
    family: ClassVar[str] = "linear"
    Config: ClassVar[type] = LinearNativeConfig


@dataclass(frozen=True, kw_only=True)
class SemisupNativeConfig:
    card: Literal["orchestra"] = "orchestra"
    label_fraction: float = 0.01  # 0.01 or 0.1 (Orchestra Table 1)
    subset_seed: int = 0
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None

    def __post_init__(self) -> None:
        _check(self)
        if not 0 < self.label_fraction <= 1:
            raise ValueError("label_fraction must be in (0, 1]")


class SemisupNative(_NativeTask):
    """Orchestra's semi-supervised fine-tuning (semisup/orchestra, docs/protocols/evaluation.md
    §3.5)."""

    name: ClassVar[str] = "semisup_native"
    family: ClassVar[str] = "semisup"
    Config: ClassVar[type] = SemisupNativeConfig

    def card_overrides(self) -> dict[str, Any]:
        return {
            **_overrides(self.cfg),
            "label_fraction": self.cfg.label_fraction,
            "subset_seed": self.cfg.subset_seed,
        }

    def splits(self, ctx: TaskContext) -> tuple[DatasetSplit, DatasetSplit, dict[str, Any]]:
        ds, c = ctx.dataset, self.cfg
        idx = class_balanced_subset(
            ds.train.labels, c.label_fraction, c.subset_seed, ds.num_classes
        )
        return (
            ds.train.subset(idx),
            ds.test,
            {"subset_digest": subset_digest(idx), "subset_size": int(idx.size)},
        )


@dataclass(frozen=True, kw_only=True)
class TransferNativeConfig:
    card: Literal["decssl"] = "decssl"
    target: str = "stl10"
    target_resolution: int = 32
    label_fraction: float = 1.0
    subset_seed: int = 0
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None

    def __post_init__(self) -> None:
        _check(self)
        if not 0 < self.label_fraction <= 1 or self.target_resolution < 1:
            raise ValueError("label_fraction must be in (0, 1] and target_resolution >= 1")


class TransferNative(_NativeTask):
    """Dec-SSL's transfer probe as far as known (transfer/decssl: linear/decssl on the target;
    protocol assumed)."""

    name: ClassVar[str] = "transfer_native"
    family: ClassVar[str] = "transfer"
    Config: ClassVar[type] = TransferNativeConfig

    def card_overrides(self) -> dict[str, Any]:
        c = self.cfg
        return {
            **_overrides(c),
            "target": c.target,
            "resolution": c.target_resolution,
            "label_fraction": c.label_fraction,
            "subset_seed": c.subset_seed,
        }

    def splits(self, ctx: TaskContext) -> tuple[DatasetSplit, DatasetSplit, dict[str, Any]]:
        from tasks.probes.transfer import _data_root, resize_split

        c = self.cfg
        target = load_dataset_splits(c.target, {}, _data_root(ctx))
        idx = class_balanced_subset(
            target.train.labels, c.label_fraction, c.subset_seed, target.num_classes
        )
        train = resize_split(target.train.subset(idx), c.target_resolution)
        return (
            train,
            resize_split(target.test, c.target_resolution),
            {
                "target": c.target,
                "target_revision": target.revision,
                "subset_digest": subset_digest(idx),
            },
        )
