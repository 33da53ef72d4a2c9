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
)
from tasks.cards import load_card
from tasks.finetuning.classifier import evaluate


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
        values = {"top1": top1}
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric="top1",
            higher_is_better=True,
            values=values,
            wall_time_s=time.perf_counter() - t0,
            extra={"test_samples": scored},
        )
