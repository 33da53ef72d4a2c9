"""``coco_detection``: Mask R-CNN R18-FPN fine-tuning of the encoder through Detectron2
(docs/protocols/evaluation.md §4).

Presets:
- ``decssl_1x`` (COCO 2017; cards ``detection/maskrcnn-r18fpn-1x@v1`` for full-stem encoders and
  ``detection/maskrcnn-r18fpn-1x-cifarstem@v1`` for CIFAR-stem encoders): Dec-SSL's config (§4.1).
  Full stem: FrozenBN, ``FREEZE_AT 2``. CIFAR stem: stem policy (``reinit`` or ``inflate``),
  ``FREEZE_AT 0``, BN (SyncBN with several GPUs).
- ``cpu_smoke`` (``shapes_coco``; §4.3): trainable BN, ``FREEZE_AT 0``, real pixel std, gradient
  clipping, 128–160 px inputs, 2 images per batch, 5 iterations, ``COCOEvaluator(...,
  use_fast_impl=False)``. ``auto`` picks ``cpu_smoke`` for ``shapes_coco`` and ``decssl_1x`` for
  ``coco2017``.

This module does not import Detectron2 (grid expansion imports it to validate the config); ``run``
does, and without it fails with one line saying how to install it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from benchmark.api import Encoder, ProtocolCard, TaskContext, TaskNotApplicable, TaskScores

INSTALL_HINT = (
    "coco_detection needs Detectron2 and pycocotools: `pip install pycocotools` and then "
    "`pip install --no-build-isolation 'git+https://github.com/facebookresearch/detectron2.git'` "
    "(GPU, official) or `bash scripts/install-detectron2-cpu.sh` (CPU, Python-only); see docs/detection.md"
)


class DetectronUnavailable(RuntimeError):
    """Detectron2 (or pycocotools) cannot be imported; the message says how to install it."""


@dataclass(frozen=True, kw_only=True)
class CocoDetectionConfig:
    dataset: Literal["coco2017", "shapes_coco"] = "coco2017"
    # folder with annotations/instances_{train,val}2017.json, train2017/, val2017/;
    coco_root: str = ""
    #                      "" = <data root>/coco
    preset: Literal["auto", "decssl_1x", "cpu_smoke"] = "auto"
    stem_policy: Literal["reinit", "inflate"] = "reinit"  # CIFAR-stem encoders only (§4.2)
    max_iter: int | None = None  # overrides of the preset (None: the preset's value)
    ims_per_batch: int | None = None
    base_lr: float | None = None
    seed: int = 42  # Detectron2 SEED of Dec-SSL's config (§4.1)
    shapes_seed: int = 0  # shapes_coco only
    shapes_train: int = 20
    shapes_val: int = 8
    keep_checkpoint: bool = False  # keep model_final.pth in the task folder after evaluation
    # GPUs of one fine-tune; > 1 runs Detectron2's `launch` (DDP, SyncBN for a CIFAR stem)
    num_gpus: int = 1

    def __post_init__(self) -> None:
        for name in ("max_iter", "ims_per_batch", "num_gpus"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.base_lr is not None and self.base_lr <= 0:
            raise ValueError("base_lr must be > 0")
        if self.shapes_train < 1 or self.shapes_val < 1:
            raise ValueError("shapes_train and shapes_val must be >= 1")
        if self.preset == "decssl_1x" and self.dataset != "coco2017":
            # the R18-FPN 1x cards name COCO 2017 (their settings say so): on another dataset the
            # card's name would claim a protocol the numbers were not measured under
            raise ValueError(
                f"preset decssl_1x is COCO 2017's protocol (docs/protocols/evaluation.md §4.1); dataset {self.dataset!r} "
                "runs preset cpu_smoke (or auto)"
            )

    @property
    def resolved_preset(self) -> str:
        if self.preset != "auto":
            return self.preset
        return "cpu_smoke" if self.dataset == "shapes_coco" else "decssl_1x"


PRESETS: dict[str, dict[str, Any]] = {
    # docs/protocols/evaluation.md §4.1 (Dec-SSL mask_rcnn_R_18_FPN_1x_coco.yaml on
    # Base-RCNN-FPN.yaml)
    "decssl_1x": {
        "max_iter": 90000,
        "steps": (60000, 80000),
        "ims_per_batch": 16,
        "base_lr": 0.02,
        "warmup_iters": 1000,
        "min_size_train": (640, 672, 704, 736, 768, 800),
        "max_size_train": 1333,
        "min_size_test": 800,
        "max_size_test": 1333,
        "clip_gradients": False,
        "num_workers": 4,
        "trainable_bn": False,
    },
    # docs/protocols/evaluation.md §4.3: what a from-scratch CPU run needs not to diverge
    "cpu_smoke": {
        "max_iter": 5,
        "steps": (60000, 80000),
        "ims_per_batch": 2,
        "base_lr": 0.0025,
        "warmup_iters": 1000,
        "min_size_train": (128,),
        "max_size_train": 160,
        "min_size_test": 128,
        "max_size_test": 160,
        "clip_gradients": True,
        "num_workers": 0,
        "trainable_bn": True,
    },
}


def resolve_settings(cfg: CocoDetectionConfig, stem: str | None, num_gpus: int) -> dict[str, Any]:
    """Every Detectron2 value the card fixes, from the config, the encoder's stem and the GPU count
    (pure).

    ``stem`` None gives the rule instead of the value (the card before the encoder is known).
    """
    s = dict(PRESETS[cfg.resolved_preset])
    for name in ("max_iter", "ims_per_batch", "base_lr"):
        if getattr(cfg, name) is not None:
            s[name] = getattr(cfg, name)
    s["steps"] = tuple(v for v in s["steps"] if v < s["max_iter"])
    bn_train = "SyncBN" if num_gpus > 1 else "BN"
    if s.pop("trainable_bn"):
        # §4.3: FrozenBN + random stats diverge from scratch
        s["norm"], s["freeze_at"] = bn_train, 0
    elif stem == "full":
        s["norm"], s["freeze_at"] = "FrozenBN", 2  # Detectron2 defaults, as in Dec-SSL's config
    elif stem == "cifar":
        # §4.1 cifarstem card: new stem, statistics not frozen
        s["norm"], s["freeze_at"] = bn_train, 0
    else:
        s["norm"], s["freeze_at"] = "FrozenBN/2 (full stem) or BN/0 (CIFAR stem)", "2 or 0"
    s["stem_policy"] = cfg.stem_policy if stem != "full" else "copy"
    return s


def card_name(cfg: CocoDetectionConfig, stem: str | None) -> str:
    """The committed card a config's numbers are measured under: preset, dataset and the encoder's
    stem name it."""
    if cfg.resolved_preset == "cpu_smoke":
        return (
            "detection/shapes-smoke@v1"
            if cfg.dataset == "shapes_coco"
            else "detection/cpu-smoke@v1"
        )
    return (
        "detection/maskrcnn-r18fpn-1x-cifarstem@v1"
        if stem == "cifar"
        else "detection/maskrcnn-r18fpn-1x@v1"
    )


def _import_detectron2() -> Any:
    try:
        import detectron2  # noqa: F401
        import pycocotools  # noqa: F401
    except ImportError as exc:
        raise DetectronUnavailable(f"{INSTALL_HINT} ({exc})") from None
    from tasks.coco_detection import d2

    return d2


class CocoDetection:  # registered lazily in tasks/coco_detection/__init__.py
    """Mask R-CNN R18-FPN 1x of Dec-SSL (Table 1) on COCO 2017, or the CPU smoke on
    ``shapes_coco``."""

    name: ClassVar[str] = "coco_detection"
    version: ClassVar[str] = "1"
    main_metric: ClassVar[str] = "bbox_AP"
    higher_is_better: ClassVar[bool] = True
    Config: ClassVar[type] = CocoDetectionConfig

    def __init__(self, cfg: CocoDetectionConfig) -> None:
        self.cfg = cfg

    def card(self, stem: str | None = None) -> ProtocolCard:
        from tasks.cards import load_card

        c = self.cfg
        settings: dict[str, Any] = {
            "dataset": c.dataset,
            "train_split": "train2017" if c.dataset == "coco2017" else f"train({c.shapes_train})",
            "test_split": "val2017" if c.dataset == "coco2017" else f"val({c.shapes_val})",
            "shapes_seed": c.shapes_seed if c.dataset == "shapes_coco" else None,
            "preset": c.resolved_preset,
            "seed": c.seed,
        }
        resolved = resolve_settings(c, stem, 0)
        resolved["milestones"] = resolved.pop("steps")  # the card's name for the solver's STEPS
        settings.update({k: list(v) if isinstance(v, tuple) else v for k, v in resolved.items()})
        # tasks/cards/detection_*.json + this config: the protocol only. Framework facts of the run
        # (Detectron2 version, GPUs, images per GPU, device, backbone builder) are the score's
        # `framework` extra, so the card digest of a real record equals the committed card's
        return load_card(card_name(c, stem)).protocol_card(
            settings,
            summary=f"Mask R-CNN R-FPN on {c.dataset}, {settings['max_iter']} it, box/mask AP, final",
        )

    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores:
        t0 = time.perf_counter()
        d2 = _import_detectron2()  # the only place Detectron2 is imported
        if encoder.members and len(encoder.members) > 1:
            # DEVIATION: kNN/linear score every member (mean and min); a detection fine-tune per
            # client is out of budget, and scoring one member would be an arbitrary choice, so the
            # task is left out.
            raise TaskNotApplicable(
                "detection fine-tunes one encoder; this encoder exports one per client"
            )
        from tasks.coco_detection.convert import resnet_layout, to_detectron2

        state = {k: v for k, v in encoder.module.state_dict().items()}
        try:
            layout = resnet_layout(state)
        except (ValueError, KeyError) as exc:
            raise TaskNotApplicable(
                f"detection needs a ResNet encoder ({encoder.backbone}): {exc}"
            ) from None
        weights = to_detectron2(state, self.cfg.stem_policy)
        result = d2.train_and_evaluate(
            self.cfg,
            layout,
            weights,
            encoder,
            ctx,
            settings_for=lambda gpus: resolve_settings(self.cfg, layout["stem"], gpus),
            coco_root=default_coco_root(self.cfg, ctx.data_root),
        )
        card = self.card(layout["stem"])
        values = {
            f"{kind}_{m}": float(v)
            for kind in ("bbox", "segm")
            for m, v in result.metrics[kind].items()
            if m in ("AP", "AP50", "AP75")
        }
        extra = {
            "losses": result.losses,
            "iterations": len(result.losses),
            "layout": dict(layout),
            "backbone_keys_loaded": result.keys_loaded,
            "backbone_keys_missing": result.keys_missing,
            "all_metrics": {
                kind: {m: (float(v) if math.isfinite(v) else None) for m, v in vals.items()}
                # APm/APl are NaN without such objects
                for kind, vals in result.metrics.items()
            },
            "data": result.data,
            "framework": dict(result.framework),
        }
        return TaskScores(
            task=self.name,
            card=card,
            main_metric="bbox_AP",
            higher_is_better=True,
            values=values,
            wall_time_s=time.perf_counter() - t0,
            extra=extra,
        )


def default_coco_root(cfg: CocoDetectionConfig, data_root: Path | None) -> Path:
    if cfg.coco_root:
        return Path(cfg.coco_root)
    from benchmark.api import default_data_root

    root = (
        data_root
        if data_root is not None and str(data_root) not in ("", ".")
        else default_data_root()
    )
    return Path(root) / "coco"
