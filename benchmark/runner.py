"""``run_cell``: the one function launchers call. Idempotent and resumable (DESIGN §1.1 steps 1–5).

Layout under the run root::

    <root>/<method>/<cell_id>/cell.json        resolved cell, written before any work
                             partition.json   digest, spec and statistics
                             scores/<task>-<card>.json   written as each task finishes
                             record.json      the result, written atomically, never edited
                             error.json       why the cell failed (kept; the grid goes on)
    <root>/_pretrain/<pretrain_key>/ckpt/     round checkpoints (cells differing only in tasks share them)
                                   states/    client states (CPU, spilled to disk)
                                   final.pt   the final server state and the pre-training summary
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.config import from_mapping
from benchmark.data.datasets import DatasetSplits, default_data_root, load_dataset_splits
from benchmark.data.partition import Partition, partition_stats
from benchmark.data.views import ClientViews, UnlabeledView
from benchmark.device import DeviceConfig
from benchmark.grid import Cell
from benchmark.method import InputSpec, Method
from benchmark.records.env import collect_env
from benchmark.records.schema import SCHEMA_VERSION, CommStats, ComputeStats, ResultRecord, TaskScores
from benchmark.records.store import atomic_write_text, read_record, write_record
from benchmark.registries import METHODS, PARTITIONERS, PUBLIC_SPLITS, TASKS, load_builtins
from benchmark.simulate import SimSettings, simulate, state_digest
from benchmark.tracking import NullTracker, Tracker
from benchmark.types import ClientState, Requirement, ServerState


class CellFailed(RuntimeError):
    """The cell raised; its reason is kept in ``error.json`` in the cell directory."""


@dataclass(frozen=True)
class CellPaths:
    cell_dir: Path
    pretrain_dir: Path

    @property
    def record(self) -> Path:
        return self.cell_dir / "record.json"

    @property
    def error(self) -> Path:
        return self.cell_dir / "error.json"


def cell_paths(cell: Cell, root: Path) -> CellPaths:
    root = Path(root)
    return CellPaths(root / cell.method.name / cell.cell_id, root / "_pretrain" / cell.pretrain_key)


def build_partition(cell: Cell, labels: np.ndarray) -> Partition:
    partitioner = from_mapping(PARTITIONERS.get(cell.partition.name), dict(cell.partition.params))
    k = cell.fl.num_clients
    if cell.public is not None:
        carve = from_mapping(PUBLIC_SPLITS.get(cell.public.name), dict(cell.public.params))
        return carve.apply(labels, k, cell.partition_seed, partitioner)
    return partitioner(labels, k, cell.partition_seed)


def input_spec(ds: DatasetSplits) -> InputSpec:
    return InputSpec(image_size=ds.image_size, mean=tuple(ds.mean), std=tuple(ds.std), num_classes=ds.num_classes)


def build_method(cell: Cell, inputs: InputSpec) -> Method:
    cls = METHODS.get(cell.method.name)
    return cls(from_mapping(cls.Config, dict(cell.method.params)), cell.backbone, inputs)


def client_datasets(method: Method, ds: DatasetSplits, part: Partition) -> ClientViews:
    """Unlabeled views of each client's shard, built on access (``ClientViews``: only the partition's index is
    held); ``pooled`` methods get one client holding the union."""
    labelled = Requirement.LABELS in method.requires
    shards = list(part.client_indices)
    if method.federation == "pooled":
        shards = [np.sort(np.concatenate(shards))]
    return ClientViews(ds.train.images, shards, ds.mean, ds.std, ds.train.labels if labelled else None,
                       ds.num_classes if labelled else 0)


def _peak_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _task_file(paths: CellPaths, spec: Any, card_id: str) -> Path:
    return paths.cell_dir / "scores" / f"{spec.name}-{card_id}.json"


def _scores_to_json(s: TaskScores) -> str:
    from benchmark.records.schema import _plain

    return json.dumps(_plain(s), sort_keys=True, indent=2, allow_nan=False) + "\n"


def _scores_from_json(text: str) -> TaskScores:
    from benchmark.records.schema import ProtocolCard

    raw = json.loads(text)
    return TaskScores(**{**raw, "card": ProtocolCard(**raw["card"])})


def run_cell(
    cell: Cell,
    root: Path,
    *,
    device: str = "auto",
    tracker: Tracker | None = None,
    data_root: str | Path | None = None,
    grid: str | None = None,
    stop_after_round: int | None = None,
    on_round: Callable[[int, Mapping[str, float]], None] | None = None,
    on_pretrained: Callable[[], None] | None = None,
) -> ResultRecord | None:
    """Run (or resume, or skip) one cell and return its record. ``stop_after_round`` interrupts pre-training after
    that round and returns None (tests use it to simulate a kill; the next call resumes). ``on_pretrained`` is
    called once the shared pre-training result (``final.pt``) exists, before the tasks run: launchers release the
    pre-training lock there, so sibling cells (same pre-training, other tasks) need not wait for this cell's tasks."""
    load_builtins()
    paths = cell_paths(cell, root)
    if paths.record.exists():
        return read_record(paths.record)
    paths.cell_dir.mkdir(parents=True, exist_ok=True)
    if not (paths.cell_dir / "cell.json").exists():
        atomic_write_text(paths.cell_dir / "cell.json",
                          json.dumps({"cell_id": cell.cell_id, "pretrain_key": cell.pretrain_key,
                                      "cell": cell.to_dict()}, indent=2, sort_keys=True) + "\n")
    tracker = tracker or NullTracker()
    try:
        return _run(cell, paths, device, tracker, data_root, grid, stop_after_round, on_round, on_pretrained)
    except Exception as exc:
        atomic_write_text(paths.error, json.dumps({
            "cell_id": cell.cell_id, "reason": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(), "at": datetime.now(timezone.utc).isoformat(),
        }, indent=2) + "\n")
        try:
            tracker.finish()
        except Exception:
            pass
        raise CellFailed(f"{type(exc).__name__}: {exc}") from exc


