"""The whole cost of a grid: every method's own forward passes, pooled data never divided by the
client count, the server's steps, every downstream task and COCO detection; ``plan`` prints it with
its assumptions, and the calibrated projection adds the rest of each cell to the pre-training."""

from __future__ import annotations

import dataclasses

import pytest

from benchmark.calibration import projection as cal
from benchmark.grids import cost
from benchmark.grids.expand import resolve_cell


def cell(name: str, **kw) -> object:
    raw = {
        "dataset": {"name": "cifar10"},
        "backbone": {"name": "resnet18_cifar"},
        "method": {"name": name},
        "partition": "iid",
        "partition_seed": 0,
        "fl": {"num_clients": 10, "participation": 1.0, "rounds": 2, "local_epochs": 1},
        "seed": 0,
        "tasks": ["knn"],
        "precision": "bf16",
    }
    raw.update(kw)
    return resolve_cell(raw)


@pytest.fixture(scope="module")
def f() -> float:
    """F: ResNet-18 (CIFAR stem) forward FLOPs at 32 px."""
    c = cell("fedavg_simclr")
    return cost.backbone_flops(c, 32)


def test_each_method_counts_its_own_forward_passes(f) -> None:
    per = {m: cost.train_flops_per_image(cell(m)) for m in ("fedavg_simclr", "fedu", "orchestra")}
    assert per["fedavg_simclr"] == pytest.approx(6 * f)  # two views with backward
    assert per["fedu"] == pytest.approx(8 * f)  # + BYOL's target network on both views
    assert per["orchestra"] == pytest.approx(7 * f)  # + the rotated view, target on one
    assert cost.train_flops_per_image(cell("dec_sl")) == pytest.approx(3 * f)
    clean = cell("featarc", method={"name": "featarc", "align_views": "view_and_clean"})
    assert cost.train_flops_per_image(clean) == pytest.approx(9 * f)


def test_fedmae_counts_its_encoder_on_the_visible_patches_only() -> None:
    mae = cell("fedmae", backbone={"name": "vit_base_p4"})
    dense = 6 * cost.backbone_flops(mae, 32)  # what a two-view count would say
    one_block = cost.train_flops_per_image(mae)
    assert 0 < one_block < dense / 4
    less_masked = cell(
        "fedmae", backbone={"name": "vit_base_p4"}, method={"name": "fedmae", "mask_ratio": 0.5}
    )
    assert cost.train_flops_per_image(less_masked) > one_block


def test_pooled_training_is_not_divided_by_the_clients(f) -> None:
    silo = {"num_clients": 10, "participation": 1.0, "rounds": 2, "local_epochs": 1}
    device = {"num_clients": 100, "participation": 0.1, "rounds": 2, "local_epochs": 1}
    pooled = [cost.cell_work(cell("central_ssl", fl=fl)).pretrain for fl in (silo, device)]
    assert pooled[0] == pytest.approx(pooled[1])
    assert pooled[0] == pytest.approx(2 * cal.train_images(cell("central_ssl")) * 6 * f)
    fed = [cost.cell_work(cell("fedavg_simclr", fl=fl)).pretrain for fl in (silo, device)]
    assert fed[1] == pytest.approx(fed[0] / 10, rel=0.02)  # 10 % of the clients a round
    from benchmark.grids.grid_plan import cell_cost

    assert cell_cost(cell("central_ssl", fl=device))["images"] == pytest.approx(
        cell_cost(cell("central_ssl", fl=silo))["images"]
    )


def test_server_steps_tasks_and_detection_are_counted(f) -> None:
    flesd = cell(
        "flesd",
        method={"name": "flesd", "distill_epochs": 4},
        public={"name": "holdout", "fraction": 0.1},
    )
    w = cost.cell_work(flesd)
    public = round(cal.train_images(flesd) * 0.1)
    assert w.server == pytest.approx(2 * (10 * public * f + 4 * public * 4 * f))
    tasks = cost.cell_work(
        cell("fedu", tasks=["knn", {"name": "semi_supervised", "label_fraction": 0.01}])
    ).tasks
    assert tasks["knn"] == pytest.approx((50000 + 10000) * f)
    assert tasks["semi_supervised"] == pytest.approx(2000 * 64 * 3 * f + 10000 * f)
    det = cell(
        "fedavg_simclr",
        dataset={"name": "imagenet100"},
        backbone={"name": "resnet18"},
        tasks=["coco_detection"],
    )
    lo, hi = cost.cell_work(det).detection
    assert 0 < lo < hi and lo >= 3 * 90000 * 16 * cost.DETECTION_HEADS_FLOPS[0]
    assert cost.cell_work(cell("no_pretrain")).pretrain == 0.0


def test_the_detection_schedule_is_the_tasks_preset() -> None:
    from tasks.coco_detection.task import PRESETS

    for name, (iters, batch) in cost.DETECTION_SCHEDULE.items():
        assert (PRESETS[name]["max_iter"], PRESETS[name]["ims_per_batch"]) == (iters, batch)


def test_plan_prints_the_whole_grid_with_its_assumptions(capsys) -> None:
    from benchmark.cli import main

    assert main(["plan", "--grid", "smoke", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for part in ("pre-training (clients)", "server steps", "downstream tasks", "COCO detection"):
        assert part in out
    assert "whole-grid cost on one H200" in out and "assumptions:" in out
    assert "BYOL (FedU, FedEMA) 8 F" in out


def test_the_projection_adds_the_rest_of_each_cell_at_the_measured_rate(f) -> None:
    c = cell("fedu", tasks=["knn", "linear_probe"])
    m = cal.Measurement(cal.train_key(c), cal.family_of(c), "ok", images_per_s=1000.0)
    calib = cal.Calibration("dev", False, "", {m.key: m})
    rate = cal.achieved_flops(calib, [c])
    assert rate == pytest.approx(1000.0 * 8 * f)
    proj = cal.projection({"g": [c]}, calib)
    s = proj["grids"]["g"]
    rest = 2 * (60000 * f) / rate / 3600
    assert cal.rest_hours([c], rate) == pytest.approx(rest)
    assert s["other_hours"] == round(rest, 3)
    assert s["total_hours"] == pytest.approx(s["device_hours"] + s["other_hours"], abs=2e-3)
    assert "downstream task" in proj["assumptions"][0]
    assert dataclasses.replace(calib, measurements={}).lookup(c)[0] is None
