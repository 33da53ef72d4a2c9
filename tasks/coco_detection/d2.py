"""The Detectron2 side of ``coco_detection``: config, backbone, data registration, training and COCO
evaluation.

Imported only from ``CocoDetection.run`` (after checking that Detectron2 and pycocotools import).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from detectron2 import model_zoo
from detectron2.config import CfgNode, get_cfg
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.engine import DefaultTrainer, HookBase
from detectron2.evaluation import COCOEvaluator
from detectron2.layers import ShapeSpec
from detectron2.modeling import BACKBONE_REGISTRY
from detectron2.modeling.backbone.fpn import FPN, LastLevelMaxPool
from detectron2.modeling.backbone.resnet import BasicBlock, BasicStem, BottleneckBlock, ResNet
from detectron2.utils.env import seed_all_rng
from detectron2.utils.events import CommonMetricPrinter, JSONWriter

from benchmark.api import DatasetUnavailable, Diverged, Encoder
from tasks.coco_detection.convert import write_detectron2_pickle

CONFIG = "mask_rcnn_R_18_FPN_1x.yaml"
FSSL_BACKBONE = "build_fssl_resnet_fpn_backbone"


@dataclass
class DetectionResult:
    metrics: dict[str, dict[str, float]]
    losses: list[float]
    framework: dict[str, Any]
    keys_loaded: int
    keys_missing: list[str]
    data: dict[str, Any] = field(default_factory=dict)


RESUME_MARKER = "encoder_weights.sha256"


def file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def resume_allowed(output_dir: Path, weights_digest: str) -> bool:
    """True when ``output_dir`` holds a checkpoint trained from the weights with this digest (a
    requeued run); otherwise its leftover checkpoints are removed, the marker is (re)written, and
    training starts from the weights."""
    output_dir = Path(output_dir)
    marker = output_dir / RESUME_MARKER
    same = marker.exists() and marker.read_text().strip() == weights_digest
    if not same:
        for p in output_dir.glob("model_*.pth"):
            p.unlink()
        (output_dir / "last_checkpoint").unlink(missing_ok=True)
        output_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(weights_digest + "\n")
    return same and (output_dir / "last_checkpoint").exists()


def build_fssl_resnet_fpn_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> FPN:
    """Detectron2's ResNet-FPN with the encoder's own stage depths and widths
    (``MODEL.FSSL_RESNET``).

    For ResNet-18 at width 64 this builds exactly what ``build_resnet_fpn_backbone`` does (same
    modules and names); it exists for encoders the stock builder rejects, e.g. ``resnet_micro`` (1
    block per stage, width 8).
    """
    r, f = cfg.MODEL.RESNETS, cfg.MODEL.FSSL_RESNET
    stem = BasicStem(
        in_channels=input_shape.channels, out_channels=r.STEM_OUT_CHANNELS, norm=r.NORM
    )
    in_ch, out_ch, bott = r.STEM_OUT_CHANNELS, r.RES2_OUT_CHANNELS, f.BOTTLENECK_CHANNELS
    stages = []
    for idx, n in enumerate(f.NUM_BLOCKS):
        kw: dict[str, Any] = {
            "num_blocks": n,
            "stride_per_block": [1 if idx == 0 else 2] + [1] * (n - 1),
            "in_channels": in_ch,
            "out_channels": out_ch,
            "norm": r.NORM,
        }
        if f.BLOCK == "basic":
            kw["block_class"] = BasicBlock
        else:
            kw.update(
                block_class=BottleneckBlock, bottleneck_channels=bott, stride_in_1x1=r.STRIDE_IN_1X1
            )
            bott *= 2
        stages.append(ResNet.make_stage(**kw))
        in_ch, out_ch = out_ch, out_ch * 2
    bottom_up = ResNet(
        stem, stages, out_features=r.OUT_FEATURES, freeze_at=cfg.MODEL.BACKBONE.FREEZE_AT
    )
    return FPN(
        bottom_up=bottom_up,
        in_features=cfg.MODEL.FPN.IN_FEATURES,
        out_channels=cfg.MODEL.FPN.OUT_CHANNELS,
        norm=cfg.MODEL.FPN.NORM,
        top_block=LastLevelMaxPool(),
        fuse_type=cfg.MODEL.FPN.FUSE_TYPE,
    )


try:
    BACKBONE_REGISTRY.get(FSSL_BACKBONE)
except KeyError:
    BACKBONE_REGISTRY.register(build_fssl_resnet_fpn_backbone)


def is_stock(layout: Mapping[str, Any]) -> int | None:
    """The Detectron2 DEPTH whose stock builder matches the layout (18 or 50 at width 64), else
    None."""
    if layout["stem_out_channels"] != 64:
        return None
    if (
        layout["block"] == "basic"
        and tuple(layout["num_blocks"]) == (2, 2, 2, 2)
        and layout["res2_out_channels"] == 64
    ):
        return 18
    if (
        layout["block"] == "bottleneck"
        and tuple(layout["num_blocks"]) == (3, 4, 6, 3)
        and layout["res2_out_channels"] == 256
        and layout["bottleneck_channels"] == 64
    ):
        return 50
    return None


def build_config(
    settings: Mapping[str, Any],
    layout: Mapping[str, Any],
    encoder: Encoder,
    *,
    weights: str,
    train: str,
    test: str,
    num_classes: int,
    output_dir: Path,
    device: str,
    seed: int,
) -> CfgNode:
    """Model-zoo Base-RCNN-FPN + the Dec-SSL R18 config + the resolved card settings."""
    cfg = get_cfg()
    cfg.merge_from_file(model_zoo.get_config_file("Base-RCNN-FPN.yaml"))
    cfg.merge_from_file(str(resources.files("tasks.coco_detection").joinpath("configs", CONFIG)))
    depth = is_stock(layout)
    if depth is not None:
        cfg.MODEL.RESNETS.DEPTH = depth
    else:
        cfg.MODEL.BACKBONE.NAME = FSSL_BACKBONE
        cfg.MODEL.FSSL_RESNET = CfgNode(
            {
                "NUM_BLOCKS": list(layout["num_blocks"]),
                "BLOCK": layout["block"],
                "BOTTLENECK_CHANNELS": int(layout["bottleneck_channels"]),
            }
        )
    cfg.MODEL.RESNETS.STEM_OUT_CHANNELS = int(layout["stem_out_channels"])
    cfg.MODEL.RESNETS.RES2_OUT_CHANNELS = int(layout["res2_out_channels"])
    cfg.MODEL.RESNETS.NORM = settings["norm"]
    cfg.MODEL.BACKBONE.FREEZE_AT = int(settings["freeze_at"])
    # canonical card: pixel statistics = 255 x the encoder's pre-training normalisation (§4.1)
    cfg.MODEL.PIXEL_MEAN = [255.0 * v for v in encoder.mean]
    cfg.MODEL.PIXEL_STD = [255.0 * v for v in encoder.std]
    cfg.MODEL.WEIGHTS = weights
    cfg.MODEL.DEVICE = device
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = num_classes
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (train,), (test,)
    cfg.INPUT.MIN_SIZE_TRAIN = tuple(settings["min_size_train"])
    cfg.INPUT.MAX_SIZE_TRAIN = int(settings["max_size_train"])
    cfg.INPUT.MIN_SIZE_TEST = int(settings["min_size_test"])
    cfg.INPUT.MAX_SIZE_TEST = int(settings["max_size_test"])
    cfg.SOLVER.IMS_PER_BATCH = int(settings["ims_per_batch"])
    cfg.SOLVER.BASE_LR = float(settings["base_lr"])
    cfg.SOLVER.MAX_ITER = int(settings["max_iter"])
    cfg.SOLVER.STEPS = tuple(settings["steps"])
    cfg.SOLVER.WARMUP_ITERS = int(settings["warmup_iters"])
    # defaults when on: value, 1.0
    cfg.SOLVER.CLIP_GRADIENTS.ENABLED = bool(settings["clip_gradients"])
    cfg.SOLVER.CHECKPOINT_PERIOD = 5000
    cfg.DATALOADER.NUM_WORKERS = int(settings["num_workers"])
    cfg.TEST.EVAL_PERIOD = 0
    cfg.SEED = seed
    cfg.OUTPUT_DIR = str(output_dir)
    cfg.freeze()
    return cfg


class _LossRecorder(HookBase):
    """The main process's total loss per iteration (Detectron2 writes the gathered losses on the
    main process only)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def after_step(self) -> None:
        from detectron2.utils import comm

        if comm.is_main_process():
            self.losses.append(float(self.trainer.storage.history("total_loss").latest()))


