"""The Task contract, beside the Method contract (``benchmark/contracts/method.py``).

A task takes an ``Encoder`` and returns ``TaskScores`` bound to a protocol card; it never knows
which method or federation produced the encoder (docs/design.md §3). A task registers once, with
:func:`register_task`: its name and aliases, the class (imported on first use), and the datasets it
reads besides the cell's own (transfer targets, COCO). That declaration is torch-free, so ``run``
checks a grid's data before torch is imported, and the full preflight reads the same declaration for
every expanded cell.

Torch-free: the types a task exchanges are named for readers only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from benchmark.contracts.registries import TASKS

if TYPE_CHECKING:
    from benchmark.contracts.types import Encoder, TaskContext
    from benchmark.records.schema import ProtocolCard, TaskScores


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


# what a task reads besides its cell's dataset, from its parameters (as a grid spells them, or
# resolved with the defaults filled in): a tuple of dataset names, () if none
DataNeeds = Callable[[Mapping[str, Any]], tuple[str, ...]]

# canonical task name -> its declared data needs (tasks that read nothing else are absent)
_READS: dict[str, DataNeeds] = {}


def register_task(
    name: str,
    *,
    target: str,
    aliases: Sequence[str] = (),
    reads: DataNeeds | None = None,
) -> None:
    """Register task ``name`` (and its ``aliases``) as ``target`` (``"pkg.mod:Class"``, imported on
    first use), with the datasets it reads besides the cell's own (``reads``)."""
    TASKS.register(name, aliases=aliases, target=target)
    if reads is not None:
        _READS[name] = reads


def reads_param(field: str, default: str | None) -> DataNeeds:
    """A task that reads the dataset named by its parameter ``field`` (``default`` when the
    parameter is absent; nothing when it is empty)."""

    def needs(params: Mapping[str, Any]) -> tuple[str, ...]:
        value = params.get(field, default)
        return (value,) if value else ()

    return needs


def task_datasets(name: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The datasets task ``name`` (canonical or alias) reads with ``params`` besides the cell's own;
    () for a task that declares none or that is not registered (the expansion reports those)."""
    if name not in TASKS:
        return ()
    needs = _READS.get(TASKS.canonical(name))
    return tuple(needs(params)) if needs else ()


def tasks_with_data() -> list[str]:
    """The canonical names of the tasks that declare data besides the cell's own."""
    return sorted(_READS)
