"""``no_pretrain_bn``: no_pretrain's weights, BN running statistics calibrated on the clients' data
— nothing else."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmark.engine.runner import run_cell
from benchmark.engine.stages import export_encoder, prepare, pretrain
from benchmark.runroot.rundir import PretrainDir
from tests.helpers import smoke_cell


def _encoder_state(name: str, tmp: Path, **kw) -> dict[str, torch.Tensor]:
    prep = prepare(smoke_cell(name, tasks=["knn"], **kw))
    pre = pretrain(prep, PretrainDir(tmp / name))
    return export_encoder(prep.method, pre.server).module.state_dict()


def test_only_bn_statistics_change(tmp_path: Path) -> None:
    plain = _encoder_state("no_pretrain", tmp_path)
    calibrated = _encoder_state("no_pretrain_bn", tmp_path)
    assert plain.keys() == calibrated.keys()
    stats = [k for k in plain if k.endswith(("running_mean", "running_var"))]
    assert stats, "the micro ResNet has BatchNorm layers"
    for key in plain:
        if key in stats:
            assert not torch.equal(plain[key], calibrated[key]), f"{key} was not calibrated"
        elif not key.endswith("num_batches_tracked"):
            assert torch.equal(plain[key], calibrated[key]), (
                f"{key} is a weight and must not change"
            )


def test_statistics_are_the_size_weighted_mean_of_the_clients(tmp_path: Path) -> None:
    """Each client calibrates on its own images; the server averages by client size (FedAvg of BN
    buffers)."""
    from methods.no_pretrain_bn import calibrate_bn

    prep = prepare(
        smoke_cell(
            "no_pretrain_bn",
            tasks=["knn"],
            clients=2,
            partition={"name": "dirichlet", "alpha": 0.5},
        )
    )
    pre = pretrain(prep, PretrainDir(tmp_path / "p"))
    got = export_encoder(prep.method, pre.server).module
    per_client = []
    for data in prep.clients:
        enc = export_encoder(prep.method, prep.method.init_server(_ctx(prep))).module
        calibrate_bn(enc, data.train, torch.device("cpu"))
        per_client.append((data.num_examples, enc.state_dict()))
    n = sum(w for w, _ in per_client)
    first_bn = next(k for k in got.state_dict() if k.endswith("running_mean"))
    want = sum((w / n) * sd[first_bn].double() for w, sd in per_client).float()
    assert torch.allclose(got.state_dict()[first_bn], want, atol=1e-6)
    assert per_client[0][0] != per_client[1][0]  # unequal sizes, so a plain mean would differ


def _ctx(prep):
    from benchmark.engine.rounds import server_context

    return server_context(prep.settings, 0, None)


def test_calibration_lifts_random_init_and_communicates_once(tmp_path: Path) -> None:
    plain = run_cell(smoke_cell("no_pretrain", rounds=2, tasks=["knn"]), tmp_path, device="cpu")
    cal = run_cell(smoke_cell("no_pretrain_bn", rounds=2, tasks=["knn"]), tmp_path, device="cpu")
    assert (
        cal.comm.per_round_up[0] > 0
        and cal.comm.per_round_up[1] == 0
        and cal.comm.per_round_down[1] == 0
    )
    # evaluation sees the calibrated statistics
    assert cal.scores[0].values != plain.scores[0].values


def test_a_client_uploads_the_statistics_of_its_normalised_images() -> None:
    """A client uploads its BN running statistics only, and they are those of its *normalised*
    images: the first BN layer's running mean and variance equal the per-channel mean and variance of
    that layer's input on the normalised client images (the average of the per-batch values over
    batches of CALIBRATION_BATCH, as ``update_bn`` averages them)."""
    from benchmark.api import load_tensors, select
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.rounds import SimSettings, client_context, server_context
    from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec
    from methods.no_pretrain_bn import CALIBRATION_BATCH

    cell = smoke_cell("no_pretrain_bn", tasks=["knn"])
    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    method = build_method(cell, input_spec(ds))
    data = client_datasets(method, ds, build_partition(cell, ds.train.labels))[0]
    s = SimSettings(seed=0, num_rounds=1, local_epochs=1, per_round=2, device=torch.device("cpu"))
    server = method.init_server(server_context(s, 0, None))
    up, _ = method.client_update(
        method.broadcast(server, server_context(s, 1, None)),
        method.init_client(0, server),
        data,
        client_context(s, 1, 0, None),
    )
    assert up.tensors and all(k.endswith(("running_mean", "running_var")) for k in up.tensors)

    enc = method._build()[0]
    load_tensors(enc, select(server.model, "encoder.", strip=True))
    name, bn = next((n, m) for n, m in enc.named_modules() if isinstance(m, torch.nn.BatchNorm2d))
    seen: list[torch.Tensor] = []
    bn.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach()))
    view = data.train
    enc.eval()
    means, variances = [], []
    with torch.no_grad():
        for i in range(0, len(view), CALIBRATION_BATCH):
            enc(view.normalize(view.images[i : i + CALIBRATION_BATCH]))
            x = seen[-1].transpose(0, 1).flatten(1)
            means.append(x.mean(dim=1))
            variances.append(x.var(dim=1, unbiased=True))
    want_mean = torch.stack(means).mean(dim=0)
    want_var = torch.stack(variances).mean(dim=0)
    assert torch.allclose(up.tensors[f"encoder.{name}.running_mean"], want_mean, atol=1e-4)
    assert torch.allclose(up.tensors[f"encoder.{name}.running_var"], want_var, rtol=1e-3)
