"""``perclient@v1`` (docs/protocols/evaluation.md §3.7): personalised evaluation without best-of
selection.

For each client k take the encoder associated with it (FeatARC: the cluster model of its last
assignment; ``local_ssl``: its own model; every other method: the global encoder), train one
``linear@v1`` probe per distinct encoder on the centralised training split, and score it on the
client's ``label_matched_test`` split (docs/protocols/partitioning.md §3.14: the test images that
follow the client's own train label mix). Reported: the mean over clients weighted by their train
sizes (main value) and the minimum over clients; selection ``final``. This is the FeatARC paper's
"test on each local dataset using the corresponding cluster model", with final-epoch probes and
without its average of best accuracies.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from benchmark.api import (
    Encoder,
    ProtocolCard,
    TaskContext,
    TaskNotApplicable,
    label_matched_test,
)
from tasks.cards import load_card
from tasks.features import cached_features
from tasks.probes.linear_probe import LinearProbeConfig, standardize, train_linear_head
from tasks.task_base import Scored, TaskBase

# The per-encoder probe is linear@v1 (docs/protocols/evaluation.md §3.2), configured by the same
# fields.
PerClientConfig = LinearProbeConfig


def client_models(encoder: Encoder, num_clients: int) -> tuple[list[torch.nn.Module], list[int]]:
    """(distinct models, model index of each client) per §3.7."""
    if encoder.client_models:
        if len(encoder.client_index) != num_clients:
            raise ValueError(
                f"the encoder maps {len(encoder.client_index)} clients, the partition has {num_clients}"
            )
        return list(encoder.client_models), list(encoder.client_index)
    # local_ssl: one model per client, in client order
    if encoder.members and len(encoder.members) == num_clients:
        return list(encoder.members), list(range(num_clients))
    return [encoder.module], [0] * num_clients


def weighted_mean_and_min(acc: list[float], sizes: list[int]) -> tuple[float, float]:
    """Size-weighted mean and minimum over the clients that have test images (the others are not
    scored)."""
    pairs = [(a, s) for a, s in zip(acc, sizes) if not np.isnan(a)]
    if not pairs:
        raise ValueError("no client has test images")
    a, s = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs], dtype=np.float64)
    return float((a * s).sum() / s.sum()), float(a.min())


class PerClient(TaskBase):
    """One linear@v1 probe per distinct client encoder, tested on each client's label-matched test
    split."""

    name: ClassVar[str] = "perclient"
    Config: ClassVar[type] = PerClientConfig

    def card(self) -> ProtocolCard:
        c = self.cfg
        return load_card("perclient@v1").protocol_card(
            {
                "epochs": c.epochs,
                "batch_size": c.batch_size,
                "lr": c.lr,
                "weight_decay": c.weight_decay,
            },
            summary=f"per-client linear probes ({c.epochs} ep) on label-matched test splits; weighted mean, final",
        )

    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        part = ctx.partition
        if part is None:
            raise TaskNotApplicable("perclient needs the cell's partition (run it inside a cell)")
        ds = ctx.dataset
        train_y, test_y = np.asarray(ds.train.labels), np.asarray(ds.test.labels)
        test_part = label_matched_test(part, train_y, test_y, ctx.partition_seed)
        models, index = client_models(encoder, part.num_clients)
        predictions: dict[int, torch.Tensor] = {}
        # one probe per distinct encoder, each on the full (centralised) train split
        for j in sorted(set(index)):
            key = (encoder.fingerprint, id(models[j]))
            tr = cached_features(
                ctx.feature_cache,
                (*key, "train"),
                models[j],
                ds.train,
                encoder.mean,
                encoder.std,
                ctx.device,
            )
            te = cached_features(
                ctx.feature_cache,
                (*key, "test"),
                models[j],
                ds.test,
                encoder.mean,
                encoder.std,
                ctx.device,
            )
            tr, te = standardize(tr, te)
            head = train_linear_head(
                tr,
                torch.as_tensor(train_y),
                ds.num_classes,
                epochs=self.cfg.epochs,
                batch_size=self.cfg.batch_size,
                lr=self.cfg.lr,
                weight_decay=self.cfg.weight_decay,
                seed=ctx.seed,
                device=ctx.device,
            )
            with torch.no_grad():
                predictions[j] = head(te.to(ctx.device)).argmax(1).cpu()
        acc, sizes, n_test = [], [], []
        y = torch.as_tensor(test_y)
        for k in range(part.num_clients):
            idx = torch.as_tensor(test_part.client_indices[k], dtype=torch.long)
            n_test.append(int(idx.numel()))
            sizes.append(len(part.client_indices[k]))
            acc.append(
                float((predictions[index[k]][idx] == y[idx]).float().mean() * 100)
                if idx.numel()
                else np.nan
            )
        mean, worst = weighted_mean_and_min(acc, sizes)
        return {"top1": mean, "top1_min": worst}, {
            "per_client": [None if np.isnan(a) else a for a in acc],
            "client_model": index,
            "test_sizes": n_test,
            "train_sizes": sizes,
            "test_partition_digest": test_part.digest(),
        }
