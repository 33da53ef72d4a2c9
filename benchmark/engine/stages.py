"""The stages of a cell's life, each a function with typed inputs and outputs
(docs/architecture.md):

    prepare(cell)            → Prepared    dataset, partition (+ digest, statistics), method, client views, public split,
                                           simulation settings
    pretrain(prepared, dir)  → Pretrained  the round loop (or the saved result of an earlier or sibling run)
    export_encoder(m, server, clients) → Encoder   the method's complete encoder for evaluation
    evaluate(...)            → Evaluation  every task of the cell (each score cached in the run directory)
    assemble_record(...)     → ResultRecord

``benchmark.engine.runner.run_cell`` composes them; ``check-method``, ``submit``'s re-evaluation,
the preflight and the performance benchmarks reuse the same functions instead of repeating the
setup.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.contracts.cell import Cell
from benchmark.contracts.data_types import DatasetSplits, Partition
from benchmark.contracts.method import InputSpec, Method
from benchmark.contracts.registries import (
    METHODS,
    TASKS,
    load_builtins,
)
from benchmark.contracts.specs import ComponentSpec
from benchmark.contracts.types import (
    ClientData,
    ClientState,
    Diverged,
    Encoder,
    Requirement,
    ServerState,
    TaskContext,
    TaskNotApplicable,
)
from benchmark.contracts.unlabeled_view import UnlabeledView
from benchmark.core.config import from_mapping
from benchmark.core.host_to_device import host_rows
from benchmark.core.precision import Precision
from benchmark.core.provenance import cell_provenance
from benchmark.data.client_views import ClientViews
from benchmark.data.datasets import load_dataset_splits, resolve_data_root
from benchmark.data.partition import cell_partition, partition_stats
from benchmark.engine.pretrained import Pretrained
from benchmark.engine.rounds import SimSettings, simulate
from benchmark.portable.mode import state as kernel_state
from benchmark.records.env_info import collect_env
from benchmark.records.schema import (
    SCHEMA_VERSION,
    SELECTS_ON_TEST,
    CommStats,
    ComputeStats,
    ResultRecord,
    TaskScores,
)
from benchmark.runroot.rundir import PretrainDir, RunDir

RoundHook = Callable[[int, Mapping[str, float]], None]


# ------------------------------------------------------------------------------------------------
# prepare


@dataclass(frozen=True, eq=False)
class Prepared:
    """Everything a cell needs before its round loop starts."""

    cell: Cell
    dataset: DatasetSplits
    partition: Partition
    partition_digest: str
    partition_stats: Mapping[str, Any]
    inputs: InputSpec
    method: Method
    clients: Sequence[ClientData]
    public: UnlabeledView | None
    settings: SimSettings


def load_data(cell: Cell, data_root: str | Path | None = None) -> DatasetSplits:
    return load_dataset_splits(cell.dataset.name, dict(cell.dataset.params), data_root)


def build_partition(cell: Cell, labels: np.ndarray) -> Partition:
    """The cell's client split of ``labels`` (with its public split carved first, when the cell has
    one)."""
    return cell_partition(cell, labels)


def input_spec(ds: DatasetSplits) -> InputSpec:
    return InputSpec(
        image_size=ds.image_size, mean=tuple(ds.mean), std=tuple(ds.std), num_classes=ds.num_classes
    )


def build_method(
    cell: Cell | ComponentSpec, inputs: InputSpec, backbone: ComponentSpec | None = None
) -> Method:
    """A fresh instance of the cell's method (or of ``cell`` itself when it is a method spec, with
    ``backbone``)."""
    spec, backbone = (cell.method, cell.backbone) if isinstance(cell, Cell) else (cell, backbone)
    cls = METHODS.get(spec.name)
    return cls(from_mapping(cls.Config, dict(spec.params)), backbone, inputs)


def client_datasets(
    method: Method, ds: DatasetSplits, part: Partition, device: torch.device | None = None
) -> ClientViews:
    """Unlabeled views of each client's shard, built on access (``ClientViews``: only the
    partition's index is held, so registered clients cost nothing until sampled); ``pooled`` methods
    get one client holding the union. Bound for CUDA (``device``), gathered into pinned memory."""
    labelled = Requirement.LABELS in method.requires
    shards = list(part.client_indices)
    if method.federation == "pooled":
        shards = [np.sort(np.concatenate(shards))]
    return ClientViews(
        ds.train.images,
        shards,
        ds.mean,
        ds.std,
        ds.train.labels if labelled else None,
        ds.num_classes if labelled else 0,
        device=device,
    )


def public_view(
    ds: DatasetSplits, part: Partition, device: torch.device | None = None
) -> UnlabeledView | None:
    """The public split's images (gathered into pinned memory when bound for CUDA)."""
    if part.public_indices is None:
        return None
    idx = torch.as_tensor(part.public_indices, dtype=torch.long)
    return UnlabeledView(host_rows(ds.train.images, idx, device), ds.mean, ds.std)


