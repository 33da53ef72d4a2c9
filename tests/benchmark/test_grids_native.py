"""The main grid and the native grids: resolved cells against the specs' hyperparameter tables,
plan, dry run and the missing-data preflight (issue 11 acceptance)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.grids.expand import expand_grid, grid_names, load_grid

load_builtins()
REPO = Path(__file__).resolve().parents[2]
NATIVE = [
    "native_orchestra",
    "native_decssl",
    "native_flesd",
    "native_fedmae",
    "native_fedu",
    "native_fedema",
]
_CELLS: dict[str, list] = {}


def cells_of(name: str) -> list:
    if name not in _CELLS:
        _CELLS[name] = expand_grid(load_grid(name))
    return _CELLS[name]


def fl(cell) -> tuple:
    return cell.fl.num_clients, cell.fl.participation, cell.fl.rounds, cell.fl.local_epochs


def sub(params, expected: dict) -> dict:
    return {k: params[k] for k in expected}


def approx_tuple(v) -> tuple:
    return tuple(round(float(x), 6) for x in v)


# ----------------------------------------------------------------------------------------------------
# main grid


def test_main_has_every_method_and_reference_point() -> None:
    names = {c.method.name for c in cells_of("main")}
    # every registered method, including the four reference points; not `pixels`, the embedded
    # default's input-itself reference (issue 48), which the GPU grids have not been costed with
    assert names == set(METHODS.names()) - {"pixels"}
    assert {"central_ssl", "local_ssl", "dec_sl", "no_pretrain"} <= names


def test_main_axes() -> None:
    cells = cells_of("main")
    cifar = [c for c in cells if c.dataset.name in ("cifar10", "cifar100")]
    parts = {(c.partition.name, c.partition.params.get("alpha")) for c in cifar}
    assert parts == {("iid", None), ("niid_bench_labeldir", 1.0), ("niid_bench_labeldir", 0.1)}
    assert {(c.fl.num_clients, c.fl.participation) for c in cifar} == {(10, 1.0), (100, 0.1)}
    assert {c.seed for c in cells} == {0, 1, 2} and {c.partition_seed for c in cells} == {0}
    for c in cifar:
        tasks = [(t.name, t.params.get("label_fraction")) for t in c.tasks]
        assert tasks[:4] == [
            ("knn", None),
            ("linear_probe", None),
            ("semi_supervised", 0.01),
            ("semi_supervised", 0.1),
        ]
        names = [t.name for t in c.tasks]
        # Dec-SL's own classifier, CIFAR cells
        assert ("e2e_classifier" in names) == (c.method.name == "dec_sl")
        assert ("perclient" in names) == (c.method.name != "fedmae")
        want = "vit_base_p4" if c.method.name == "fedmae" else {"resnet18_cifar", "vit_base_p4"}
        assert c.backbone.name in (want if isinstance(want, set) else {want})
    # each method sees every (dataset, partition, federation, seed) combination on CIFAR: 2 x 3 x 2
    # x 3 = 36
    per_method = Counter((c.method.name, c.backbone.name) for c in cifar)
    assert all(n == 36 for n in per_method.values()), per_method
    flesd = [c for c in cells if c.method.name == "flesd"]
    assert flesd and all(c.public is not None for c in flesd)
    assert all(c.public is None for c in cells if c.method.name != "flesd")


def test_main_budget_is_equal_and_stated() -> None:
    grid = load_grid("main")
    r, e = grid.budget["rounds"], grid.budget["local_epochs"]
    for c in cells_of("main"):
        # docs/methods/orchestra.md §3: + 1 initialisation round
        init_round = 1 if c.method.name == "orchestra" else 0
        assert (c.fl.rounds - init_round, c.fl.local_epochs) == (r, e), c.label()
    assert grid.budget["total_epochs"] == r * e


def test_main_orchestra_variants_follow_the_regime_and_dataset() -> None:
    # docs/methods/orchestra.md §3/§4: CD B 16 / eta 0.003 / m 0.996; CS B 256 / eta 0.01 / m 0.99;
    # (32, 8) C10, (256, 16) C100
    for c in cells_of("main"):
        if c.method.name != "orchestra":
            continue
        p = c.method.params
        regime = {16: (100, 0.003, 0.996), 256: (10, 0.01, 0.99)}[p["batch_size"]]
        assert (c.fl.num_clients, p["lr"], p["ema"]) == regime
        clusters = (32, 8) if c.dataset.name == "cifar10" else (256, 16)
        assert (p["num_global_clusters"], p["num_local_clusters"]) == clusters


def test_main_detection_subgrid() -> None:
    det = [c for c in cells_of("main") if c.dataset.name == "imagenet100"]
    assert det
    methods = {c.method.name for c in det}
    # every method that exports one ResNet: not FedMAE (ViT) and not local_ssl (one encoder per
    # client)
    assert methods == set(METHODS.names()) - {
        "fedmae",
        "local_ssl",
        "pixels",
    }  # a flat image is no FPN backbone
    for c in det:
        assert c.backbone.name == "resnet18"  # full stem
        assert "coco_detection" in [t.name for t in c.tasks]
        assert c.fl.num_clients == 10 and c.fl.participation == 1.0
    assert {(c.partition.name, c.partition.params.get("alpha")) for c in det} == {
        ("iid", None),
        ("niid_bench_labeldir", 0.1),
    }


def test_dry_run_lists_and_validates_every_main_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmark.cli import main

    # no CIFAR / ImageNet-100 / COCO here: every cell is listed and validated, and the absent data is
    # part of the plan (per dataset: the cells waiting on it, what it downloads), exit 3
    monkeypatch.setenv("FSSL_DATA_ROOT", str(tmp_path / "data"))
    assert main(["run", "--grid", "main", "--dry-run", "--root", str(tmp_path / "r")]) == 3
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("cost: "))
    ids = {line.split()[0] for line in out[:at]}
    assert ids == {c.cell_id for c in cells_of("main")}
    # what the cells cost (no calibration of this machine: plan's FLOP model, and where it looked)
    assert "H200-hours by plan's FLOP model" in out[at] and "no calibration of" in out[at]
    assert out[at + 1].startswith(
        f"{len(ids)} cells in grid 'main': configuration validated; data missing"
    )
    missing = {line.split()[0]: line for line in out[at + 3 : -1]}
    assert set(missing) == {"cifar10", "cifar100", "coco2017", "imagenet100"}
    det = sum(c.dataset.name == "imagenet100" for c in cells_of("main"))
    assert f"{det} cells waiting" in missing["coco2017"] and "login" in missing["imagenet100"]
    assert "GB to fetch" in missing["coco2017"]
    assert out[-1].endswith("with: python -m benchmark prefetch --grid main")
    assert captured.err == "" and not (tmp_path / "r").exists()


def test_run_main_without_data_stops_with_the_missing_datasets(tmp_path: Path) -> None:
    empty, root = tmp_path / "data", tmp_path / "runs"
    empty.mkdir()
    env = {**os.environ, "FSSL_DATA_ROOT": str(empty), "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark",
            "run",
            "--grid",
            "main",
            "--root",
            str(root),
            "--no-wandb",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    # one command first, then one short paragraph per dataset on its own lines; no literal \n
    assert lines[0].startswith("error: 4 dataset(s) missing for grid 'main'") and "GB" in lines[0]
    assert lines[1].strip() == "python -m benchmark prefetch --grid main"
    # wrapped at 100 columns; a `command` is never broken, so a line may hold a whole data-root path
    assert "\\n" not in proc.stderr and all(len(line) <= 100 + len(str(empty)) for line in lines)
    for name in ("cifar10", "cifar100", "imagenet100", "coco2017"):
        assert f"python -m benchmark prefetch {name}" in proc.stderr
    assert sum(line.startswith("  - ") for line in lines) == 4
    assert not root.exists() or not any(root.rglob("*"))  # nothing written


# -------------------------------------------------------------------------------------------------
# native grids Values transcribed from the specs (section cited at each table); the test compares
# resolved cells against them.

# docs/methods/orchestra.md §4 "Native settings to reproduce" + §3 (N_G, N_l; R = 100 training + 1
# init round)
ORCHESTRA = {
    "cross-device": {
        "fl": (100, 0.5, 101, 10),
        "method": {"batch_size": 16, "lr": 0.003, "ema": 0.996},
    },
    "cross-silo": {
        "fl": (10, 1.0, 101, 10),
        "method": {"batch_size": 256, "lr": 0.01, "ema": 0.99},
    },
}
ORCHESTRA_CLUSTERS = {"cifar10": (32, 8), "cifar100": (256, 16)}
# docs/methods/fedavg_simclr.md §5 orchestra_fsimclr_cd / _cs
FSIMCLR = {
    "loss_form": "ntxent_2b",
    "tau": 0.1,
    "optimizer": "sgd",
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "lr_schedule": "constant",
    "optimizer_state": "reset",
    "weighting": "num_batches",
    "projector": "orchestra",
}
FSIMCLR_REGIME = {
    100: {"lr": 0.003, "batch_size": 16, "fl": (100, 0.5, 100, 10)},
    10: {"lr": 0.03, "batch_size": 256, "fl": (10, 1.0, 100, 10)},
}
FSIMCLR_AUG = {
    "crop_scale": (0.5, 1.0),
    "interpolation": "bicubic",
    "flip_p": 0.5,
    "jitter": (0.4, 0.4, 0.2, 0.1),
    "jitter_p": 0.8,
    "gray_p": 0.2,
    "blur_p": 0.5,
    "blur_sigma": (0.1, 2.0),
    "blur_kernel": 3,
}


def test_native_orchestra_matches_spec() -> None:
    cells = cells_of("native_orchestra")
    assert {c.dataset.name for c in cells} == {"cifar10", "cifar100"}
    for c in cells:
        assert c.backbone.name == "resnet18_cifar"
        # Normalize(0.5, 0.5) on every view (docs/methods/orchestra.md §2.10)
        assert c.dataset.params["normalize"] == "half"
        assert (c.partition.name, c.partition.params["alpha"], c.partition_seed) == (
            "orchestra_sinkhorn",
            0.1,
            0,
        )
        p = c.method.params
        if c.method.name == "orchestra":
            regime = ORCHESTRA["cross-device" if c.fl.num_clients == 100 else "cross-silo"]
            assert fl(c) == regime["fl"] and sub(p, regime["method"]) == regime["method"]
            assert (p["num_global_clusters"], p["num_local_clusters"]) == ORCHESTRA_CLUSTERS[
                c.dataset.name
            ]
        elif c.method.name == "fedavg_simclr":
            reg = FSIMCLR_REGIME[c.fl.num_clients]
            assert fl(c) == reg["fl"] and (p["lr"], p["batch_size"]) == (
                reg["lr"],
                reg["batch_size"],
            )
            assert sub(p, FSIMCLR) == FSIMCLR
            aug = p["augment"]
            for k, v in FSIMCLR_AUG.items():
                assert (approx_tuple(aug[k]) if isinstance(v, tuple) else aug[k]) == (
                    approx_tuple(v) if isinstance(v, tuple) else v
                ), k
        else:
            assert c.method.name == "dec_sl" and c.fl.rounds == 100 and c.fl.local_epochs == 10
    assert Counter(c.method.name for c in cells) == {
        "orchestra": 12,
        "fedavg_simclr": 12,
        "dec_sl": 12,
    }
    assert {c.seed for c in cells} == {0, 1, 2}  # Table 1: mean ± std over 3 seeds


# docs/methods/fedavg_simclr.md §5 decssl_cifar, docs/methods/featarc.md §4-§5 featarc_decssl (Table
# 2: K 5, p 1, E 5, R 100)
DECSSL_FL = (5, 1.0, 100, 5)
DECSSL_FEDAVG = {
    "weighting": "uniform",
    "bn": "average",
    "optimizer": "adam",
    "lr": 1e-3,
    "weight_decay": 1e-6,
    "batch_size": 256,
    "tau": 0.5,
    "lr_schedule": "step_rounds",
    "optimizer_state": "reset",
}
DECSSL_FEATARC = {
    "num_clusters": 2,
    "reg_scale": 1.0,
    "weighting": "uniform",
    "bn": "average",
    "lr_schedule": "constant",
    "optimizer": "adam",
    "lr": 1e-3,
    "weight_decay": 1e-6,
    "batch_size": 256,
    "tau": 0.5,
}


def test_native_decssl_matches_spec() -> None:
    from methods.featarc import PRESETS

    preset = dict(PRESETS["featarc_decssl"])
    # docs/methods/featarc.md §5: the preset reports as the paper
    assert preset.pop("report_model") == "max_over_clusters"
    assert DECSSL_FEATARC.items() >= preset.items()  # the method's own preset agrees
    cells = cells_of("native_decssl")
    for c in cells:
        assert fl(c) == DECSSL_FL and c.backbone.name == "resnet18_cifar"
        if c.partition.name != "iid":
            assert c.partition.name == "decssl_band" and c.partition.params["alpha"] == 0.02
        # train_val_test keeps the first 80 % of every client's indices, IID included
        assert [dict(m) for m in c.partition.params["modifiers"]] == [
            {"name": "decssl_prefix", "fraction": 0.8}
        ]
        p = c.method.params
        if c.method.name == "fedavg_simclr":
            assert sub(p, DECSSL_FEDAVG) == DECSSL_FEDAVG
        elif c.method.name == "featarc":
            assert sub(p, DECSSL_FEATARC) == DECSSL_FEATARC and c.dataset.name == "cifar10"
        elif c.method.name == "dec_sl":
            # §3: constant 1e-3
            assert (p["optimizer"], p["lr"], p["lr_schedule"]) == ("adam", 1e-3, "constant")
            # update.py update_weights: Adam(lr, weight_decay=1e-6)
            assert p["weight_decay"] == 1e-6
        # centralized_ssl_main.py: MultiStepLR [30, 60, 90] epochs
        elif c.method.name == "central_ssl":
            assert (p["lr_schedule"], tuple(p["lr_milestones"]), p["lr_gamma"]) == (
                "step_epochs",
                (30, 60, 90),
                0.3,
            )
        transfer = [
            (t.params["target"], t.params["label_fraction"])
            for t in c.tasks
            if t.name == "transfer"
        ]
        # Table 4 / Table 2 bottom
        target = {"cifar10": "stl10", "cifar100": "cifar10"}[c.dataset.name]
        assert transfer == [(target, 1.0), (target, 0.1), (target, 0.01)]
    assert {c.method.name for c in cells} == {
        "fedavg_simclr",
        "featarc",
        "dec_sl",
        "no_pretrain",
        "central_ssl",
    }
    assert {c.method.params["report_model"] for c in cells if c.method.name == "featarc"} == {
        "largest_cluster",
        "max_over_clusters",
    }


# docs/methods/flesd.md §3-§4: K 6, p 1, E_total 200; FLESD T 2 x E 100 with shard 0 = D_pub; FedAvg
# T 10 x E 20 on all 6; local B / tau per dataset; ImageNet-100 on ResNet-50
FLESD_LOCAL = {
    "cifar10": (1024, 0.4),
    "cifar100": (1024, 0.4),
    "tiny_imagenet": (256, 0.4),
    "imagenet100": (128, 0.2),
}
FLESD_ESD = {
    "tau_teacher": 0.1,
    "tau_student": 0.1,
    "distill_batch_size": 128,
    "distill_epochs": 200,
    "key_momentum": 0.999,
    "queue_size": 2048,
    "topk_percent": 100.0,
    "local_lr": 1e-3,
    "local_weight_decay": 1e-6,
    "distill_lr": 1e-3,
    "distill_weight_decay": 1e-6,
    "head_dim": 128,
}
FLESD_FEDAVG = {
    "loss_form": "crossview_1dir",
    "optimizer": "adam",
    "lr": 1e-3,
    "weight_decay": 1e-6,
    "weighting": "uniform",
    "bn": "average",
    "proj_out": 128,
    "optimizer_state": "reset",
    "projector": "flesd",
}
FLESD_AUG = {
    "crop_scale": (0.2, 1.0),
    "jitter": (0.8, 0.8, 0.8, 0.2),
    "jitter_p": 0.8,
    "gray_p": 0.2,
    "flip_p": 0.5,
    "blur_p": 0.0,
}
# docs/methods/flesd.md §2.9: Tiny-ImageNet and ImageNet-100 have their own views (stronger jitter
# hue, grayscale and blur); the blur kernel spans +-3 sigma at the largest sigma (2): 2 * 3 * 2 + 1
# = 13 taps
FLESD_AUG_BIG = {
    "crop_scale": (0.2, 1.0),
    "jitter": (0.8, 0.8, 0.8, 0.4),
    "jitter_p": 0.8,
    "gray_p": 0.5,
    "flip_p": 0.5,
    "blur_p": 0.5,
    "blur_sigma": (0.1, 2.0),
    "blur_kernel": 2 * 3 * 2 + 1,
}


def test_native_flesd_matches_spec() -> None:
    cells = cells_of("native_flesd")
    assert {c.partition.params["alpha"] for c in cells} == {100, 1, 0.01}
    for c in cells:
        assert c.partition.name == "flesd_minshare" and c.partition_seed == 0
        # docs/methods/flesd.md §4 augmentation table: Normalize(0.5) on CIFAR, ImageNet statistics
        # on Tiny-ImageNet / IN-100
        assert c.dataset.params["normalize"] == (
            "half" if c.dataset.name.startswith("cifar") else "imagenet"
        )
        b, tau = FLESD_LOCAL[c.dataset.name]
        assert c.backbone.name == (
            "resnet50" if c.dataset.name == "imagenet100" else "resnet18_cifar"
        )
        p = c.method.params
        if c.method.name == "flesd":
            # 5 + D_pub = 6 shards
            assert fl(c) == (5, 1.0, 2, 100) and c.public.name == "first_shard"
            assert (p["local_batch_size"], p["local_tau"]) == (b, tau) and sub(
                p, FLESD_ESD
            ) == FLESD_ESD
        else:
            want_fl = (6, 1.0, 10, 20) if c.method.name == "fedavg_simclr" else (6, 1.0, 1, 200)
            assert fl(c) == want_fl and c.public is None
            assert (p["batch_size"], p["tau"], p["loss_form"], p["projector"]) == (
                b,
                tau,
                "crossview_1dir",
                "flesd",
            )
            if c.method.name == "fedavg_simclr":
                assert sub(p, FLESD_FEDAVG) == FLESD_FEDAVG
        # FLESD and baselines alike
        aug = FLESD_AUG if c.dataset.name.startswith("cifar") else FLESD_AUG_BIG
        for k, v in aug.items():
            got = p["augment"][k]
            assert (approx_tuple(got) if isinstance(v, tuple) else got) == (
                approx_tuple(v) if isinstance(v, tuple) else v
            ), k
        assert c.fl.rounds * c.fl.local_epochs == 200  # E_total
        if c.dataset.name == "imagenet100":
            assert ("transfer", "cifar100") in [(t.name, t.params.get("target")) for t in c.tasks]


# docs/methods/fedmae.md §3-§4: Mini-ImageNet 224 px, 100 clients, 5 per round, 200 x 10, IID and
# Dirichlet 0.1
def test_native_fedmae_matches_spec() -> None:
    cells = cells_of("native_fedmae")
    for c in cells:
        assert c.dataset.name == "mini_imagenet" and c.dataset.params["size"] == 224
        rounds = 201 if c.method.name == "orchestra" else 200
        assert fl(c) == (100, 0.05, rounds, 10) and c.fl.clients_per_round == 5
        assert c.partition.name in ("iid", "niid_bench_labeldir")
        if c.partition.name != "iid":
            assert c.partition.params["alpha"] == 0.1
        if c.method.name == "fedmae":
            assert c.backbone.name == "vit_base_p16" and c.backbone.params["img_size"] == 224
            p = c.method.params
            assert (p["mask_ratio"], p["aggregate"], p["batch_size"], p["blr"]) == (
                0.75,
                "none",
                128,
                1.5e-4,
            )
            assert "reconstruction" in [t.name for t in c.tasks]
        else:
            assert c.backbone.name == "resnet18"  # Table 2 parameter counts: torchvision ResNet-18
    assert {c.method.name for c in cells} == {
        "fedmae",
        "fedavg_simclr",
        "fedu",
        "fedema",
        "orchestra",
    }


# docs/methods/fedu.md §3-§4 and docs/methods/fedema.md §3-§4 (EasyFL defaults)
EASYFL = {
    "lr": 0.032,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "batch_size": 128,
    "drop_last": True,
    "target_momentum": 0.99,
    "dapu_threshold": 0.4,
    "proj_hidden": 4096,
    "proj_out": 2048,
    "pred_hidden": 4096,
}
EASYFL_AUG = {
    "crop_scale": (0.08, 1.0),
    "flip_p": 0.5,
    "jitter": (0.8, 0.8, 0.8, 0.2),
    "jitter_p": 0.8,
    "gray_p": 0.2,
    "blur_p": 0.0,
}


@pytest.mark.parametrize("method", ["fedu", "fedema"])
def test_native_fedu_fedema_match_spec(method: str) -> None:
    cells = cells_of(f"native_{method}")
    # run both (§6)
    assert {c.method.params["divergence_ref"] for c in cells} == {"global", "local_drift"}
    for c in cells:
        assert (
            c.method.name == method
            and fl(c) == (5, 1.0, 100, 5)
            and c.backbone.name == "resnet18_cifar"
        )
        per_client = {"cifar10": 2, "cifar100": 20}[c.dataset.name]
        assert c.dataset.params["normalize"] == "none"  # EasyFL: ToTensor only, no Normalize
        assert (c.partition.name, c.partition.params["classes_per_client"]) == (
            "easyfl_class",
            per_client,
        )
        p = c.method.params
        assert sub(p, EASYFL) == EASYFL
        for k, v in EASYFL_AUG.items():
            got = p["augment"][k]
            assert (approx_tuple(got) if isinstance(v, tuple) else got) == (
                approx_tuple(v) if isinstance(v, tuple) else v
            ), k
        if method == "fedema":
            # docs/methods/fedema.md §6 items 2, 7: mu_max 1.0 under local_drift (EasyFL), 0.7 under
            # the printed global formula
            want = 1.0 if p["divergence_ref"] == "local_drift" else 0.7
            assert (p["autoscaler"], p["autoscaler_tau"], p["mu_max"]) == (True, 0.7, want)
        assert ("semi_supervised", 0.1) in [
            (t.name, t.params.get("label_fraction")) for t in c.tasks
        ]


SYNTHETIC = {
    "cifar10": (50000, 10),
    "cifar100": (50000, 100),
    "tiny_imagenet": (100000, 200),
    "imagenet100": (126689, 100),
    "mini_imagenet": (50000, 100),
}


@pytest.mark.parametrize("name", NATIVE + ["main"])
def test_partitions_are_feasible_on_the_real_label_shapes(name: str) -> None:
    """What preflight would check with the data: every partition builds on balanced labels of the
    real size."""
    from benchmark.engine.stages import build_partition

    seen = set()
    for c in cells_of(name):
        key = (c.dataset.name, repr(c.partition), c.fl.num_clients, repr(c.public))
        if key in seen:
            continue
        seen.add(key)
        n, classes = SYNTHETIC[c.dataset.name]
        labels = np.resize(np.arange(classes), n)
        part = build_partition(c, labels)
        assert len(part.client_indices) == c.fl.num_clients
        assert all(len(ix) > 0 for ix in part.client_indices), c.label()


@pytest.mark.slow
def test_plan_works_for_every_grid_offline() -> None:
    from benchmark.grids.grid_plan import plan_grid

    for name in grid_names():
        grid = load_grid(name)
        out = plan_grid(grid, cells_of(name))
        assert out.splitlines()[0] == f"grid {grid.name!r}: {len(cells_of(name))} cells"
        assert out.splitlines()[-1].startswith("pre-training: ")


def test_reference_mapping_points_at_existing_rows_and_cells() -> None:
    import yaml

    from benchmark.grids.expand import parse_only

    mapping = yaml.safe_load(
        (REPO / "results" / "manifests" / "native_references.yaml").read_text()
    )
    for ref_file, entry in mapping.items():
        ref = yaml.safe_load((REPO / "results" / "reference" / ref_file).read_text())
        ref_methods = {r.get("method") for r in ref["rows"]}
        for row in entry["rows"]:
            assert row["method"] in ref_methods, (ref_file, row)
            cells = expand_grid(load_grid(entry["grid"]), only=parse_only(row["only"]))
            assert cells and all(c.method.name == row["method"] for c in cells), (ref_file, row)


# docs/protocols/evaluation.md §3.3-§3.6: each native grid scores its cells with the paper's own
# cards (tasks linear_native, semisup_native, transfer_native) next to the canonical ones; name ->
# (expected native card names, selects on test)
NATIVE_CARDS = {
    "native_orchestra": ({"linear/orchestra", "semisup/orchestra"}, False),
    "native_decssl": ({"linear/decssl", "transfer/decssl"}, True),
    "native_flesd": ({"linear/moco-lincls"}, True),
    "native_fedu": ({"linear/easyfl"}, False),
    "native_fedema": ({"linear/easyfl"}, False),
}


@pytest.mark.parametrize("name", sorted(NATIVE_CARDS))
def test_native_grids_carry_the_papers_cards(name: str) -> None:
    from benchmark.contracts.registries import TASKS
    from benchmark.core.config import from_mapping
    from tasks.cards import load_card

    want, on_test = NATIVE_CARDS[name]
    canonical = {"knn@v1", "linear@v1"}
    cards_by_spec: dict[str, object] = {}
    for c in cells_of(name):
        names = set()
        for t in c.tasks:
            key = repr(t)
            if key not in cards_by_spec:
                cls = TASKS.get(t.name)
                cards_by_spec[key] = cls(from_mapping(cls.Config, dict(t.params))).card()
            card = cards_by_spec[key]
            names.add(card.name)
            if card.name in want:
                assert card.selects_on_test == on_test, (name, card.name)
                assert load_card(card.name).status == "native"
        assert canonical <= names, (name, c.label())
        assert names & want == want, (name, c.label(), names)
    if name == "native_orchestra":
        fractions = {
            t.params["label_fraction"]
            for c in cells_of(name)
            for t in c.tasks
            if t.name == "semisup_native"
        }
        assert fractions == {0.01, 0.1}
    if name == "native_decssl":
        for c in cells_of(name):
            target = {"cifar10": "stl10", "cifar100": "cifar10"}[c.dataset.name]
            native = [
                (t.params["target"], t.params["label_fraction"])
                for t in c.tasks
                if t.name == "transfer_native"
            ]
            assert native == [(target, 1.0), (target, 0.1), (target, 0.01)]
    if name == "native_flesd":
        lrs = {
            (c.backbone.name, t.params.get("lr"))
            for c in cells_of(name)
            for t in c.tasks
            if t.name == "linear_native"
        }
        # card lr 0.03 for ResNet-18; README 0.3 for R50
        assert lrs == {("resnet18_cifar", None), ("resnet50", 0.3)}
