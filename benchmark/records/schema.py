"""The ``ResultRecord`` schema (docs/design.md §3): one immutable JSON per finished cell.

Torch-free by design. ``to_json`` is canonical (sorted keys, indent 2, no NaN) so that
re-serialising a record is byte-identical; ``from_json`` migrates older schema versions and then
constructs strictly (unknown or missing keys raise :class:`RecordError`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmark.core import bounded_json
from benchmark.core.canonical import pretty_json, short_digest, to_plain
from benchmark.records.field_checks import check_cell, check_shape, check_sizes
from benchmark.records.migrate import migrate
from benchmark.records.names import check_id, check_name
from benchmark.records.record_error import RecordError

SCHEMA_VERSION = 1
# The selection vocabulary, in one place: how a reported value was chosen (a record's and a
# reference's ``selection``), and how a task turns the members of an encoder (per-client or
# per-cluster models) into one value (``Encoder.member_rule``).
SELECTION_RULES = ("final", "best_epoch_test", "max_over_models_test", "best_grid_test")
MEMBER_RULES = ("mean", "designated", "max_over_models_test")
SELECTS_ON_TEST = ("max_over_models_test",)  # member rules whose value is chosen by test scores


@dataclass(frozen=True, kw_only=True)
class ProtocolCard:
    """Binds a number to the exact evaluation protocol (docs/protocols/evaluation.md §1). Equal
    ``card_id`` ⇔ comparable."""

    task: str
    version: str
    # resolved task config: epochs, optimizer, lr, label fraction, selection, ...
    settings: Mapping[str, Any]
    summary: str = ""  # one line, shown in column headers (not part of the identity)
    name: str = ""  # e.g. "knn@v1" (not part of the identity)

    @property
    def card_id(self) -> str:
        return short_digest({"task": self.task, "version": self.version, "settings": self.settings})

    @property
    def selection(self) -> str:
        return str(self.settings.get("selection", "final"))

    @property
    def selects_on_test(self) -> bool:
        return self.selection != "final"


@dataclass(frozen=True, kw_only=True)
class TaskScores:
    task: str  # the task's registry name (a cell may run one task twice with different configs)
    card: ProtocolCard
    main_metric: str
    higher_is_better: bool
    values: Mapping[str, float]
    wall_time_s: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. per-client scores, subset digest

    def __post_init__(self) -> None:
        if self.main_metric not in self.values:
            raise RecordError(
                f"main metric {self.main_metric!r} is not among the values {sorted(self.values)}"
            )
        for key, value in self.values.items():
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
            ):
                raise RecordError(f"score {key!r} must be a finite number, got {value!r}")

    @property
    def main(self) -> float:
        return float(self.values[self.main_metric])


@dataclass(frozen=True, kw_only=True)
class CommStats:
    bytes_up: int = 0
    bytes_down: int = 0
    per_round_up: tuple[int, ...] = ()
    per_round_down: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ComputeStats:
    wall_time_s: float = 0.0
    pretrain_time_s: float = 0.0
    eval_time_s: float = 0.0
    gpu_hours: float = 0.0
    peak_mem_bytes: int = 0
    client_steps: int = 0  # optimizer steps summed over clients and rounds
    client_epochs: int = 0  # epochs trained, summed over clients (a participation that took a step)
    # training examples the clients' optimizer steps drew, summed over clients and rounds (the
    # sample budget beside the step budget; 0 in records written before it was counted)
    client_samples: int = 0
    # participations (client × round) that took no optimizer step although the method trains that
    # round (the small-client policy leaves only clients of one image; Orchestra's initialisation
    # round is not a training round): None in records written before it was counted
    clients_without_step: int | None = None
    # cells that shared this cell's GPU at once (the local launcher's cells per GPU; 1 = alone); 0 =
    # not recorded (a CPU cell, or a record written before the field existed). gpu_hours is the
    # cell's share of its GPU: (pre-training + evaluation wall time) / concurrency
    concurrency: int = 0
    # torch.cuda.max_memory_allocated over the cell (peak_mem_bytes is the host's peak RSS); 0 on
    # the CPU
    peak_gpu_mem_bytes: int = 0
    # the cell of the same run whose pre-training and task scores this record copies, because its
    # numbers cannot depend on the partition (benchmark.engine.sharing: central_ssl, no_pretrain,
    # pixels); None = computed here. Left out of the digest when None
    reused_from: str | None = None


@dataclass(frozen=True, kw_only=True)
class EnvInfo:
    git_sha: str = "unknown"
    git_dirty: bool = False
    python: str = ""
    torch: str = ""
    cuda: str | None = None
    device: str = "cpu"
    packages: Mapping[str, str] = field(default_factory=dict)
    hostname: str = ""
    # CPU intra-op threads the cell ran with (torch.get_num_threads()); 0 = not recorded. On CPU,
    # the thread count changes the order of floating-point reductions, hence the numbers: it is
    # provenance a reader needs.
    threads: int = 0
    # the hardware model the numbers came from: the CUDA device's name on a GPU, else the CPU's
    # /proc/cpuinfo "model name"; "" = not recorded (records written before the field existed)
    machine: str = ""
    runner: str = "fssl-bench"  # records from other runners are shown as unverified
    # code that is not this repository's: {"method:NAME" | "task:NAME": {distribution, version,
    # source_digest, commit?}} (benchmark.core.provenance); empty when every component is in-tree
    plugins: Mapping[str, Any] = field(default_factory=dict)
    # what decided the CPU kernels (benchmark.portable.mode.state): {mode: native|portable,
    # applies?, reason?, aten, onednn, env: the kernel variables that were set}; {} = not recorded
    # (records written before the field existed)
    kernels: Mapping[str, Any] = field(default_factory=dict)
    # CUDA only: the TF32 and cuDNN settings read back after the runner set them
    # (benchmark.core.precision.cuda_precision), {"pretrain": {tf32_matmul, tf32_cudnn,
    # cudnn_benchmark, cudnn_deterministic}, "evaluation": {...}}; {} elsewhere, and then left out
    # of the record file and its digest, so a CPU record is byte for byte what it was
    cuda_precision: Mapping[str, Any] = field(default_factory=dict)
    # the CUDA device a GPU cell ran on (benchmark.records.env_info.gpu_info): {name, capability,
    # memory_bytes, driver, cuda, cudnn, visible}; {} on the CPU (and in records written before the
    # field existed)
    gpu: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TrackingRef:
    backend: str = "wandb"
    entity: str | None = None
    project: str | None = None
    run_id: str | None = None
    url: str | None = None
    mode: str = "offline"


@dataclass(frozen=True, kw_only=True)
class ResultRecord:
    schema_version: int
    cell_id: str
    pretrain_key: str
    cell: Mapping[str, Any]  # the full resolved cell: the single source of truth for "what ran"
    method: str
    method_version: str
    dataset: str
    dataset_revision: str
    seed: int
    partition_label: str
    partition_digest: str
    partition_stats: Mapping[str, Any]
    backbone_fingerprint: str
    status: Literal["ok", "diverged"]
    rounds_completed: int
    scores: tuple[TaskScores, ...]
    comm: CommStats
    compute: ComputeStats
    final_state_digest: str
    env: EnvInfo
    uses_public_data: bool = False
    tracking: TrackingRef | None = None
    grid: str | None = None  # the grid that produced it (metadata, not identity)
    reason: str | None = None  # why the status is not "ok"
    created_at: str = ""
    # Tasks whose evaluation diverged (non-finite loss, e.g. a fine-tuning card at lr 30), by task
    # label: the pre-training and the other tasks still count; the missing score is explained rather
    # than silently absent.
    task_failures: Mapping[str, str] = field(default_factory=dict)
    # sha256 of the canonical record without this field, set by the runner
    # (benchmark.records.integrity)
    digest: str = ""

    def score(self, task: str) -> TaskScores | None:
        for s in self.scores:
            if s.task == task:
                return s
        return None


def record_plain(record: ResultRecord) -> dict[str, Any]:
    """The record as plain JSON values, without the fields that are empty where they do not apply
    (``env.cuda_precision`` off CUDA, ``compute.reused_from`` for a cell computed by itself): a
    record that does not use them is byte for byte what it was before they existed."""
    body = to_plain(record)
    env = body.get("env")
    if isinstance(env, dict) and not env.get("cuda_precision"):
        env.pop("cuda_precision", None)
    compute = body.get("compute")
    if isinstance(compute, dict) and compute.get("reused_from") is None:
        compute.pop("reused_from", None)
    return body


def to_json(record: ResultRecord) -> str:
    return pretty_json(record_plain(record))


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where} must be an object, got {type(raw).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(raw) - names
    if unknown:
        raise RecordError(f"{where} has unknown keys {sorted(unknown)}")
    try:
        return cls(**raw)
    except TypeError as exc:
        raise RecordError(f"{where}: {exc}") from None


def record_from_dict(raw: Mapping[str, Any]) -> ResultRecord:
    """A record from its JSON object, every field's type checked (RecordError names the first one
    that is wrong): one record of the wrong shape is refused where it is read, never a traceback in
    the tool that reads it (docs/integrity.md)."""
    if not isinstance(raw, Mapping):
        raise RecordError(f"a record must be a JSON object, got {type(raw).__name__}")
    check_sizes(raw)
    raw = migrate(dict(raw), SCHEMA_VERSION)
    data = dict(raw)
    scores = data.get("scores", ())
    if not isinstance(scores, (list, tuple)):
        raise RecordError(f"record.scores must be a list, got {type(scores).__name__}")
    for key in ("comm", "compute", "env"):
        if not isinstance(data.get(key) or {}, Mapping):
            raise RecordError(f"record.{key} must be an object, got {type(data[key]).__name__}")
    try:
        data["scores"] = tuple(
            _build(
                TaskScores,
                {**_obj(s, "score"), "card": _build(ProtocolCard, s.get("card"), "card")},
                "score",
            )
            for s in scores
        )
        data["comm"] = _build(
            CommStats,
            {
                k: tuple(v) if isinstance(v, list) else v
                for k, v in (data.get("comm") or {}).items()
            },
            "comm",
        )
        data["compute"] = _build(ComputeStats, data.get("compute") or {}, "compute")
        data["env"] = _build(EnvInfo, data.get("env") or {}, "env")
        if data.get("tracking") is not None:
            data["tracking"] = _build(TrackingRef, data["tracking"], "tracking")
    except (TypeError, ValueError, AttributeError) as exc:
        raise RecordError(f"malformed record: {exc}") from None
    record = _build(ResultRecord, data, "record")
    if record.status not in ("ok", "diverged"):
        raise RecordError(f"status must be ok or diverged, got {record.status!r}")
    # names that become paths under results/ (benchmark.records.names)
    check_name("method", record.method)
    check_id("cell_id", record.cell_id)
    if record.compute.reused_from is not None:
        check_id("compute.reused_from", record.compute.reused_from)
    check_shape(record)
    check_cell(record.cell)
    return record


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(f"{where} must be an object, got {type(value).__name__}")
    return value


def from_json(text: str) -> ResultRecord:
    try:
        raw = bounded_json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordError("not a record: JSON nested too deeply") from None
    return record_from_dict(raw)