def _run(cell, paths, device, tracker, data_root, grid, stop_after_round, on_round,
         on_pretrained=None) -> ResultRecord | None:
    from benchmark.api import Diverged

    t_start = time.perf_counter()
    dev_cfg = DeviceConfig(device=device)
    dev = dev_cfg.resolve()
    ds = load_dataset_splits(cell.dataset.name, dict(cell.dataset.params), data_root)
    part = build_partition(cell, ds.train.labels)
    stats = partition_stats(part, ds.train.labels, ds.num_classes)
    pdigest = part.digest()
    atomic_write_text(paths.cell_dir / "partition.json", json.dumps(
        {"digest": pdigest, "spec": part.spec, "meta": part.meta, "stats": stats}, indent=2, sort_keys=True,
        default=str) + "\n")
    method = build_method(cell, input_spec(ds))
    clients = client_datasets(method, ds, part)
    public = None
    if part.public_indices is not None:
        public = UnlabeledView(ds.train.images[torch.as_tensor(part.public_indices)], ds.mean, ds.std)
    per_round = 1 if method.federation == "pooled" else cell.fl.clients_per_round
    settings = SimSettings(seed=cell.seed, num_rounds=cell.fl.rounds, local_epochs=cell.fl.local_epochs,
                           per_round=per_round, device=dev, amp=dev_cfg.use_amp(),
                           channels_last=dev_cfg.use_channels_last(), num_classes=ds.num_classes)
    tracker.start(cell.cell_id, cell.to_dict(), paths.cell_dir, grid, cell.label())

    def log_round(r: int, metrics: Mapping[str, float]) -> None:
        tracker.log(r, {k: v for k, v in metrics.items() if np.isfinite(v)})
        if on_round is not None:
            on_round(r, metrics)

    final_path = paths.pretrain_dir / "final.pt"
    status, reason = "ok", None
    t_pre = time.perf_counter()
    client_states: dict[int, ClientState] = {}
    if final_path.exists():
        final = torch.load(final_path, map_location="cpu", weights_only=False)
    else:
        try:
            result = simulate(method, clients, settings, paths.pretrain_dir, public=public, on_round=log_round,
                              stop_after=stop_after_round)
        except Diverged as exc:
            status, reason = "diverged", str(exc)
            from benchmark.simulate import Checkpointer

            rounds = Checkpointer(paths.pretrain_dir / "ckpt").rounds()
            result = None
            final = {"status": status, "reason": reason, "rounds_completed": rounds[-1] if rounds else 0,
                     "model": {}, "extra": {}, "comm_up": [], "comm_down": [], "history": [], "client_steps": 0,
                     "clients": {}}
        if result is not None:
            if stop_after_round is not None and result.rounds_completed < cell.fl.rounds:
                tracker.finish()
                return None
            clients_manifest = result.store.manifest()
            final = {"status": "ok", "reason": None, "rounds_completed": result.rounds_completed,
                     "model": dict(result.server.model), "extra": dict(result.server.extra),
                     "comm_up": result.comm.per_round_up, "comm_down": result.comm.per_round_down,
                     "history": result.history, "client_steps": result.client_steps, "clients": clients_manifest,
                     "pretrain_time_s": time.perf_counter() - t_pre}
            if method.encoder_needs_clients:
                client_states = {k: result.store.get(k) for k in range(len(clients)) if k in result.store}
                final["client_tensors"] = {k: dict(s.tensors) for k, s in client_states.items()}
        from benchmark.simulate import _atomic_torch_save

        _atomic_torch_save(final, final_path)
    if on_pretrained is not None:
        on_pretrained()
    status, reason = final["status"], final["reason"]
    pretrain_time = float(final.get("pretrain_time_s", time.perf_counter() - t_pre))
    server = ServerState(model=final["model"], extra=final["extra"])
    scores: list[TaskScores] = []
    fingerprint = ""
    task_failures: dict[str, str] = {}
    t_eval = time.perf_counter()
    if status == "ok":
        states = None
        if method.encoder_needs_clients:
            states = {int(k): ClientState(tensors=v) for k, v in final.get("client_tensors", {}).items()}
        encoder = method.encoder(server, states)
        fingerprint = encoder.fingerprint
        scores = run_tasks(cell, encoder, ds, paths, dev, data_root, part, task_failures)
    eval_time = time.perf_counter() - t_eval
    wall = time.perf_counter() - t_start
    record = ResultRecord(
        schema_version=SCHEMA_VERSION, cell_id=cell.cell_id, pretrain_key=cell.pretrain_key, cell=cell.to_dict(),
        method=cell.method.name, method_version=cell.method.version, dataset=cell.dataset.name,
        dataset_revision=ds.revision, seed=cell.seed, partition_label=cell.partition.label(),
        partition_digest=pdigest, partition_stats={k: v for k, v in stats.items() if k != "counts"},
        backbone_fingerprint=fingerprint, status=status, rounds_completed=int(final["rounds_completed"]),
        scores=tuple(scores),
        comm=CommStats(bytes_up=int(sum(final["comm_up"])), bytes_down=int(sum(final["comm_down"])),
                       per_round_up=tuple(int(x) for x in final["comm_up"]),
                       per_round_down=tuple(int(x) for x in final["comm_down"])),
        compute=ComputeStats(wall_time_s=wall, pretrain_time_s=pretrain_time, eval_time_s=eval_time,
                             gpu_hours=(pretrain_time + eval_time) / 3600 if dev.type == "cuda" else 0.0,
                             peak_mem_bytes=_peak_rss(), client_steps=int(final["client_steps"]),
                             client_epochs=int(sum(h.get("clients", 0) for h in final["history"]))
                             * cell.fl.local_epochs),
        final_state_digest=state_digest(server.model) if server.model else "",
        env=collect_env(str(dev)), uses_public_data=cell.public is not None, tracking=None, grid=grid,
        reason=reason, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        task_failures=task_failures,
    )
    summary = {f"{s.task}/{k}": v for s in scores for k, v in s.values.items()}
    summary.update({"status": status, "bytes_up": record.comm.bytes_up, "bytes_down": record.comm.bytes_down})
    tracker.summary(summary)
    ref = tracker.finish()
    if ref is not None:
        record = dataclasses.replace(record, tracking=ref)
    write_record(paths.record, record)
    paths.error.unlink(missing_ok=True)
    return record


