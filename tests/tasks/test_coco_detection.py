"""``coco_detection`` (docs/protocols/evaluation.md §4, §7.6–7.7): lazy registration, presets and
cards without Detectron2; with it (marker ``detectron2``) converted weights load with no missing
backbone tensors and the CPU smoke trains on ``shapes_coco`` and is scored by COCOEvaluator; without
it a grid cell fails with the install hint and the grid goes on."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.api import (
    TASKS,
    Encoder,
    Stream,
    arch_fingerprint,
    build_backbone,
    scoped_torch_seed,
)
from benchmark.launchers.local import LocalLauncher
from benchmark.launchers.options import RunOptions
from tasks.coco_detection.task import CocoDetectionConfig, resolve_settings
from tests.helpers import smoke_cell

DETECTION = {"name": "coco_detection", "dataset": "shapes_coco"}


def _encoder(name: str = "resnet_micro", **params) -> Encoder:
    with scoped_torch_seed(0, Stream.INIT):
        module, dim = build_backbone(name, params)
    return Encoder(
        module=module,
        feat_dim=dim,
        backbone=name,
        fingerprint=arch_fingerprint(module),
        input_size=32,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )


def test_registration_is_lazy_and_imports_no_detectron2():
    code = (
        "import sys; import tasks.registration; from benchmark.contracts.registries import TASKS; "
        "assert 'coco_detection' in TASKS.names(); assert 'detectron2' not in sys.modules; "
        "cls = TASKS.get('coco_detection'); assert 'detectron2' not in sys.modules; print(cls.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "CocoDetection"


def test_presets_follow_the_spec():
    coco = CocoDetectionConfig()
    full, cifar = resolve_settings(coco, "full", 1), resolve_settings(coco, "cifar", 1)
    assert (
        full["norm"],
        full["freeze_at"],
        full["ims_per_batch"],
        full["base_lr"],
        full["max_iter"],
    ) == ("FrozenBN", 2, 16, 0.02, 90000)
    assert full["steps"] == (60000, 80000) and not full["clip_gradients"]
    assert (cifar["norm"], cifar["freeze_at"]) == ("BN", 0) and resolve_settings(coco, "cifar", 8)[
        "norm"
    ] == "SyncBN"
    smoke = resolve_settings(CocoDetectionConfig(dataset="shapes_coco"), "cifar", 0)
    assert (
        smoke["norm"],
        smoke["freeze_at"],
        smoke["clip_gradients"],
        smoke["ims_per_batch"],
        smoke["max_iter"],
        smoke["min_size_train"],
        smoke["max_size_test"],
        smoke["num_workers"],
    ) == ("BN", 0, True, 2, 5, (128,), 160, 0)
    # from scratch
    assert resolve_settings(CocoDetectionConfig(dataset="shapes_coco"), "full", 0)["norm"] == "BN"


def test_the_r18fpn_1x_preset_is_coco2017s_and_refused_elsewhere():
    """The R18-FPN 1x cards name COCO 2017 in their settings; the card name used to ignore the
    dataset, so `preset: decssl_1x` on the embedded shapes produced a card named for COCO."""
    from benchmark.core.config import from_mapping

    with pytest.raises(ValueError, match="COCO 2017's protocol"):
        CocoDetectionConfig(dataset="shapes_coco", preset="decssl_1x")
    # a grid's task entry, as expansion reads it
    with pytest.raises(ValueError, match="COCO 2017's protocol"):
        from_mapping(CocoDetectionConfig, {"dataset": "shapes_coco", "preset": "decssl_1x"})
    cls = TASKS.get("coco_detection")
    assert (
        cls(CocoDetectionConfig(dataset="shapes_coco")).card("full").name
        == "detection/shapes-smoke@v1"
    )
    assert (
        cls(CocoDetectionConfig(preset="cpu_smoke")).card("full").name == "detection/cpu-smoke@v1"
    )
    # every card a config produces says the dataset it was measured on
    for stem in ("full", "cifar"):
        for c in (
            CocoDetectionConfig(),
            CocoDetectionConfig(dataset="shapes_coco"),
            CocoDetectionConfig(preset="cpu_smoke"),
        ):
            assert cls(c).card(stem).settings["dataset"] == c.dataset


def test_several_gpus_are_refused_where_they_cannot_run():
    from tasks.coco_detection.task import CocoDetectionConfig as C

    with pytest.raises(ValueError, match="num_gpus must be >= 1"):
        C(num_gpus=0)
    pytest.importorskip(
        "detectron2", reason="Detectron2 is not installed (bash .ci/install-detectron2.sh)"
    )
    from tasks.coco_detection.d2 import gpus_for

    assert gpus_for(1, "cpu") == 0
    with pytest.raises(ValueError, match="needs CUDA"):
        gpus_for(2, "cpu")
    import torch

    with pytest.raises(ValueError, match="this machine has"):
        gpus_for(torch.cuda.device_count() + 1, "cuda")


def test_cards_name_the_stem_and_change_with_the_config():
    cls = TASKS.get("coco_detection")
    task = cls(CocoDetectionConfig())
    assert task.card("full").name == "detection/maskrcnn-r18fpn-1x@v1"
    assert task.card("cifar").name == "detection/maskrcnn-r18fpn-1x-cifarstem@v1"
    assert task.card("full").card_id != task.card("cifar").card_id
    assert cls(CocoDetectionConfig(max_iter=10)).card().card_id != task.card().card_id
    assert not task.card().selects_on_test and task.card().settings["eval_period"] == 0


@pytest.mark.slow
def test_without_detectron2_the_cell_fails_with_the_hint_and_the_grid_goes_on(
    tmp_path, monkeypatch
):
    # `import detectron2` now raises ImportError
    monkeypatch.setitem(sys.modules, "detectron2", None)
    cells = [
        smoke_cell("fedavg_simclr", tasks=[DETECTION]),
        smoke_cell("fedavg_simclr", tasks=["knn"]),
    ]
    outcomes = list(
        LocalLauncher(options=RunOptions(device="cpu"), workers=1).launch(cells, tmp_path)
    )
    assert [o.status for o in outcomes] == ["failed", "done"]
    assert "pip install" in outcomes[0].error and "detectron2" in outcomes[0].error.lower()
    assert "\n" not in outcomes[0].error.split(": ", 1)[1]  # one line
    error = json.loads((tmp_path / "fedavg_simclr" / cells[0].cell_id / "error.json").read_text())
    assert "DetectronUnavailable" in error["reason"] and "install" in error["reason"]
    assert (tmp_path / "fedavg_simclr" / cells[1].cell_id / "record.json").exists()


@pytest.mark.detectron2
@pytest.mark.parametrize(
    "name,policy,missing",
    [
        ("resnet18", "reinit", []),  # full stem: everything maps
        (
            "resnet18_cifar",
            "reinit",
            [
                "stem.conv1.norm.bias",
                "stem.conv1.norm.running_mean",
                "stem.conv1.norm.running_var",
                "stem.conv1.norm.weight",
                "stem.conv1.weight",
            ],
        ),
        ("resnet18_cifar", "inflate", []),
        ("resnet_micro", "inflate", []),
    ],
)
def test_detectron2_model_loads_the_converted_weights(tmp_path, name, policy, missing):
    pytest.importorskip(
        "detectron2", reason="Detectron2 is not installed (bash .ci/install-detectron2.sh)"
    )
    from detectron2.checkpoint import DetectionCheckpointer
    from detectron2.modeling import build_model

    from tasks.coco_detection import d2
    from tasks.coco_detection.convert import resnet_layout, to_detectron2, write_detectron2_pickle

    enc = _encoder(name)
    state = enc.module.state_dict()
    layout = resnet_layout(state)
    weights = to_detectron2(state, policy)
    pkl = write_detectron2_pickle(weights, tmp_path / "w.pkl")
    settings = resolve_settings(CocoDetectionConfig(stem_policy=policy), layout["stem"], 1)
    cfg = d2.build_config(
        settings,
        layout,
        enc,
        weights=str(pkl),
        train="unused",
        test="unused",
        num_classes=2,
        output_dir=tmp_path,
        device="cpu",
        seed=0,
    )
    assert cfg.MODEL.BACKBONE.NAME == (
        "build_resnet_fpn_backbone" if name != "resnet_micro" else d2.FSSL_BACKBONE
    )
    model = build_model(cfg)
    DetectionCheckpointer(model).load(str(pkl))
    loaded, not_loaded = d2.loaded_backbone_keys(model, weights)
    assert not_loaded == missing
    # every converted tensor sits, bit for bit, in the Detectron2 backbone
    assert len(loaded) == len(weights)
    if name == "resnet18":
        assert cfg.MODEL.RESNETS.DEPTH == 18 and cfg.MODEL.RESNETS.NORM == "FrozenBN"
        assert list(cfg.MODEL.PIXEL_MEAN) == pytest.approx([123.675, 116.28, 103.53])
        assert list(cfg.MODEL.PIXEL_STD) == pytest.approx([58.395, 57.12, 57.375])


@pytest.mark.detectron2
@pytest.mark.slow
def test_cpu_smoke_on_shapes_coco_through_run_cell(tmp_path):
    """§4.3 asserts: 5 finite losses; COCOEvaluator returns bbox and segm; no missing res2-res5
    tensors."""
    pytest.importorskip(
        "detectron2", reason="Detectron2 is not installed (bash .ci/install-detectron2.sh)"
    )
    pytest.importorskip("pycocotools", reason="pycocotools is not installed")
    from benchmark.engine.runner import run_cell

    record = run_cell(smoke_cell("fedavg_simclr", tasks=[DETECTION]), tmp_path, device="cpu")
    s = record.score("coco_detection")
    assert s is not None and s.card.name == "detection/shapes-smoke@v1"
    assert len(s.extra["losses"]) == 5 and all(math.isfinite(v) for v in s.extra["losses"])
    assert set(s.values) == {f"{k}_{m}" for k in ("bbox", "segm") for m in ("AP", "AP50", "AP75")}
    assert all(0.0 <= v <= 100.0 for v in s.values.values())
    assert not [k for k in s.extra["backbone_keys_missing"] if not k.startswith("stem.")]
    # the protocol card is the committed card for this config; the run's framework facts sit beside
    # it
    from benchmark.core.config import from_mapping

    cls = TASKS.get("coco_detection")
    task = cls(from_mapping(cls.Config, {k: v for k, v in DETECTION.items() if k != "name"}))
    assert (
        s.card.card_id == task.card(s.extra["layout"]["stem"]).card_id
        and s.card.settings["norm"] == "BN"
    )
    assert (
        "detectron2_version" not in s.card.settings and s.extra["framework"]["detectron2_version"]
    )
    inference = list(
        (tmp_path / "fedavg_simclr").glob("*/tasks/coco_detection/detectron2/inference/*.json")
    )
    assert inference  # COCOEvaluator wrote its predictions: the AP was computed, not assumed
    assert not list(
        (tmp_path / "fedavg_simclr").glob("*/tasks/coco_detection/detectron2/model_final.pth")
    )


@pytest.mark.detectron2
def test_a_leftover_checkpoint_of_other_weights_is_never_resumed(tmp_path: Path) -> None:
    """resume_or_load(resume=True) resumed any checkpoint left in the task folder and skipped the
    weights check: now only a checkpoint trained from the same converted weights (its digest in the
    marker) is resumed."""
    pytest.importorskip(
        "detectron2", reason="Detectron2 is not installed (bash .ci/install-detectron2.sh)"
    )
    from tasks.coco_detection.d2 import RESUME_MARKER, resume_allowed

    out = tmp_path / "detectron2"
    out.mkdir()
    (out / "model_0000099.pth").write_bytes(b"other encoder's weights")
    (out / "last_checkpoint").write_text("model_0000099.pth")
    assert not resume_allowed(out, "a" * 64)  # no marker: a leftover of unknown origin, removed
    assert not (out / "last_checkpoint").exists() and not list(out.glob("model_*.pth"))
    assert (out / RESUME_MARKER).read_text().strip() == "a" * 64
    (out / "model_0000199.pth").write_bytes(b"this encoder's checkpoint")
    (out / "last_checkpoint").write_text("model_0000199.pth")
    assert resume_allowed(out, "a" * 64)  # a requeue of the same weights resumes
    # other weights: fresh
    assert not resume_allowed(out, "b" * 64) and not (out / "last_checkpoint").exists()


@pytest.mark.detectron2
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet18_cifar"])
def test_the_spec_r18_fpn_mask_rcnn_trains_a_few_iterations_on_cpu(tmp_path, name):
    """docs/protocols/evaluation.md §4.3: the CI smoke trains the R18-FPN Mask R-CNN of §4.1
    (Detectron2's stock ResNet-FPN builder at depth 18, width 64), not only the width-8
    resnet_micro: a randomly initialised canonical ResNet-18 (and the CIFAR stem, re-initialised) is
    converted, loaded without missing res2-res5 tensors, trained 3 iterations with finite losses and
    scored by COCOEvaluator (bbox and segm)."""
    pytest.importorskip(
        "detectron2", reason="Detectron2 is not installed (bash .ci/install-detectron2.sh)"
    )
    pytest.importorskip("pycocotools", reason="pycocotools is not installed")
    import torch

    from benchmark.api import TaskContext, load_dataset_splits

    cls = TASKS.get("coco_detection")
    task = cls(CocoDetectionConfig(dataset="shapes_coco", max_iter=3, shapes_train=6, shapes_val=4))
    ctx = TaskContext(
        dataset=load_dataset_splits("digits"),
        data_root=tmp_path,
        out_dir=tmp_path / "task",
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )
    s = task.run(_encoder(name), ctx)
    # the stock R-FPN, depth 18
    assert s.extra["framework"]["backbone_builder"] == "build_resnet_fpn_backbone"
    assert s.extra["framework"]["launcher"] == "in-process" and s.extra["framework"]["norm"] == "BN"
    assert s.extra["layout"]["stem"] == ("full" if name == "resnet18" else "cifar")
    assert len(s.extra["losses"]) == 3 and all(math.isfinite(v) for v in s.extra["losses"])
    assert not [k for k in s.extra["backbone_keys_missing"] if not k.startswith("stem.")]
    # res2-res5 of a ResNet-18 (a width-8 micro net has 60 in all)
    assert s.extra["backbone_keys_loaded"] >= 95
    assert set(s.values) == {f"{k}_{m}" for k in ("bbox", "segm") for m in ("AP", "AP50", "AP75")}
    assert s.card.name == "detection/shapes-smoke@v1"


@pytest.mark.gpu
@pytest.mark.detectron2
def test_two_gpus_train_through_detectron2_launch_with_syncbn(tmp_path):
    """The CIFAR-stem card's SyncBN branch: num_gpus 2 runs Detectron2's launch (one process per
    GPU, DDP)."""
    import torch

    # a `gpu` test (deselected in CI): run it with -m gpu on a machine with two GPUs and the
    # official Detectron2
    assert torch.cuda.device_count() >= 2, "this test needs 2 CUDA GPUs"
    pytest.importorskip("detectron2", reason="Detectron2 is not installed (see docs/detection.md)")
    from benchmark.api import TaskContext, load_dataset_splits

    task = TASKS.get("coco_detection")(
        CocoDetectionConfig(dataset="shapes_coco", max_iter=3, num_gpus=2, ims_per_batch=4)
    )
    ctx = TaskContext(
        dataset=load_dataset_splits("digits"),
        data_root=tmp_path,
        out_dir=tmp_path / "task",
        device=torch.device("cuda"),
        seed=0,
        feature_cache={},
    )
    s = task.run(_encoder("resnet18_cifar"), ctx)
    fw = s.extra["framework"]
    assert (fw["num_gpus"], fw["ims_per_gpu"], fw["norm"], fw["launcher"]) == (
        2,
        2,
        "SyncBN",
        "detectron2.engine.launch",
    )
    assert len(s.extra["losses"]) == 3 and all(math.isfinite(v) for v in s.extra["losses"])


@pytest.mark.detectron2
def test_a_divergence_on_the_main_process_stops_every_process(monkeypatch):
    """Several GPUs: Detectron2 checks the loss on the main process only, which then leaves the
    loop; without an answer the other process would block in its next collective (a hung cell). Two
    threads play the two processes with a barrier for all_gather: the main one diverges at step 3,
    both end with a FloatingPointError, none hangs; without divergence both finish."""
    pytest.importorskip(
        "detectron2", reason="Detectron2 is not installed (bash .ci/install-detectron2.sh)"
    )
    import threading

    from detectron2.utils import comm

    from tasks.coco_detection import d2

    def play(diverge_at):
        barrier, slots, local = threading.Barrier(2, timeout=10), [None, None], threading.local()

        def all_gather(value):
            slots[local.rank] = value
            barrier.wait()
            out = list(slots)
            barrier.wait()
            return out

        monkeypatch.setattr(comm, "all_gather", all_gather)
        ended = {}

        def process(rank):
            local.rank = rank
            hook = d2._AgreeFinite()
            try:
                for step in range(6):
                    if rank == 0 and step == diverge_at:
                        raise FloatingPointError("Loss became infinite or NaN at iteration=3!")
                    hook.after_step()
                ended[rank] = "finished"
            except FloatingPointError as exc:
                d2.answer_peers(exc, several=True)
                ended[rank] = type(exc).__name__

        threads = [threading.Thread(target=process, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert not any(t.is_alive() for t in threads), "a process hung"
        return ended

    assert play(diverge_at=3) == {0: "FloatingPointError", 1: "_PeerDiverged"}
    assert play(diverge_at=None) == {0: "finished", 1: "finished"}
