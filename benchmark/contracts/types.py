"""Core value types exchanged between the engine, methods and tasks (docs/design.md §3).

Hooks return new states instead of mutating their inputs. Freezing a dataclass does not freeze the
tensors inside its dicts: treat those dicts as values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from benchmark.core.precision import FP32, Precision
from benchmark.records.schema import MEMBER_RULES

if TYPE_CHECKING:
    from benchmark.contracts.data_types import DatasetSplits, Partition
    from benchmark.contracts.unlabeled_view import UnlabeledView

TensorDict = Mapping[str, torch.Tensor]


class Requirement(str, Enum):
    """Capabilities a method declares; checked by grid expansion, never sniffed from signatures."""

    PUBLIC_DATA = "public_data"  # needs a server-side public split (FLESD)
    LABELS = "labels"  # trains on client labels (supervised reference points)


@dataclass(frozen=True)
class Payload:
    """One direction of one round's traffic for one client; the runner counts its bytes."""

    tensors: TensorDict
    num_examples: int = 0  # aggregation weight: a typed field, not a metric key
    # logged, never used for control flow
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerState:
    model: TensorDict  # namespaced keys: "encoder.*", "projector.*", "cluster0.*"
    extra: TensorDict = field(default_factory=dict)  # global centroids, server momentum, ...
    # Scalars the server reports for this round (logged in the round history; not state, not
    # checkpointed).
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientState:
    """Kept by the engine between rounds (off the accelerator, spilled to disk when large); never
    sent."""

    tensors: TensorDict = field(default_factory=dict)
    last_round: int | None = None  # None until the client is first selected


@dataclass(frozen=True)
class ClientData:
    client_id: int
    num_examples: int
    train: UnlabeledView  # the client's images; labels are not reachable from here
    labels: torch.Tensor | None = None  # only for methods that declare Requirement.LABELS
    num_classes: int = 0


@dataclass(frozen=True)
class RoundContext:
    round: int  # 1-based; 0 for initialisation
    num_rounds: int
    client_id: int | None  # None on the server side
    device: torch.device
    seed: int  # the cell's training seed, for derived sub-streams
    rng: np.random.Generator  # stream (seed, CLIENT|SERVER, round[, client_id])
    generator: torch.Generator  # the same stream, for shuffling, augmentation and masking
    local_epochs: int = 1
    public: UnlabeledView | None = None  # the server-side public split, when the cell has one
    # the cell's training precision: autocast dtype and loss scaler (benchmark.core.precision)
    precision: Precision = FP32
    # NHWC conv weights (CUDA only; benchmark.building_blocks.device.prepare_module applies it)
    channels_last: bool = False
    num_classes: int = 0  # of the dataset; only supervised reference points may use it
    # K, the registered clients of the cell (0 where unknown, e.g. a hand-built context)
    num_clients: int = 0


def arch_fingerprint(module: nn.Module) -> str:
    """Digest of module types, parameter/buffer names and shapes: equal fingerprints ⇔ same
    architecture."""
    import hashlib

    h = hashlib.sha256()
    for name, mod in module.named_modules():
        h.update(f"{name}:{type(mod).__name__};".encode())
    for name, t in module.state_dict().items():
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class Encoder:
    """What tasks evaluate: an image batch (float, normalised) → pooled features of size
    ``feat_dim``."""

    module: nn.Module
    feat_dim: int
    backbone: str
    fingerprint: str
    input_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    # Extra encoders for reference points that export several (local_ssl: one per client); tasks
    # score each.
    members: tuple[nn.Module, ...] = ()
    # A classifier trained end to end (dec_sl), scored by the e2e-classifier card.
    classifier: nn.Module | None = None
    # Further exported models by role, e.g. {"mae": masked auto-encoder} for the reconstruction task
    # (FedMAE).
    extras: Mapping[str, nn.Module] = field(default_factory=dict)
    # How several members' scores become one number. "mean" (default): the mean is the value, the
    # minimum is also reported, the maximum never. "designated": the value is member
    # ``designated_member``'s score, chosen on the training side (FeatARC's largest cluster); every
    # member's score and their (weighted) mean are logged beside it. "max_over_models_test": the
    # maximum over members, a reproduction mode that selects on the test set (FeatARC's official
    # code); the runner marks such scores' cards accordingly.
    member_rule: str = "mean"
    designated_member: int = 0
    # Optional training-side weights of the members (FeatARC: cluster masses); a weighted mean is
    # then also reported.
    member_weights: tuple[float, ...] = ()
    # The model associated with each client, for personalised cards (docs/protocols/evaluation.md
    # §3.7): client k is evaluated with client_models[client_index[k]]. Empty: local_ssl-style
    # members (one per client) if there are K of them, else the global ``module`` for every client.
    # FeatARC: its cluster models and each client's last assignment.
    client_models: tuple[nn.Module, ...] = ()
    client_index: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.member_rule not in MEMBER_RULES:
            raise ValueError(f"member_rule must be one of {MEMBER_RULES}, got {self.member_rule!r}")
        if self.member_rule == "designated" and not 0 <= self.designated_member < max(
            len(self.members), 1
        ):
            raise ValueError("designated_member must index members")
        if self.member_weights and len(self.member_weights) != len(self.members):
            raise ValueError("member_weights needs one weight per member")
        if any(not 0 <= i < len(self.client_models) for i in self.client_index):
            raise ValueError("client_index must index client_models")


class Diverged(FloatingPointError):
    """A loss became non-finite; the runner ends the cell with status ``diverged`` (a result, not a
    crash)."""


class TaskNotApplicable(RuntimeError):
    """The encoder lacks what the task needs (e.g. no end-to-end classifier); the task is left out
    of the record."""


@dataclass(frozen=True, eq=False)
class TaskContext:
    """What a task may use besides the encoder (docs/design.md §3). The harness builds it; tasks
    never see the method."""

    dataset: DatasetSplits  # the cell's dataset (train split = the union the clients drew from)
    data_root: Path
    out_dir: Path  # the task's own folder inside the cell directory
    device: torch.device
    seed: int  # the cell's seed; tasks derive their own streams from it (Stream.TASK)
    # shared by the cell's tasks: features are extracted once per encoder
    feature_cache: dict[Any, Any]
    # The cell's train partition (clients' train indices), for personalised cards; None outside a
    # cell.
    partition: Partition | None = None
    partition_seed: int = 0