def answer_peers(exc: FloatingPointError, several: bool) -> None:
    """On the process that raised in ``run_step`` (the main one: Detectron2 checks the loss there),
    answer the other processes' pending :class:`_AgreeFinite` exchange with "no", so that they stop
    instead of blocking."""
    from detectron2.utils import comm

    if several and not isinstance(exc, _PeerDiverged):
        comm.all_gather(False)


class _PeerDiverged(FloatingPointError):
    """Raised on the other processes when the main one found a non-finite loss (see
    :class:`_AgreeFinite`)."""


class _AgreeFinite(HookBase):
    """Several processes only: Detectron2 checks the loss for inf/NaN on the main process alone,
    which then leaves the training loop while the others would block in the next step's all-reduce.
    After every step each process says it got through the step; the main process, when it raised
    instead, says no from its exception handler (:func:`_train_worker`), and then every process
    stops with :class:`_PeerDiverged`."""

    def after_step(self) -> None:
        from detectron2.utils import comm

        if not all(comm.all_gather(True)):
            raise _PeerDiverged("the main process found a non-finite loss")


class _Trainer(DefaultTrainer):
    @classmethod
    def build_evaluator(cls, cfg: CfgNode, dataset_name: str) -> COCOEvaluator:
        # the fast evaluator needs Detectron2's compiled extension; pycocotools computes the same AP
        # (§4.3) distributed=True gathers the predictions of every GPU's process (a no-op with one
        # process)
        return COCOEvaluator(
            dataset_name,
            tasks=("bbox", "segm"),
            distributed=True,
            output_dir=os.path.join(cfg.OUTPUT_DIR, "inference"),
            use_fast_impl=False,
        )

    def build_writers(self) -> list[Any]:  # no TensorBoard dependency
        return [
            CommonMetricPrinter(self.max_iter),
            JSONWriter(os.path.join(self.cfg.OUTPUT_DIR, "metrics.json")),
        ]


