"""perclient@v1 (docs/protocols/evaluation.md §3.7): per-client encoders, one probe per distinct
encoder, label-matched tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from benchmark.api import Encoder
from benchmark.engine.runner import run_cell
from benchmark.runroot.rundir import RunDir
from tasks.probes.perclient import client_models, weighted_mean_and_min
from tests.helpers import smoke_cell


def _enc(**kw) -> Encoder:
    return Encoder(
        module=nn.Identity(),
        feat_dim=4,
        backbone="x",
        fingerprint="f",
        input_size=0,
        mean=(),
        std=(),
        **kw,
    )


def test_weighted_mean_and_min_skip_clients_without_test_images() -> None:
    mean, worst = weighted_mean_and_min([50.0, 100.0, float("nan")], [1, 3, 7])
    assert mean == pytest.approx(87.5) and worst == 50.0
    with pytest.raises(ValueError):
        weighted_mean_and_min([float("nan")], [1])


def test_client_model_association() -> None:
    a, b = nn.Identity(), nn.Identity()
    models, index = client_models(_enc(client_models=(a, b), client_index=(1, 0, 1)), 3)
    # FeatARC: the cluster of each client's last assignment
    assert models == [a, b] and index == [1, 0, 1]
    models, index = client_models(_enc(members=(a, b, a)), 3)
    assert index == [0, 1, 2]  # local_ssl: its own model
    enc = _enc()
    models, index = client_models(enc, 4)
    assert models == [enc.module] and index == [0, 0, 0, 0]  # everyone else: the global encoder
    with pytest.raises(ValueError):
        client_models(_enc(client_models=(a,), client_index=(0, 0)), 3)
    with pytest.raises(ValueError):
        _enc(client_models=(a,), client_index=(1,))


@pytest.mark.slow
def test_perclient_in_cells_follows_assignments_and_label_matched_tests(tmp_path: Path) -> None:
    tasks = [{"name": "perclient", "epochs": 2}]
    part = {"name": "dirichlet", "alpha": 0.5}
    rec = run_cell(
        smoke_cell("featarc", clients=3, rounds=2, tasks=tasks, partition=part), tmp_path
    )
    s = next(s for s in rec.scores if s.task == "perclient")
    fin = torch.load(
        RunDir.of(
            smoke_cell("featarc", clients=3, rounds=2, tasks=tasks, partition=part), tmp_path
        ).pretrain.final,
        weights_only=False,
    )
    assert s.extra["client_model"] == fin["extra"]["assign"].tolist()
    per = [a for a in s.extra["per_client"] if a is not None]
    sizes = [n for a, n in zip(s.extra["per_client"], s.extra["train_sizes"]) if a is not None]
    assert s.values["top1"] == pytest.approx(float(np.average(per, weights=sizes)))
    assert s.values["top1_min"] == min(per) and not s.card.selects_on_test
    # the label-matched test splits are disjoint and never larger than the test split
    assert sum(s.extra["test_sizes"]) <= 360
    rec_g = run_cell(smoke_cell("fedavg_simclr", clients=3, tasks=tasks, partition=part), tmp_path)
    sg = next(s for s in rec_g.scores if s.task == "perclient")
    assert sg.extra["client_model"] == [0, 0, 0]
    rec_l = run_cell(smoke_cell("local_ssl", clients=3, tasks=tasks, partition=part), tmp_path)
    assert next(s for s in rec_l.scores if s.task == "perclient").extra["client_model"] == [0, 1, 2]
