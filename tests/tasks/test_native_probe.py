"""The native evaluation cards as one card-driven probe engine (docs/protocols/evaluation.md §3.3,
§3.5, §7.5): Dec-SSL's reported value is the maximum of its per-epoch test accuracies and its BN
statistics move only in epoch 1; `final` cards read the test split once; drop_last counts; EasyFL's
per-batch mean; MoCo's head init; Orchestra's lr = 30 x bs/256."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tasks.probes.native_engine as npb
from benchmark.api import DatasetSplit, Encoder, TaskContext, arch_fingerprint
from benchmark.building_blocks.backbones import ResNetMicro
from benchmark.contracts.data_types import DatasetSplits
from benchmark.contracts.registries import TASKS, load_builtins
from benchmark.contracts.task import task_datasets
from benchmark.core.config import config_dict, from_mapping
from tasks.cards import load_card

load_builtins()
CPU = torch.device("cpu")
MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def toy_split(n: int, seed: int, classes: int = 3, size: int = 8) -> DatasetSplit:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    images = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
    images[:, labels.numpy() % 3] = 0  # a little class signal: the channel of the class is dark
    for c in range(classes):
        images[labels == c, c % 3] //= 4
    return DatasetSplit(images, labels.numpy().astype(np.int64), classes)


def toy_data(n_train: int = 24, n_test: int = 10) -> DatasetSplits:
    return DatasetSplits("toy", toy_split(n_train, 0), toy_split(n_test, 1), "toy", MEAN, STD)


def micro() -> nn.Module:
    torch.manual_seed(0)
    return ResNetMicro(width=4).build()


def encoder(net: nn.Module) -> Encoder:
    return Encoder(
        module=net,
        feat_dim=32,
        backbone="resnet_micro",
        fingerprint=arch_fingerprint(net),
        input_size=8,
        mean=MEAN,
        std=STD,
    )


def card(name: str, **over) -> dict:
    return dict(load_card(name).resolve(over).settings)


def bn_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k}


def run_task(task: str, params: dict, net: nn.Module, ds: DatasetSplits, tmp_path):
    cls = TASKS.get(task)
    t = cls(from_mapping(cls.Config, params))
    ctx = TaskContext(
        dataset=ds, data_root=tmp_path, out_dir=tmp_path, device=CPU, seed=0, feature_cache={}
    )
    return t, t.run(encoder(net), ctx)


# -------------------------------------------------------------------------------- §7.5:
# linear/decssl reproduction


def test_decssl_reports_the_max_over_epochs_and_bn_moves_only_in_epoch_1() -> None:
    ds, net = toy_data(), micro()
    s = card("linear/decssl", epochs=3, batch_size=8)
    before = bn_buffers(net)
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    r = npb.run_probe(
        net,
        32,
        ds.train,
        ds.test,
        s,
        mean=MEAN,
        std=STD,
        size=8,
        seed=0,
        device=CPU,
        path=41,
        on_epoch_end=lambda epoch, model: snapshots.__setitem__(epoch, bn_buffers(model.backbone)),
    )
    assert len(r.per_epoch_test) == 3 == r.test_evaluations
    assert r.value == max(r.per_epoch_test)
    changed = [k for k in before if not torch.equal(before[k], snapshots[1][k])]
    assert changed  # epoch 1: the backbone's BN is in train mode, so its running statistics move
    for epoch in (2, 3):  # afterwards eval mode: they stay exactly as epoch 1 left them
        assert all(torch.equal(snapshots[1][k], snapshots[epoch][k]) for k in before)
    # the encoder itself is untouched
    assert all(torch.equal(before[k], v) for k, v in bn_buffers(net).items())


def test_decssl_task_score_selects_on_test(tmp_path) -> None:
    net = micro()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    _, s = run_task(
        "linear_native", {"card": "decssl", "epochs": 2, "batch_size": 8}, net, toy_data(), tmp_path
    )
    assert (
        s.card.name == "linear/decssl"
        and s.card.selects_on_test
        and s.card.selection == "best_epoch_test"
    )
    assert s.values["top1"] == max(s.extra["per_epoch_test"]) and s.extra["test_evaluations"] == 2
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())


# -------------------------------------------------------------------------------- test reads and
# drop_last


@pytest.mark.parametrize("name,reads", [("orchestra", 1), ("easyfl", 1), ("moco-lincls", 3)])
def test_final_cards_read_the_test_split_once(name: str, reads: int, tmp_path, monkeypatch) -> None:
    calls = {"n": 0}
    original = npb.evaluate_split

    def counting(*a, **k):
        calls["n"] += 1
        return original(*a, **k)

    monkeypatch.setattr(npb, "evaluate_split", counting)
    _, s = run_task(
        "linear_native",
        {"card": name, "epochs": 3, "batch_size": 8},
        micro(),
        toy_data(24, 260),
        tmp_path,
    )
    assert calls["n"] == reads == s.extra["test_evaluations"]
    assert s.card.selects_on_test == (reads > 1)


def test_drop_last_counts() -> None:
    # Orchestra's test loader: batch 256 with drop_last scores 9,984 of CIFAR's 10,000 test images
    assert (
        npb.scored_count(10_000, 256, True) == 9_984
        and npb.scored_count(10_000, 256, False) == 10_000
    )
    assert (
        sum(len(b) for b in npb.batch_indices(10_000, 256, shuffle=False, drop_last=True)) == 9_984
    )
    # semisup/orchestra: unshuffled, drop_last; at 1 % of CIFAR-10 (500) the 256 lowest indices form
    # the only batch
    only = npb.batch_indices(500, 256, shuffle=False, drop_last=True)
    assert len(only) == 1 and torch.equal(only[0], torch.arange(256))
    # 10 %: 4,864 of 5,000 used
    assert len(npb.batch_indices(5_000, 256, shuffle=False, drop_last=True)) == 19


def test_orchestra_drop_last_on_a_toy_size(tmp_path) -> None:
    # 260 test images in batches of 256 with drop_last: 256 scored; 24 train images in batches of
    # 16: one batch/epoch
    _, s = run_task(
        "linear_native",
        {"card": "orchestra", "epochs": 1, "batch_size": 16},
        micro(),
        toy_data(24, 260),
        tmp_path,
    )
    assert s.card.settings["test_batch_size"] == 256 and s.card.settings["test_drop_last"]
    assert s.extra["train_batches_per_epoch"] == 1 and s.extra["train_samples"] == 24
    assert (s.extra["test_samples"], s.extra["test_samples_scored"]) == (260, 256)
    with pytest.raises(ValueError, match="nothing would be scored"):
        run_task(
            "linear_native",
            {"card": "orchestra", "epochs": 1, "batch_size": 16},
            micro(),
            toy_data(24, 10),
            tmp_path,
        )


# -------------------------------------------------------------------------------- metric, head, lr,
# schedules


def test_easyfl_metric_is_the_mean_of_per_batch_accuracies() -> None:
    labels = torch.tensor([0, 0, 0, 0, 1])
    # batches of 2: [2/2, 0/2, 1/1] -> mean 66.67; over samples 3/5 = 60
    preds = torch.tensor([0, 0, 1, 1, 1])
    s = {"test_batch_size": 2, "test_drop_last": False, "metric": "top1_batch_mean"}
    forward = lambda idx: nn.functional.one_hot(preds[idx], 2).float()
    value, scored = npb.evaluate_split(lambda x: x, forward, labels, s, CPU)
    assert value == pytest.approx(200 / 3) and scored == 5
    value, _ = npb.evaluate_split(
        lambda x: x, forward, labels, {**s, "metric": "top1_samples"}, CPU
    )
    assert value == pytest.approx(60.0)
    assert load_card("linear/easyfl").settings["test_batch_size"] == 2048


def test_moco_head_init_is_normal_001_with_zero_bias() -> None:
    head = npb.make_head(512, 100, card("linear/moco-lincls"), seed=0, path=41)
    assert torch.count_nonzero(head.bias) == 0
    assert (
        0.0095 < float(head.weight.detach().std()) < 0.0105
        and abs(float(head.weight.detach().mean())) < 1e-3
    )
    default = npb.make_head(512, 100, card("linear/orchestra"), seed=0, path=41)
    assert (
        float(default.weight.detach().abs().max()) <= 1 / 512**0.5
        and torch.count_nonzero(default.bias) > 0
    )


def test_orchestra_lr_scales_with_batch_and_cosine_reaches_zero_per_iteration() -> None:
    assert npb.effective_lr(card("linear/orchestra")) == 30.0  # 30 x 256/256
    s = card("linear/orchestra", batch_size=64, epochs=2)
    assert npb.effective_lr(s) == 7.5  # 30 x 64/256
    p = nn.Parameter(torch.zeros(1))
    opt = npb.make_optimizer([p], s)
    assert opt.param_groups[0]["lr"] == 7.5 and opt.param_groups[0]["momentum"] == 0.9
    sched, when = npb.make_schedule(opt, s, steps_per_epoch=3)
    assert when == "step"
    lrs = []
    for _ in range(6):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12) and all(a > b for a, b in zip(lrs, lrs[1:]))
    # no scaling rule on Dec-SSL's card
    assert npb.effective_lr(card("linear/decssl", batch_size=64)) == 0.001


def test_moco_multistep_schedule() -> None:
    s = card("linear/moco-lincls")
    p = nn.Parameter(torch.zeros(1))
    opt = npb.make_optimizer([p], s)
    sched, when = npb.make_schedule(opt, s, steps_per_epoch=5)
    assert when == "epoch"
    lrs = []
    for _ in range(60):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert (
        lrs[29] == pytest.approx(0.03)
        and lrs[30] == pytest.approx(0.003)
        and lrs[50] == pytest.approx(0.0003)
    )


def test_decssl_loss_is_log_softmax_nll() -> None:
    logits, y = torch.randn(5, 3), torch.tensor([0, 1, 2, 0, 1])
    assert torch.allclose(
        npb.loss_fn(logits, y, "log_softmax_nll"), nn.functional.cross_entropy(logits, y)
    )


# -------------------------------------------------------------------------------- semisup/orchestra


def test_semisup_orchestra_fine_tunes_everything_on_the_subset(tmp_path) -> None:
    net = micro()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    ds = DatasetSplits("toy", toy_split(60, 0), toy_split(260, 1), "toy", MEAN, STD)
    t, s = run_task(
        "semisup_native", {"label_fraction": 0.5, "epochs": 1, "batch_size": 8}, net, ds, tmp_path
    )
    assert s.card.name == "semisup/orchestra" and not s.card.selects_on_test
    assert s.card.settings["label_fraction"] == 0.5 and s.card.settings["trainable"] == "all"
    # 30 // 8, drop_last
    assert s.extra["subset_size"] == 30 and s.extra["train_batches_per_epoch"] == 3
    assert s.extra["effective_lr"] == 30 * 8 / 256 and s.extra["test_evaluations"] == 1
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())
    two = run_task(
        "semisup_native",
        {"label_fraction": 0.5, "epochs": 1, "batch_size": 8},
        micro(),
        ds,
        tmp_path,
    )[1]
    assert two.values == s.values  # deterministic on CPU


def test_backbone_is_trained_only_when_the_card_says_all() -> None:
    ds = toy_data(24, 260)
    seen: dict[str, dict] = {}
    for name, over in (
        ("linear/orchestra", {"batch_size": 8, "epochs": 1}),
        ("semisup/orchestra", {"batch_size": 8, "epochs": 1, "lr": 0.1}),
    ):
        net = micro()
        weights = {k: v.clone() for k, v in net.named_parameters()}
        npb.run_probe(
            net,
            32,
            ds.train,
            ds.test,
            card(name, **over),
            mean=MEAN,
            std=STD,
            size=8,
            seed=0,
            device=CPU,
            path=42,
            on_epoch_end=lambda e, m, n=name: seen.__setitem__(
                n, dict(m.backbone.named_parameters())
            ),
        )
        seen[name] = {k: not torch.equal(weights[k], v) for k, v in seen[name].items()}
    assert not any(seen["linear/orchestra"].values())
    assert any(seen["semisup/orchestra"].values())


def test_transfer_decssl_probes_a_class_balanced_subset_of_the_target(tmp_path) -> None:
    # digits as the (offline) target: 10 % of 1,438 -> ceil(143.8 / 10) = 15 per class;
    # linear/decssl settings on it
    net = micro()
    ds = toy_data(24, 12)
    t, s = run_task(
        "transfer_native",
        {
            "target": "digits",
            "target_resolution": 8,
            "label_fraction": 0.1,
            "epochs": 1,
            "batch_size": 64,
        },
        net,
        ds,
        tmp_path,
    )
    assert (
        s.card.name == "transfer/decssl"
        and s.card.selects_on_test
        and s.card.settings["protocol_assumed"]
    )
    assert (
        s.extra["train_samples"] == 150
        and s.extra["target"] == "digits"
        and s.extra["test_samples"] == 359
    )
    assert task_datasets(t.name, config_dict(t.cfg)) == ("digits",)
    assert s.values["top1"] == max(s.extra["per_epoch_test"])
    # EasyFL's CIFAR test loader: 10,000 images in batches of 2048, the last one of 1,808 weighs
    # like the others
    assert [len(b) for b in npb.batch_indices(10_000, 2048, shuffle=False, drop_last=False)][
        -1
    ] == 1_808


def test_native_and_e2e_cards_through_run_cell(tmp_path) -> None:
    """A real (smallest) dec_sl cell: the record carries the JSON cards, Dec-SSL's selects on the
    test set, and the record round-trips through the schema."""
    from benchmark.engine.runner import run_cell
    from benchmark.records.schema import from_json, to_json
    from tests.helpers import smoke_cell

    cell = smoke_cell(
        "dec_sl",
        tasks=[
            "e2e_classifier",
            {"name": "linear_native", "card": "easyfl", "epochs": 2},
            {"name": "linear_native", "card": "decssl", "epochs": 1, "batch_size": 128},
        ],
    )
    record = run_cell(cell, tmp_path, device="cpu")
    assert record is not None and record.status == "ok"
    cards = {s.card.name: s.card for s in record.scores}
    assert cards["e2e-classifier@v1"].card_id == load_card("e2e-classifier@v1").digest
    assert not cards["linear/easyfl"].selects_on_test and cards["linear/decssl"].selects_on_test
    assert from_json(to_json(record)) == record
