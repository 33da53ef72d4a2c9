"""The stable surface that ``methods/`` and ``tasks/`` import (and out-of-tree plugins rely on),
versioned by ``API_VERSION`` (docs/adding-a-method.md §10 says what a version promises).

The torch-free names (the contracts, the registries, the records schema, canonical JSON) are
imported with this module; the rest on first use (``__getattr__`` below), so that what must stay
torch-free and may import only this module (the task registrations, which ``run`` reads before it
imports torch, and the task cards) imports without torch.
"""

# ruff: noqa: F401, F822 - the torch part is imported inside ``_torch_names`` and handed out by
# ``__getattr__``: ruff sees neither the use of those imports (``locals()``) nor the names in __all__

from __future__ import annotations

from typing import Any

from benchmark.contracts.cell import Cell
from benchmark.contracts.data_types import DatasetSplit, DatasetSplits
from benchmark.contracts.declared_traffic import Sent, ServerTensors, TensorShape, TrafficContext
from benchmark.contracts.method import (
    API_VERSION,
    Federation,
    Inert,
    InputSpec,
    Method,
    MethodBase,
    UploadFold,
)
from benchmark.contracts.registries import (
    BACKBONES,
    DATASETS,
    METHODS,
    PARTITIONERS,
    PUBLISHED_CARDS,
    TASKS,
)
from benchmark.contracts.specs import ComponentSpec, FLConfig
from benchmark.contracts.task import Task, reads_param, register_task
from benchmark.core.canonical import short_digest, to_plain
from benchmark.core.config import ConfigError, canonical_json, digest, from_mapping
from benchmark.core.precision import (
    FP32,
    PRECISIONS,
    LossScaler,
    Precision,
    fp32_math,
    full_precision,
    no_autocast,
)
from benchmark.records.schema import SELECTION_RULES, ProtocolCard, TaskScores

__all__ = [  # noqa: RUF022 (grouped: the types first, then what a method builds with)
    "API_VERSION",
    "BACKBONES",
    "DATASETS",
    "METHODS",
    "PARTITIONERS",
    "SHAPES_CATEGORIES",
    "TASKS",
    "AugmentConfig",
    "Cell",
    "ClientData",
    "ClientState",
    "ComponentSpec",
    "ConfigError",
    "DatasetSplit",
    "DatasetSplits",
    "DatasetUnavailable",
    "DeviceConfig",
    "Diverged",
    "Encoder",
    "FLConfig",
    "FedAvgFold",
    "Federation",
    "Inert",
    "InputSpec",
    "Method",
    "MethodBase",
    "Payload",
    "ProtocolCard",
    "RunningAverage",
    "Requirement",
    "RoundContext",
    "Sent",
    "ServerState",
    "ServerTensors",
    "Stream",
    "TaskContext",
    "TaskNotApplicable",
    "TaskScores",
    "TensorDict",
    "TensorShape",
    "TrafficContext",
    "UnlabeledView",
    "UploadFold",
    "arch_fingerprint",
    "augment",
    "FP32",
    "PRECISIONS",
    "LossScaler",
    "Precision",
    "fp32_math",
    "full_precision",
    "no_autocast",
    "build_backbone",
    "canonical_json",
    "default_data_root",
    "digest",
    "from_mapping",
    "label_matched_test",
    "load_dataset_splits",
    "normalize",
    "np_rng",
    "rows_to",
    "to_device",
    "prepare_module",
    "scoped_torch_seed",
    "seed_word",
    "shapes_coco",
    "torch_gen",
    "two_views",
    # what a method needs beyond the types (docs/adding-a-method.md): the built-in methods use the
    # same functions
    "BN_TYPES",
    "IndexView",
    "LocalStats",
    "aggregation_weights",
    "average_uploads",
    "bn_tensor_names",
    "divergence",
    "load_tensors",
    "reset_num_batches",
    "run_local_epochs",
    "local_drop_last",
    "select",
    "tensors_of",
    "weighted_average",
    # the projection head and the contrastive loss the built-in SimCLR-family methods use
    # (benchmark.building_blocks.heads)
    "mlp_head",
    "ntxent_2b",
    # Adam and AdamW as every built-in method and task builds them: fused under the portable kernel
    # mode, where torch's default Adam takes its square root in MKL's vector maths, whose bits
    # depend on the CPU's vendor (benchmark.portable.math_ops, docs/reproducibility.md)
    "adam",
    "adamw",
    # exp, sqrt and log10 in forms whose bits do not depend on the CPU under that mode
    "portable_math",
    # what a plugin's own tests call: its smoke grid, and the conformance check (check-method)
    "check_method",
    "expand_grid",
    "load_grid",
    # a task's registration and its contract (benchmark/contracts/task.py); the project's published
    # protocol cards; what the torch-free task cards build with (API 2.2)
    "PUBLISHED_CARDS",
    "SELECTION_RULES",
    "Task",
    "reads_param",
    "register_task",
    "short_digest",
    "to_plain",
    # MAE's patch layout and norm_pix target, shared by FedMAE and the reconstruction task (API 2.2)
    "normalize_patches",
    "patchify",
    # frozen features of a cell's data under an encoder, cached across a cell's tasks; and one
    # client driven for two rounds, for a method's own state tests (API 2.3)
    "cached_features",
    "encoder_features",
    "extract_features",
    "ClientTrace",
    "drive_client",
]