def check_method_data(cell: Cell, part: Partition) -> None:
    """The method's own check of what the cell's data allows (``MethodBase.check_data``); ValueError
    with the reason. The preflight runs it for every cell before the first one starts; ``prepare``
    again for direct callers."""
    cls = METHODS.get(cell.method.name)
    cls.check_data(
        from_mapping(cls.Config, dict(cell.method.params)),
        client_sizes=[int(s) for s in part.sizes()],
        public_size=None if part.public_indices is None else len(part.public_indices),
    )


def prepare(
    cell: Cell,
    *,
    device: torch.device | None = None,
    channels_last: bool = False,
    data_root: str | Path | None = None,
) -> Prepared:
    """Stage 1: dataset, partition (digest and statistics), a fresh method, client views, public
    split, settings."""
    load_builtins()
    device = device or torch.device("cpu")
    ds = load_data(cell, data_root)
    part = build_partition(cell, ds.train.labels)
    check_method_data(cell, part)
    inputs = input_spec(ds)
    method = build_method(cell, inputs)
    per_round = 1 if method.federation == "pooled" else cell.fl.clients_per_round
    clients = client_datasets(method, ds, part, device)
    settings = SimSettings(
        seed=cell.seed,
        num_rounds=cell.fl.rounds,
        local_epochs=cell.fl.local_epochs,
        per_round=per_round,
        device=device,
        precision=Precision(cell.precision),
        channels_last=channels_last,
        num_classes=ds.num_classes,
        num_clients=len(clients),
    )
    return Prepared(
        cell,
        ds,
        part,
        part.digest(),
        partition_stats(part, ds.train.labels, ds.num_classes),
        inputs,
        method,
        clients,
        public_view(ds, part, device),
        settings,
    )


# ------------------------------------------------------------------------------------------------
# pre-train


def pretrain(
    prep: Prepared,
    pdir: PretrainDir,
    *,
    on_round: RoundHook | None = None,
    stop_after: int | None = None,
) -> Pretrained | None:
    """Stage 2: the pre-trained state — read back when the folder already holds it (a sibling cell,
    an earlier attempt), else the round loop (resuming from the latest checkpoint) and saved. A
    non-finite loss ends it as ``diverged`` (a result). Returns None when ``stop_after`` interrupted
    it before the last round."""
    if pdir.pretrained:
        return Pretrained.load(pdir.final)
    t0 = time.perf_counter()
    try:
        result = simulate(
            prep.method,
            prep.clients,
            prep.settings,
            pdir.path,
            public=prep.public,
            on_round=on_round,
            stop_after=stop_after,
        )
    except Diverged as exc:
        rounds = pdir.checkpoint_rounds()
        done = Pretrained.diverged(str(exc), rounds[-1] if rounds else 0)
    else:
        if stop_after is not None and result.rounds_completed < prep.settings.num_rounds:
            return None
        keep = {}
        if prep.method.encoder_needs_clients:
            keep = {
                k: dict(result.store.get(k).tensors)
                for k in range(len(prep.clients))
                if k in result.store
            }
        done = Pretrained(
            status="ok",
            reason=None,
            rounds_completed=result.rounds_completed,
            server=result.server,
            comm_up=tuple(result.comm.per_round_up),
            comm_down=tuple(result.comm.per_round_down),
            history=tuple(result.history),
            client_steps=result.client_steps,
            clients_manifest=result.store.manifest(),
            client_tensors=keep,
            pretrain_time_s=time.perf_counter() - t0,
        )
    done.save(pdir.final)
    return done


