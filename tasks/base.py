"""The ``Task`` protocol (docs/design.md §3). A task takes an ``Encoder`` and returns ``TaskScores``
bound to a protocol card; it never knows which method or federation produced the encoder.
``TaskContext`` and ``TaskNotApplicable`` are the harness's types (``benchmark.contracts.types``),
re-exported here for tasks."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from benchmark.api import Encoder, ProtocolCard, TaskContext, TaskNotApplicable, TaskScores


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


__all__ = ["Task", "TaskContext", "TaskNotApplicable"]
