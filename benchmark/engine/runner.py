"""``run_cell``: the one function launchers call. Idempotent and resumable (docs/design.md §1.1
steps 1–5).

It composes the stages of ``benchmark.engine.stages`` in the run directory
``benchmark.runroot.rundir.RunDir`` owns: a finished cell returns its record; a cell whose
pre-training was interrupted resumes from its latest round checkpoint; a cell whose sibling (same
pre-training, other tasks) already pre-trained only evaluates; a task already scored is not re-run.
A cell that raises keeps its reason in the run directory and raises :class:`CellFailed`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch

from benchmark.building_blocks.device import DeviceConfig
from benchmark.contracts.cell import Cell
from benchmark.core.precision import EVALUATION_PRECISION, apply_cuda_precision, cuda_precision
from benchmark.engine.sharing import Shared, copy_pretrained, share_key
from benchmark.engine.stages import (
    Evaluation,
    Prepared,
    RoundHook,
    Timings,
    assemble_record,
    evaluate,
    export_encoder,
    prepare,
    pretrain,
)
from benchmark.engine.tracking import NullTracker, Tracker
from benchmark.portable import mode as portable
from benchmark.records.integrity import seal
from benchmark.records.schema import ResultRecord
from benchmark.runroot.rundir import RunDir


class CellFailed(RuntimeError):
    """The cell raised; its reason is kept in the run directory (``RunDir.error_reason``)."""


def run_cell(
    cell: Cell,
    root: Path,
    *,
    device: str = "auto",
    tracker: Tracker | None = None,
    data_root: str | Path | None = None,
    grid: str | None = None,
    stop_after_round: int | None = None,
    on_round: RoundHook | None = None,
    on_pretrained: Callable[[], None] | None = None,
    concurrency: int = 1,
) -> ResultRecord | None:
    """Run (or resume, or skip) one cell and return its record. ``stop_after_round`` interrupts
    pre-training after that round and returns None (tests use it to simulate a kill; the next call
    resumes). ``on_pretrained`` is called once the shared pre-trained state exists, before the tasks
    run: launchers release the pre-training lock there, so sibling cells (same pre-training, other
    tasks) need not wait for this cell's tasks."""
    rd = RunDir.of(cell, root)
    if rd.done:
        return rd.read_record()
    # KernelModeError if this process runs the other kernel mode
    portable.activate(cell.kernels, device)
    rd.write_cell(cell)
    tracker = tracker or NullTracker()
    try:
        return _run(
            cell,
            rd,
            DeviceConfig(device=device),
            tracker,
            data_root,
            grid,
            stop_after_round,
            on_round,
            on_pretrained,
            concurrency,
        )
    except Exception as exc:
        rd.write_error(f"{type(exc).__name__}: {exc}")
        try:
            tracker.finish()
        except Exception:  # noqa: BLE001, S110 - the cell's own failure is the one to report
            pass
        raise CellFailed(f"{type(exc).__name__}: {exc}") from exc


def _run(
    cell: Cell,
    rd: RunDir,
    dev_cfg: DeviceConfig,
    tracker: Tracker,
    data_root: str | Path | None,
    grid: str | None,
    stop_after_round: int | None,
    on_round: RoundHook | None,
    on_pretrained: Callable[[], None] | None,
    concurrency: int = 1,
) -> ResultRecord | None:
    t_start = time.perf_counter()
    dev = dev_cfg.resolve()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)  # the record's peak is this cell's
    prep = prepare(cell, device=dev, channels_last=dev_cfg.use_channels_last(), data_root=data_root)
    part = prep.partition
    rd.write_partition(prep.partition_digest, part.spec, part.meta, prep.partition_stats)
    tracker.start(cell.cell_id, cell.to_dict(), rd.cell_dir, grid, cell.label())

    def log_round(r: int, metrics: Mapping[str, float]) -> None:
        tracker.log(r, {k: v for k, v in metrics.items() if np.isfinite(v)})
        if on_round is not None:
            on_round(r, metrics)

    def compute(shared_from: RunDir | None = None) -> ResultRecord | None:
        return _compute(
            prep,
            rd,
            dev,
            tracker,
            grid,
            stop_after_round,
            log_round,
            on_pretrained,
            concurrency,
            t_start,
            data_root,
            shared_from=shared_from,
        )

    key = share_key(cell, part)
    if key is None:
        return compute()
    # a cell whose numbers cannot depend on its partition (benchmark.engine.sharing): computed once
    # per run root, by the first cell of its class; the others copy it
    shared = Shared(rd.root, key)
    with shared.lock(purpose=f"shared numbers of {cell.cell_id}"):
        source = shared.source()
        if source is not None and source.cell_id != cell.cell_id:
            copy_pretrained(source, rd)
        record = compute(source)
        if record is not None and record.compute.reused_from is None:
            shared.register(rd)
        return record


