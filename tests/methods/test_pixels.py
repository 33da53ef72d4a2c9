"""``pixels``: the normalised image, flattened, is the feature vector; nothing is trained or sent."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmark.api import normalize
from benchmark.engine.runner import run_cell
from benchmark.engine.stages import export_encoder, prepare, pretrain
from benchmark.runroot.rundir import PretrainDir
from methods.pixels import Pixels
from tasks.features import extract_features
from tests.helpers import smoke_cell


def test_features_are_the_normalised_pixels(tmp_path: Path) -> None:
    prep = prepare(smoke_cell("pixels", tasks=["knn"]))
    pre = pretrain(prep, PretrainDir(tmp_path / "p"))
    enc = export_encoder(prep.method, pre.server)
    test = prep.dataset.test
    c, h, w = test.images.shape[1:]
    assert enc.feat_dim == c * h * w == 3 * 16 * 16
    assert enc.backbone == "pixels" and not enc.module.state_dict()
    got = extract_features(enc.module, test, enc.mean, enc.std, torch.device("cpu"))
    want = normalize(test.images[:], prep.dataset.mean, prep.dataset.std).flatten(1)
    assert got.shape == (len(test), enc.feat_dim)
    assert torch.equal(got, want.float())


def test_sends_nothing_and_beats_random_init_on_digits(tmp_path: Path) -> None:
    px = run_cell(smoke_cell("pixels", rounds=2, tasks=["knn"]), tmp_path, device="cpu")
    rnd = run_cell(smoke_cell("no_pretrain", rounds=2, tasks=["knn"]), tmp_path, device="cpu")
    assert px.comm.bytes_up == px.comm.bytes_down == 0
    assert tuple(px.comm.per_round_up) == tuple(px.comm.per_round_down) == (0, 0)
    # digits' raw pixels are a strong representation (~97 % kNN on the embedded default): the
    # input itself must score above a random micro ResNet's features on the same split
    assert px.scores[0].values["top1"] > rnd.scores[0].values["top1"] + 5


def test_refuses_a_learned_backbone() -> None:
    prep_cell = smoke_cell("no_pretrain", tasks=["knn"])
    with pytest.raises(ValueError, match="backbone must be 'pixels'"):
        Pixels(Pixels.Config(), prep_cell.backbone, None)  # type: ignore[arg-type]