def _torch_names() -> dict[str, Any]:
    """The names whose modules import torch (every one of them is imported on the first use of
    any)."""
    from benchmark.building_blocks.aggregate import (
        FedAvgFold,
        RunningAverage,
        aggregation_weights,
        average_uploads,
        weighted_average,
    )
    from benchmark.building_blocks.backbones import build_backbone
    from benchmark.building_blocks.backbones_vit import normalize_patches, patchify
    from benchmark.building_blocks.device import DeviceConfig, prepare_module
    from benchmark.building_blocks.features import (
        cached_features,
        encoder_features,
        extract_features,
    )
    from benchmark.building_blocks.heads import mlp_head, ntxent_2b
    from benchmark.building_blocks.local_train import (
        IndexView,
        LocalStats,
        local_drop_last,
        run_local_epochs,
    )
    from benchmark.building_blocks.tensors import (
        BN_TYPES,
        bn_tensor_names,
        divergence,
        load_tensors,
        reset_num_batches,
        select,
        tensors_of,
    )
    from benchmark.contracts.types import (
        ClientData,
        ClientState,
        Diverged,
        Encoder,
        Payload,
        Requirement,
        RoundContext,
        ServerState,
        TaskContext,
        TaskNotApplicable,
        TensorDict,
        arch_fingerprint,
    )
    from benchmark.contracts.unlabeled_view import UnlabeledView, normalize
    from benchmark.core.host_to_device import rows_to, to_device
    from benchmark.core.seeding import Stream, np_rng, scoped_torch_seed, seed_word, torch_gen
    from benchmark.data.augment import AugmentConfig, augment, two_views
    from benchmark.data.datasets import DatasetUnavailable, default_data_root, load_dataset_splits
    from benchmark.data.partitioners.matched import label_matched_test
    from benchmark.data.synthetic import CATEGORIES as SHAPES_CATEGORIES
    from benchmark.data.synthetic import shapes_coco
    from benchmark.grids.expand import expand_grid, load_grid
    from benchmark.portable import math_ops as portable_math
    from benchmark.portable.math_ops import adam, adamw

    return dict(locals())


def __getattr__(name: str) -> object:
    """A name of the torch part of the API, imported on first use; ``check_method`` on its own
    (benchmark.commands.check_method imports the runner)."""
    if name == "check_method":
        from benchmark.commands.check_method import check_method

        return check_method
    if name in ("drive_client", "ClientTrace"):
        from benchmark.commands import state_checks

        return getattr(state_checks, name)
    names = {} if name.startswith("__") else _torch_names()
    if name not in names:
        raise AttributeError(f"module 'benchmark.api' has no attribute {name!r}")
    globals().update(names)
    return names[name]
