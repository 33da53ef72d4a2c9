"""The reference points of methods/baselines.py (docs/methods/baselines.md): what each one keeps,
pairs and averages, checked on the hooks themselves (a record's scores would not see these)."""

from __future__ import annotations

import torch

from benchmark.contracts.types import Payload
from benchmark.data.datasets import load_dataset_splits
from benchmark.engine.rounds import SimSettings, client_context, server_context
from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec
from tests.helpers import smoke_cell


def _setup(name: str, **method_params):
    cell = smoke_cell(name, method_params=method_params or None)
    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    method = build_method(cell, input_spec(ds))
    clients = client_datasets(method, ds, build_partition(cell, ds.train.labels))
    s = SimSettings(
        seed=0,
        num_rounds=2,
        local_epochs=1,
        per_round=2,
        device=torch.device("cpu"),
        num_classes=int(ds.train.labels.max()) + 1,
    )
    return method, clients, s, ds


def test_local_ssl_client_resumes_from_its_own_model() -> None:
    """local_ssl: nothing is sent; each client's round-2 start is its own round-1 model, and the two
    clients' models differ (neither the server's nor the other client's)."""
    method, clients, s, _ = _setup("local_ssl")
    server = method.init_server(server_context(s, 0, None))
    trained = {}
    for k in (0, 1):
        state = method.init_client(k, server)
        down = method.broadcast(server, server_context(s, 1, None))
        assert down.tensors == {}
        up, state = method.client_update(down, state, clients[k], client_context(s, 1, k, None))
        assert up.tensors == {}
        start = method.start_tensors(method.broadcast(server, server_context(s, 2, None)), state)
        assert set(start) == set(server.model)
        assert any(not torch.equal(start[n], server.model[n]) for n in start), "not trained"
        trained[k] = start
    assert any(not torch.equal(trained[0][n], trained[1][n]) for n in trained[0])


def test_dec_sl_pairs_each_image_with_its_own_label(monkeypatch) -> None:
    """dec_sl's cross-entropy: the labels of the batch's images, row for row. The augmentation is
    replaced by the identity so that each row of the batch can be traced to its image."""
    from methods import baselines

    method, clients, s, _ = _setup("dec_sl")
    data = clients[0]
    images = data.train.images
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    net_input: list[torch.Tensor] = []
    real_ce = baselines.F.cross_entropy

    def record_augment(x, cfg, gen, **kw):
        net_input.append(x.clone())
        return x.float()

    def ce(logits, targets, *a, **kw):
        seen.append((net_input[-1], targets.clone()))
        return real_ce(logits, targets, *a, **kw)

    monkeypatch.setattr(baselines, "augment", record_augment)
    monkeypatch.setattr(baselines.F, "cross_entropy", ce)
    server = method.init_server(server_context(s, 0, None))
    method.client_update(
        method.broadcast(server, server_context(s, 1, None)),
        method.init_client(0, server),
        data,
        client_context(s, 1, 0, None),
    )
    assert seen
    flat = images.reshape(len(images), -1)
    for batch, targets in seen:
        assert len(batch) == len(targets) > 1
        for row, label in zip(batch.reshape(len(batch), -1), targets):
            match = (flat == row).all(dim=1).nonzero().flatten()
            assert len(match) >= 1
            assert int(label) in {int(data.labels[j]) for j in match}


def test_dec_sl_crop_flip_draws_no_colour(monkeypatch) -> None:
    """sl_augment: crop_flip is the simclr pipeline without colour jitter and grayscale; simclr is
    the method's augment as configured."""
    from methods import baselines

    calls: list = []

    def record(x, cfg, gen, **kw):
        calls.append(cfg)
        return x.float()

    for mode in ("crop_flip", "simclr"):
        method, clients, s, _ = _setup("dec_sl", sl_augment=mode)
        server = method.init_server(server_context(s, 0, None))
        calls.clear()
        monkeypatch.setattr(baselines, "augment", record)
        method.client_update(
            method.broadcast(server, server_context(s, 1, None)),
            method.init_client(0, server),
            clients[0],
            client_context(s, 1, 0, None),
        )
        cfg = calls[0]
        default = method.cfg.augment
        if mode == "crop_flip":
            assert cfg.jitter_p == 0.0 and cfg.gray_p == 0.0
            assert (cfg.crop_scale, cfg.flip_p) == (default.crop_scale, default.flip_p)
        else:
            assert cfg == default


def test_dec_sl_averages_by_client_size_or_uniformly() -> None:
    """dec_sl's server: the num_examples-weighted mean of the uploads (uniform under ``weighting:
    uniform``); the average is the whole model."""
    for weighting, want in (("num_examples", (1 * 1.0 + 3 * 5.0) / 4), ("uniform", 3.0)):
        method, _, s, _ = _setup("dec_sl", weighting=weighting)
        server = method.init_server(server_context(s, 0, None))
        ups = {
            k: Payload({n: torch.full_like(t, v) for n, t in server.model.items()}, num_examples=w)
            for k, (w, v) in enumerate(((1, 1.0), (3, 5.0)))
        }
        out = method.server_aggregate(server, ups, server_context(s, 1, None), None)
        floats = [n for n, t in server.model.items() if t.is_floating_point()]
        assert floats and set(out.model) == set(server.model)
        for n in floats:
            assert torch.allclose(out.model[n], torch.full_like(out.model[n], want)), n


def test_central_ssl_keeps_one_optimizer_for_the_whole_run() -> None:
    """docs/methods/baselines.md's table: central_ssl runs "one optimizer for the whole run
    (`optimizer_state: keep`)"; the row is read from the page, and the method's default must match
    it (the documented-defaults test exempts this field because the page states it in words)."""
    from pathlib import Path

    from benchmark.api import METHODS

    page = Path(__file__).resolve().parents[2] / "docs" / "methods" / "baselines.md"
    row = next(
        ln for ln in page.read_text(encoding="utf-8").splitlines() if "| `central_ssl` |" in ln
    )
    assert "one optimizer for the whole run (`optimizer_state: keep`)" in row
    assert METHODS.get("central_ssl").Config().optimizer_state == "keep"
    assert METHODS.get("fedavg_simclr").Config().optimizer_state == "reset"