def export_encoder(
    method: Method, server: ServerState, clients: Mapping[int, ClientState] | None = None
) -> Encoder:
    """Stage 3: the method's complete encoder from the final server state, with the final client
    states for the methods that declare ``encoder_needs_clients`` (and only for them)."""
    return method.encoder(server, (clients or {}) if method.encoder_needs_clients else None)


# ------------------------------------------------------------------------------------------------
# evaluate


@dataclass(frozen=True)
class Evaluation:
    scores: tuple[TaskScores, ...] = ()
    # task label → why its evaluation diverged
    failures: Mapping[str, str] = field(default_factory=dict)


def build_task(spec: ComponentSpec) -> Any:
    cls = TASKS.get(spec.name)
    return cls(from_mapping(cls.Config, dict(spec.params)))


def evaluate(
    cell: Cell,
    encoder: Encoder,
    ds: DatasetSplits,
    partition: Partition | None,
    rd: RunDir,
    *,
    device: torch.device,
    data_root: str | Path | None = None,
    shared_from: RunDir | None = None,
) -> Evaluation:
    """Stage 4: the cell's tasks, in order. Each score is cached in the run directory as the task
    finishes (a resumed cell does not redo it); a task whose evaluation diverges is left out with
    its reason (and not retried); a task that does not apply to the encoder is left out.
    ``shared_from``: a cell of the run root whose scores are this cell's (``benchmark.engine.
    sharing``): a task it scored (or saw diverge) is copied into this cell's cache, not re-run."""
    cache: dict[Any, Any] = {}
    scores: list[TaskScores] = []
    failures: dict[str, str] = {}
    for spec in cell.tasks:
        task = build_task(spec)
        card_id = task.card().card_id
        label = rd.task_label(spec.name, card_id)
        if shared_from is not None and rd.read_scores(spec.name, card_id) is None:
            theirs = shared_from.read_scores(spec.name, card_id)
            if theirs is not None:
                rd.write_scores(spec.name, theirs)
            elif (why := shared_from.task_divergence(spec.name, card_id)) is not None:
                rd.mark_task_diverged(spec.name, card_id, why)
        cached, diverged = (
            rd.read_scores(spec.name, card_id),
            rd.task_divergence(spec.name, card_id),
        )
        if cached is not None or diverged is not None:
            scores += [cached] if cached is not None else []
            failures.update({label: diverged} if diverged is not None else {})
            continue
        ctx = TaskContext(
            partition=partition,
            partition_seed=cell.partition_seed,
            dataset=ds,
            data_root=resolve_data_root(data_root),
            out_dir=rd.task_dir(spec.name),
            device=device,
            seed=cell.seed,
            feature_cache=cache,
        )
        try:
            s = apply_member_rule(task.run(encoder, ctx), encoder)
        except TaskNotApplicable as exc:
            print(f"task {spec.name} not applicable to {cell.method.name}: {exc}", file=sys.stderr)
            continue
        except Diverged as exc:
            print(f"task {spec.name} diverged on {cell.cell_id}: {exc}", file=sys.stderr)
            rd.mark_task_diverged(spec.name, card_id, f"Diverged: {exc}")
            failures[label] = f"Diverged: {exc}"
            continue
        rd.write_scores(spec.name, s)
        scores.append(s)
    return Evaluation(tuple(scores), failures)


def apply_member_rule(s: TaskScores, encoder: Encoder) -> TaskScores:
    """A score taken as the maximum over exported members selects on the test set: its card says so,
    so that the leaderboard keeps it out of main columns (docs/methods/featarc.md §3,
    docs/protocols/evaluation.md §6)."""
    rule = encoder.member_rule
    if rule not in SELECTS_ON_TEST or len(encoder.members) < 2:
        return s
    card = dataclasses.replace(
        s.card,
        settings={**s.card.settings, "selection": rule, "member_rule": rule},
        summary=f"{s.card.summary} (max over models, selects on test)".strip(),
    )
    return dataclasses.replace(s, card=card)


