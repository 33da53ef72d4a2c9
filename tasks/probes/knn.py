"""``knn@v1`` (docs/protocols/evaluation.md §3.1): InstDisc-style weighted kNN on L2-normalised
cached features, k = 200, t = 0.1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from benchmark.api import ProtocolCard, TaskContext
from benchmark.api import portable_math as pmath
from tasks.cards import load_card
from tasks.task_base import FeatureProbe


def knn_predict(
    train_f: torch.Tensor,
    train_y: torch.Tensor,
    test_f: torch.Tensor,
    num_classes: int,
    *,
    k: int = 200,
    t: float = 0.1,
    chunk: int = 1024,
) -> torch.Tensor:
    """Predicted labels: S_c(q) = Σ_{i ∈ N_k(q)} exp(s_i / t) [y_i = c] with s the cosine
    similarity.

    N_k(q) are the k bank items with the largest similarity, ties broken by lower bank index (stable
    sort); prediction ties go to the smaller class index (argmax returns the first maximum). Queries
    never enter the bank.
    """
    bank = F.normalize(train_f.float(), dim=1)
    queries = F.normalize(test_f.float(), dim=1)
    k = min(k, bank.shape[0])
    preds = []
    for start in range(0, queries.shape[0], chunk):
        sim = queries[start : start + chunk] @ bank.t()
        top_sim, top_idx = torch.sort(sim, dim=1, descending=True, stable=True)
        top_sim, top_idx = top_sim[:, :k], top_idx[:, :k]
        weights = pmath.exp(top_sim / t)
        scores = torch.zeros(sim.shape[0], num_classes, dtype=weights.dtype)
        scores.scatter_add_(1, train_y[top_idx], weights)
        preds.append(scores.argmax(dim=1))
    return torch.cat(preds)


def knn_top1(
    train_f, train_y, test_f, test_y, num_classes: int, *, k: int = 200, t: float = 0.1
) -> float:
    pred = knn_predict(train_f, torch.as_tensor(train_y), test_f, num_classes, k=k, t=t)
    return float((pred == torch.as_tensor(test_y)).float().mean() * 100.0)


@dataclass(frozen=True, kw_only=True)
class KNNConfig:
    k: int = 200
    temperature: float = 0.1

    def __post_init__(self) -> None:
        if self.k < 1 or self.temperature <= 0:
            raise ValueError("k must be >= 1 and temperature > 0")


class KNN(FeatureProbe):
    """Weighted kNN on frozen features (Wu et al. 2018; as in Dec-SSL, Orchestra and EasyFL
    code)."""

    name: ClassVar[str] = "knn"
    reads_partition: ClassVar[bool] = False  # the cell's dataset splits only
    Config: ClassVar[type] = KNNConfig

    def card(self) -> ProtocolCard:
        return load_card("knn@v1").protocol_card(  # tasks/cards/knn@v1.json + this config
            {"k": self.cfg.k, "temperature": self.cfg.temperature},
            summary=f"kNN k={self.cfg.k} t={self.cfg.temperature}, final",
        )

    def score_features(
        self, train_f: torch.Tensor, test_f: torch.Tensor, ctx: TaskContext
    ) -> tuple[float, dict[str, float]]:
        ds = ctx.dataset
        top1 = knn_top1(
            train_f,
            ds.train.labels,
            test_f,
            ds.test.labels,
            ds.num_classes,
            k=self.cfg.k,
            t=self.cfg.temperature,
        )
        return top1, {}
