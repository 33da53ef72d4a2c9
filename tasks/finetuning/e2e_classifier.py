"""``e2e-classifier@v1`` (docs/protocols/evaluation.md §3.4): top-1 of the federated classifier
itself (``dec_sl``: backbone + linear head trained end to end), eval mode, final round, the full
test split read once. Encoders that export no classifier raise ``TaskNotApplicable`` (the task is
left out of their records)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from benchmark.api import (
    Encoder,
    ProtocolCard,
    TaskContext,
    TaskNotApplicable,
    TaskScores,
    normalize,
)
from tasks.cards import load_card


@dataclass(frozen=True, kw_only=True)
class E2EClassifierConfig:
    # evaluation batch only (no drop_last, eval mode: it does not change the number)
    batch_size: int = 512

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")


class E2EClassifier:
    """Scores the method's own classifier; there is no downstream training."""

    name: ClassVar[str] = "e2e_classifier"
    version: ClassVar[str] = "1"
    main_metric: ClassVar[str] = "top1"
    higher_is_better: ClassVar[bool] = True
    Config: ClassVar[type] = E2EClassifierConfig

    def __init__(self, cfg: E2EClassifierConfig) -> None:
        self.cfg = cfg

    def card(self) -> ProtocolCard:
        return load_card("e2e-classifier@v1").protocol_card(
            summary="end-to-end federated classifier, final round"
        )

    @torch.no_grad()
    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores:
        t0 = time.perf_counter()
        model = encoder.classifier
        if model is None:
            raise TaskNotApplicable(
                "the encoder exports no end-to-end classifier (only dec_sl does)"
            )
        split = ctx.dataset.test
        was_training = model.training
        model.eval().to(ctx.device)
        labels = torch.as_tensor(split.labels)
        correct = 0
        for start in range(0, len(split), self.cfg.batch_size):
            x = normalize(
                split.images[start : start + self.cfg.batch_size].to(ctx.device),
                encoder.mean,
                encoder.std,
            )
            correct += int(
                (model(x).argmax(1).cpu() == labels[start : start + self.cfg.batch_size]).sum()
            )
        model.train(was_training)
        values = {"top1": 100.0 * correct / max(len(split), 1)}
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric="top1",
            higher_is_better=True,
            values=values,
            wall_time_s=time.perf_counter() - t0,
            extra={"test_samples": len(split)},
        )
