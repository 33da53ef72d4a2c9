"""``e2e-classifier@v1`` (docs/protocols/evaluation.md §3.4): top-1 of the federated classifier
itself (``dec_sl``: backbone + linear head trained end to end), eval mode, final round, the full
test split read once. Encoders that export no classifier raise ``TaskNotApplicable`` (the task is
left out of their records)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from benchmark.api import (
    Encoder,
    ProtocolCard,
    TaskContext,
    TaskNotApplicable,
)
from tasks.cards import load_card
from tasks.finetuning.classifier import evaluate
from tasks.task_base import Scored, TaskBase


@dataclass(frozen=True, kw_only=True)
class E2EClassifierConfig:
    # evaluation batch only (no drop_last, eval mode: it does not change the number)
    batch_size: int = 512

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")


class E2EClassifier(TaskBase):
    """Scores the method's own classifier; there is no downstream training."""

    name: ClassVar[str] = "e2e_classifier"
    Config: ClassVar[type] = E2EClassifierConfig

    def card(self) -> ProtocolCard:
        return load_card("e2e-classifier@v1").protocol_card(
            summary="end-to-end federated classifier, final round"
        )

    @torch.no_grad()
    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        model = encoder.classifier
        if model is None:
            raise TaskNotApplicable(
                "the encoder exports no end-to-end classifier (only dec_sl does)"
            )
        was_training = model.training
        top1, scored = evaluate(
            model.to(ctx.device),
            ctx.dataset.test,
            mean=encoder.mean,
            std=encoder.std,
            device=ctx.device,
            batch_size=self.cfg.batch_size,
        )
        model.train(was_training)
        return {"top1": top1}, {"test_samples": scored}