@contextlib.contextmanager
def scoped_global_seed(seed: int) -> Iterator[None]:
    """Detectron2 draws from the global python/numpy/torch RNGs; seed them for the task and restore
    them after."""
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(
        devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []
    ):
        seed_all_rng(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


# name -> (json file, image root), for launched processes
_REGISTERED: dict[str, tuple[Path, Path]] = {}


def _register(name: str, json_file: Path, image_root: Path) -> str:
    if name not in DatasetCatalog.list():
        register_coco_instances(name, {}, str(json_file), str(image_root))
    _REGISTERED[name] = (Path(json_file), Path(image_root))
    return name


def register_data(cfg: Any, ctx: Any, coco_root: Path) -> tuple[str, str, int, dict[str, Any]]:
    """(train name, test name, number of classes, provenance) for the configured dataset (COCO 2017
    under ``coco_root``, or the embedded shapes)."""
    if cfg.dataset == "shapes_coco":
        from benchmark.api import SHAPES_CATEGORIES as CATEGORIES
        from benchmark.api import shapes_coco

        files = shapes_coco(
            Path(ctx.out_dir) / "shapes_coco",
            seed=cfg.shapes_seed,
            num_train=cfg.shapes_train,
            num_val=cfg.shapes_val,
        )
        tag = f"fssl_shapes_{files.digest}"
        return (
            _register(f"{tag}_train", files.train_json, files.train_images),
            _register(f"{tag}_val", files.val_json, files.val_images),
            len(CATEGORIES),
            {"dataset": "shapes_coco", "digest": files.digest},
        )
    root = Path(coco_root)
    need = {
        "train_json": root / "annotations" / "instances_train2017.json",
        "train_images": root / "train2017",
        "val_json": root / "annotations" / "instances_val2017.json",
        "val_images": root / "val2017",
    }
    missing = [str(p) for p in need.values() if not p.exists()]
    if missing:
        raise DatasetUnavailable(
            f"COCO 2017 is not under {root} (missing {', '.join(missing)}). Download train2017, val2017 and "
            "annotations_trainval2017 from https://cocodataset.org and unpack them there, or set the task's "
            "coco_root / the data root."
        )
    tag = f"fssl_coco2017_{abs(hash(str(root.resolve()))) % 10**8}"
    return (
        _register(f"{tag}_train", need["train_json"], need["train_images"]),
        _register(f"{tag}_val", need["val_json"], need["val_images"]),
        80,
        {"dataset": "coco2017", "root": str(root)},
    )


def loaded_backbone_keys(
    model: torch.nn.Module, weights: Mapping[str, np.ndarray]
) -> tuple[list[str], list[str]]:
    """(keys of ``backbone.bottom_up`` that hold exactly the converted tensors, keys that do
    not)."""
    loaded, missing = [], []
    for key, t in model.backbone.bottom_up.state_dict().items():
        if key.endswith("num_batches_tracked"):
            continue
        ok = (
            key in weights
            and tuple(t.shape) == weights[key].shape
            and torch.equal(
                t.detach().cpu().to(torch.float32),
                torch.as_tensor(weights[key], dtype=torch.float32),
            )
        )
        (loaded if ok else missing).append(key)
    return loaded, sorted(missing)


@dataclass(frozen=True)
class _Job:
    """Everything one Detectron2 training process needs (picklable: ``launch`` sends it to every
    GPU's process)."""

    d2cfg: CfgNode
    # (name, json file, image root) to register in each process
    datasets: tuple[tuple[str, str, str], ...]
    weights: dict[str, np.ndarray]
    weights_digest: str
    seed: int
    result_file: str


def _train_worker(job: _Job) -> dict[str, Any]:
    """Train and evaluate in this process (one per GPU under ``launch``); the main process writes
    the result file.

    Returns ``{"metrics", "losses", "keys_loaded", "keys_missing"}``, or ``{"diverged": message}``.
    """
    from detectron2.utils import comm

    for name, json_file, image_root in job.datasets:
        _register(name, Path(json_file), Path(image_root))
    d2cfg = job.d2cfg
    several = comm.get_world_size() > 1
    # each process its own random streams (seed + rank, as Detectron2's default_setup); rank 0 = the
    # one-process run
    with scoped_global_seed(job.seed + comm.get_rank()):
        trainer = _Trainer(d2cfg)
        recorder = _LossRecorder()
        trainer.register_hooks([recorder])
        if several:
            agree = _AgreeFinite()
            trainer.register_hooks([agree])
            # first of the after_step hooks: before the last step's evaluation, whose
            trainer._hooks.remove(agree)
            # collectives a peer that left the loop would never join
            trainer._hooks.insert(0, agree)
        # resume a requeued run from its periodic checkpoint only when that checkpoint was trained
        # from these very weights; leftovers of another encoder are removed and the converted
        # weights are loaded (and checked)
        resume = (
            resume_allowed(Path(d2cfg.OUTPUT_DIR), job.weights_digest)
            if comm.is_main_process()
            else False
        )
        if several:  # every process resumes alike: the main one decided (and cleaned up)
            resume = comm.all_gather(resume)[0]
        trainer.resume_or_load(resume=resume)
        loaded, missing = loaded_backbone_keys(_unwrap(trainer.model), job.weights)
        bad = [k for k in missing if not k.startswith("stem.")]
        # (a resumed run holds trained weights, not the converted ones)
        if trainer.start_iter == 0 and bad:
            raise RuntimeError(
                f"the converted weights did not load into backbone tensors {bad[:5]} (conversion bug)"
            )
        try:
            trainer.train()
            out: dict[str, Any] = {
                "losses": recorder.losses,
                "keys_loaded": len(loaded),
                "keys_missing": missing,
                "metrics": {
                    kind: {k: float(v) for k, v in trainer._last_eval_results[kind].items()}
                    for kind in ("bbox", "segm")
                }
                if comm.is_main_process()
                else {},
            }
        except FloatingPointError as exc:
            answer_peers(exc, several)
            out = {"diverged": f"detection fine-tuning diverged: {exc}"}
    if comm.is_main_process():
        Path(job.result_file).write_text(json.dumps(out))
    return out


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def gpus_for(requested: int, device: str) -> int:
    """GPUs the fine-tune runs on: 0 on the CPU; ``requested`` on CUDA, refused beyond what the
    machine has."""
    if device != "cuda":
        if requested > 1:
            raise ValueError(
                f"coco_detection num_gpus {requested} needs CUDA; this cell runs on the CPU"
            )
        return 0
    have = torch.cuda.device_count()
    if requested > have:
        raise ValueError(f"coco_detection num_gpus {requested}, but this machine has {have} GPU(s)")
    return requested


def check_settings(
    cfg: Any, layout: Mapping[str, Any], settings: Mapping[str, Any], num_gpus: int
) -> None:
    """Refuse a batch that does not split over the GPUs, and a re-initialised stem left frozen."""
    if num_gpus > 1 and int(settings["ims_per_batch"]) % num_gpus:
        raise ValueError(
            f"coco_detection: {settings['ims_per_batch']} images per batch do not split over {num_gpus} GPUs"
        )
    if layout["stem"] == "cifar" and cfg.stem_policy == "reinit" and settings["freeze_at"] != 0:
        raise ValueError(
            "a re-initialised stem must be trained: FREEZE_AT must be 0 (docs/protocols/evaluation.md §4.2)"
        )


def finished_metrics(
    res: Mapping[str, Any], output_dir: Path, *, keep_checkpoint: bool
) -> dict[str, Any]:
    """The worker's COCO metrics, every AP finite; a diverged run raises ``Diverged``. The
    checkpoints are removed unless kept."""
    if "diverged" in res:
        raise Diverged(res["diverged"])
    if not keep_checkpoint:
        for p in output_dir.glob("model_*.pth"):
            p.unlink()
        (output_dir / "last_checkpoint").unlink(missing_ok=True)
    metrics = res["metrics"]
    for kind, vals in metrics.items():
        if not all(np.isfinite(vals[m]) for m in ("AP", "AP50", "AP75")):
            raise RuntimeError(f"COCOEvaluator returned no {kind} AP (no predictions?): {vals}")
    return metrics


def train_and_evaluate(
    cfg: Any,
    layout: Mapping[str, Any],
    weights: Mapping[str, np.ndarray],
    encoder: Encoder,
    ctx: Any,
    settings_for: Callable[[int], dict[str, Any]],
    coco_root: Path,
) -> DetectionResult:
    """One Detectron2 fine-tune and COCO evaluation: in this process on the CPU or one GPU, or
    through Detectron2's ``launch`` (one process per GPU, SyncBN for a CIFAR stem, DDP) when the
    config asks for several GPUs."""
    import detectron2
    from detectron2.engine import launch

    device = "cuda" if ctx.device.type == "cuda" else "cpu"
    num_gpus = gpus_for(int(getattr(cfg, "num_gpus", 1)), device)
    settings = settings_for(num_gpus)
    check_settings(cfg, layout, settings, num_gpus)
    out = Path(ctx.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, test, num_classes, data = register_data(cfg, ctx, coco_root)
    pkl = write_detectron2_pickle(weights, out / "encoder_d2.pkl")
    d2cfg = build_config(
        settings,
        layout,
        encoder,
        weights=str(pkl),
        train=train,
        test=test,
        num_classes=num_classes,
        output_dir=out / "detectron2",
        device=device,
        seed=cfg.seed,
    )
    Path(d2cfg.OUTPUT_DIR).mkdir(parents=True, exist_ok=True)
    (Path(d2cfg.OUTPUT_DIR) / "config.yaml").write_text(d2cfg.dump())
    result_file = Path(d2cfg.OUTPUT_DIR) / "result.json"
    result_file.unlink(missing_ok=True)
    job = _Job(
        d2cfg=d2cfg,
        datasets=tuple((n, *map(str, _REGISTERED[n])) for n in (train, test)),
        weights=dict(weights),
        weights_digest=file_digest(pkl),
        seed=cfg.seed,
        result_file=str(result_file),
    )
    if num_gpus > 1:
        launch(_train_worker, num_gpus, dist_url="auto", args=(job,))
        res = json.loads(result_file.read_text())
    else:
        res = _train_worker(job)
    metrics = finished_metrics(res, Path(d2cfg.OUTPUT_DIR), keep_checkpoint=cfg.keep_checkpoint)
    framework = {
        "detectron2_version": detectron2.__version__,
        "num_gpus": num_gpus,
        "ims_per_gpu": int(settings["ims_per_batch"]) // max(num_gpus, 1),
        "device": device,
        "backbone_builder": d2cfg.MODEL.BACKBONE.NAME,
        "norm": settings["norm"],
        "launcher": "detectron2.engine.launch" if num_gpus > 1 else "in-process",
    }
    return DetectionResult(
        metrics=metrics,
        losses=res["losses"],
        framework=framework,
        keys_loaded=res["keys_loaded"],
        keys_missing=res["keys_missing"],
        data=data,
    )