def run_tasks(cell: Cell, encoder: Any, ds: DatasetSplits, paths: CellPaths, dev: torch.device,
              data_root: Any, partition: Partition | None = None,
              failures: dict[str, str] | None = None) -> list[TaskScores]:
    """Run the cell's tasks (each score cached under scores/). A task whose evaluation diverges is left out and its
    reason goes into ``failures`` (task label -> reason), kept in a file so a resumed cell does not retry it."""
    from benchmark.api import Diverged
    from tasks.base import TaskContext, TaskNotApplicable

    cache: dict[Any, Any] = {}
    scores = []
    for spec in cell.tasks:
        cls = TASKS.get(spec.name)
        task = cls(from_mapping(cls.Config, dict(spec.params)))
        card_id = task.card().card_id
        path = _task_file(paths, spec, card_id)
        failed = path.with_name(path.stem + ".diverged.txt")
        if path.exists():
            scores.append(_scores_from_json(path.read_text()))
            continue
        if failed.exists():
            if failures is not None:
                failures[path.stem] = failed.read_text().strip()
            continue
        out_dir = paths.cell_dir / "tasks" / spec.name
        ctx = TaskContext(partition=partition, partition_seed=cell.partition_seed,
                          dataset=ds, data_root=Path(data_root) if data_root else default_data_root(), out_dir=out_dir,
                          device=dev, seed=cell.seed, feature_cache=cache)
        try:
            s = task.run(encoder, ctx)
        except TaskNotApplicable as exc:
            print(f"task {spec.name} not applicable to {cell.method.name}: {exc}", file=sys.stderr)
            continue
        except Diverged as exc:
            print(f"task {spec.name} diverged on {cell.cell_id}: {exc}", file=sys.stderr)
            atomic_write_text(failed, f"Diverged: {exc}\n")
            if failures is not None:
                failures[path.stem] = f"Diverged: {exc}"
            continue
        s = _apply_member_rule(s, encoder)
        atomic_write_text(path, _scores_to_json(s))
        scores.append(s)
    return scores


def _apply_member_rule(s: TaskScores, encoder: Any) -> TaskScores:
    """A score taken as the maximum over exported members selects on the test set: its card says so, so that the
    leaderboard keeps it out of main columns (featarc.md §3, evaluation.md §6)."""
    rule = getattr(encoder, "member_rule", "mean")
    if rule == "mean" or len(getattr(encoder, "members", ())) < 2:
        return s
    card = dataclasses.replace(s.card, settings={**s.card.settings, "selection": rule, "member_rule": rule},
                               summary=f"{s.card.summary} (max over models, selects on test)".strip())
    return dataclasses.replace(s, card=card)