# ------------------------------------------------------------------------------------------------
# the record


@dataclass(frozen=True)
class Timings:
    wall_s: float  # the whole attempt
    pretrain_s: float  # the pre-training (measured when it ran, else this attempt's wait for it)
    eval_s: float


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def gpu_compute(device: torch.device, timings: Timings, concurrency: int) -> dict[str, float | int]:
    """The compute fields only a GPU cell fills: its share of the GPU in hours ((pre-training +
    evaluation) / the cells sharing the GPU: not wall time inflated by the concurrency), the cells
    sharing it, and the device's peak allocated memory. A CPU cell: gpu_hours 0 and nothing else
    (its record is the one it was before these fields existed)."""
    if device.type != "cuda":
        return {"gpu_hours": 0.0}
    concurrency = max(1, int(concurrency))
    return {
        "gpu_hours": (timings.pretrain_s + timings.eval_s) / 3600 / concurrency,
        "concurrency": concurrency,
        "peak_gpu_mem_bytes": int(torch.cuda.max_memory_allocated(device)),
    }


def assemble_record(
    prep: Prepared,
    pre: Pretrained,
    ev: Evaluation,
    timings: Timings,
    *,
    fingerprint: str,
    device: torch.device,
    grid: str | None,
    concurrency: int = 1,
) -> ResultRecord:
    """Stage 5: the record (the cell, its provenance and every number), ready to be written once.
    ``fingerprint`` is the evaluated encoder's architecture fingerprint ("" when the pre-training
    diverged); ``concurrency``: the cells sharing its GPU (the launcher's cells per GPU)."""
    cell = prep.cell
    stats = {k: v for k, v in prep.partition_stats.items() if k != "counts"}
    return ResultRecord(
        schema_version=SCHEMA_VERSION,
        cell_id=cell.cell_id,
        pretrain_key=cell.pretrain_key,
        cell=cell.to_dict(),
        method=cell.method.name,
        method_version=cell.method.version,
        dataset=cell.dataset.name,
        dataset_revision=prep.dataset.revision,
        seed=cell.seed,
        partition_label=cell.partition.label(),
        partition_digest=prep.partition_digest,
        partition_stats=stats,
        backbone_fingerprint=fingerprint,
        status=pre.status,
        rounds_completed=pre.rounds_completed,
        scores=ev.scores,
        comm=CommStats(
            bytes_up=int(sum(pre.comm_up)),
            bytes_down=int(sum(pre.comm_down)),
            per_round_up=pre.comm_up,
            per_round_down=pre.comm_down,
        ),
        compute=ComputeStats(
            wall_time_s=timings.wall_s,
            pretrain_time_s=timings.pretrain_s,
            eval_time_s=timings.eval_s,
            peak_mem_bytes=peak_rss_bytes(),
            client_steps=pre.client_steps,
            client_epochs=pre.client_epochs_run * cell.fl.local_epochs,
            client_samples=pre.client_samples,
            clients_without_step=pre.clients_without_step,
            **gpu_compute(device, timings, concurrency),
        ),
        # every tensor the evaluation reads (model, extra, kept client states), so that a
        # checkpoint is bound to what trained it (benchmark.engine.pretrained)
        final_state_digest=pre.state_digest(),
        env=dataclasses.replace(
            collect_env(str(device), kernels=kernel_state(str(device))),
            plugins=cell_provenance(
                METHODS.get(cell.method.name), {t.name: TASKS.get(t.name) for t in cell.tasks}
            ),
        ),
        uses_public_data=cell.public is not None,
        tracking=None,
        grid=grid,
        reason=pre.reason,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        task_failures=dict(ev.failures),
    )


__all__ = [
    "Evaluation",
    "Prepared",
    "RoundHook",
    "Timings",
    "apply_member_rule",
    "assemble_record",
    "build_method",
    "build_partition",
    "build_task",
    "check_method_data",
    "client_datasets",
    "evaluate",
    "export_encoder",
    "gpu_compute",
    "input_spec",
    "load_data",
    "prepare",
    "pretrain",
    "public_view",
]