def _compute(
    prep: Prepared,
    rd: RunDir,
    dev: torch.device,
    tracker: Tracker,
    grid: str | None,
    stop_after_round: int | None,
    log_round: RoundHook,
    on_pretrained: Callable[[], None] | None,
    concurrency: int,
    t_start: float,
    data_root: str | Path | None,
    *,
    shared_from: RunDir | None = None,
) -> ResultRecord | None:
    """Pre-train (or read the saved pre-training), evaluate, assemble, seal and write the record.
    ``shared_from``: the cell of the run root whose pre-training (already copied into ``rd``'s own
    folder) and task scores this cell takes (``benchmark.engine.sharing``)."""
    cell, part = prep.cell, prep.partition
    if shared_from is not None and shared_from.cell_id == cell.cell_id:
        shared_from = None
    t_pre = time.perf_counter()
    flags = {"pretrain": _set_cuda_precision(dev, cell.precision)}
    pre = pretrain(prep, rd.pretrain, on_round=log_round, stop_after=stop_after_round)
    if pre is None:  # interrupted on purpose: the next attempt resumes from the round checkpoint
        tracker.finish()
        return None
    pretrain_s = (
        pre.pretrain_time_s if pre.pretrain_time_s is not None else time.perf_counter() - t_pre
    )
    if on_pretrained is not None:
        on_pretrained()
    t_eval = time.perf_counter()
    ev, fingerprint = Evaluation(), ""
    # the tasks evaluate under the evaluation policy (fp32 tensors, TF32 on CUDA), whatever the
    # pre-training's precision
    flags["evaluation"] = _set_cuda_precision(dev, EVALUATION_PRECISION)
    if pre.ok:
        encoder = export_encoder(prep.method, pre.server, pre.client_states())
        fingerprint = encoder.fingerprint
        ev = evaluate(
            cell,
            encoder,
            prep.dataset,
            part,
            rd,
            device=dev,
            data_root=data_root,
            shared_from=shared_from,
        )
    timings = Timings(
        wall_s=time.perf_counter() - t_start,
        pretrain_s=pretrain_s,
        eval_s=time.perf_counter() - t_eval,
    )
    record = assemble_record(
        prep,
        pre,
        ev,
        timings,
        fingerprint=fingerprint,
        device=dev,
        grid=grid,
        concurrency=concurrency,
    )
    if dev.type == "cuda":
        env = dataclasses.replace(record.env, cuda_precision=flags)
        record = dataclasses.replace(record, env=env)
    if shared_from is not None:
        compute = dataclasses.replace(record.compute, reused_from=shared_from.cell_id)
        record = dataclasses.replace(record, compute=compute)
    record = _finish_tracking(tracker, record, rd)
    rd.clear_error()
    return record


def _set_cuda_precision(dev: torch.device, precision: str) -> dict[str, bool] | None:
    """On CUDA, TF32 and cuDNN set for ``precision`` (``benchmark.core.precision.cuda_precision``)
    and the flags as read back, for the record; elsewhere nothing is touched (None)."""
    if dev.type != "cuda":
        return None
    return apply_cuda_precision(cuda_precision(precision)).as_dict()


def _finish_tracking(tracker: Tracker, record: ResultRecord, rd: RunDir) -> ResultRecord:
    """The tracker's reference into the record, the record sealed (its digest) and written, then
    handed to the tracker with its score files (W&B: run files, so ``collect --from wandb:...``
    finds them), and its headline numbers into the run summary."""
    ref = tracker.ref()
    record = seal(dataclasses.replace(record, tracking=ref) if ref is not None else record)
    rd.write_record(record)
    tracker.save_files([rd.record_path, *rd.sidecar_files()], base=rd.cell_dir)
    summary: dict[str, object] = {
        f"{s.task}/{k}": v for s in record.scores for k, v in s.values.items()
    }
    summary.update(
        {
            "status": record.status,
            "bytes_up": record.comm.bytes_up,
            "bytes_down": record.comm.bytes_down,
            "digest": record.digest,
        }
    )
    tracker.summary(summary)
    tracker.finish()
    return record


__all__ = ["CellFailed", "run_cell"]
