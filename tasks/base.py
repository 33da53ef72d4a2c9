"""The ``Task`` protocol and ``TaskContext`` (DESIGN §3). A task takes an ``Encoder`` and returns ``TaskScores``
bound to a protocol card; it never knows which method or federation produced the encoder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from benchmark.api import DatasetSplits, Encoder, ProtocolCard, TaskScores


class TaskNotApplicable(RuntimeError):
    """The encoder lacks what the task needs (e.g. no end-to-end classifier); the task is left out of the record."""


@dataclass(frozen=True, eq=False)
class TaskContext:
    dataset: DatasetSplits  # the cell's dataset (train split = the union the clients drew from)
    data_root: Path
    out_dir: Path  # the task's own folder inside the cell directory
    device: torch.device
    seed: int  # the cell's seed; tasks derive their own streams from it (Stream.TASK)
    feature_cache: dict[Any, Any]  # shared by the cell's tasks: features are extracted once per encoder
    # The cell's train partition (clients' train indices), for personalised cards; None outside a cell.
    partition: Any = None
    partition_seed: int = 0


@runtime_checkable
class Task(Protocol):
    name: ClassVar[str]
    version: ClassVar[str]
    main_metric: ClassVar[str]
    higher_is_better: ClassVar[bool]
    Config: ClassVar[type]

    def __init__(self, cfg: Any) -> None: ...
    def card(self) -> ProtocolCard: ...
    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores: ...
