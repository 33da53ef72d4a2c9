"""The child that runs inside the box (``benchmark.submission.box``): ``python -m
benchmark.submission.box_child /box``.

It sets its own limits (hard: the method's code cannot raise them again) before anything from
outside is imported, reads ``/box/job.json`` and, for a re-training, ``/box/payload.pt`` (tensors
and plain values only), does the job and writes ``/box/out/result.json``. Jobs:

``declare``  import the cell's method (and tasks) the way the registry does, and report what the
             method declares: its requirements (``Requirement``), federation, whether its
             encoder needs the clients' states, its version and ``export_params`` (the cell's
             identity), and whether each of the records' method configs is within its
             ``Config``'s bounds; for each plugin task config asked about, its version and the
             card it builds. Nothing of the data is handed to it.
``train``    the cell's pre-training from its configuration, on exactly the clients' images the
             parent handed over (labels only when the method declared them), through the runner's
             own ``pretrain`` stage; the final state goes to ``/box/out/trained.pt``
             (:data:`benchmark.submission.box.TRAINED`).
``export``   for each record handed over: the method built from its cell, given the checkpoint's
             state (``/box/payload.pt``), sized on the meta device first (the re-evaluation's byte
             budget), then its ``encoder`` export, written as modules and plain fields
             (``benchmark.submission.exported``) for the parent to rebuild from trusted classes.
             Nothing of the data is handed to it.
``evaluate`` a record's plugin tasks (their code is never called in the accepting process): the
             method built from its cell exports its encoder from the checkpoint's state, and
             the tasks run on it with the dataset's train and test splits the parent handed
             over (``/box/payload.pt``); the scores go back as plain numbers, which the parent
             validates and compares with the record's (they are shown unranked).

Any exception becomes ``{"ok": false, "error": "..."}``; a child that dies before writing its
result is refused by the parent whatever its exit code.
"""

from __future__ import annotations

import json
import resource
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmark.submission.box import TRAINED


def _limit(limits: dict[str, Any]) -> None:
    for which, key in (
        (resource.RLIMIT_AS, "address_space_bytes"),
        (resource.RLIMIT_CPU, "cpu_s"),
        (resource.RLIMIT_FSIZE, "file_bytes"),
        (resource.RLIMIT_NPROC, "processes"),
    ):
        value = int(limits[key])
        resource.setrlimit(which, (value, value))


def _declare(job: dict[str, Any]) -> dict[str, Any]:
    from benchmark.contracts.registries import METHODS, TASKS, load_builtins
    from benchmark.core.config import from_mapping
    from benchmark.grids.expand import component_version

    load_builtins()
    cls = METHODS.get(job["method"])
    for task in job.get("tasks") or []:
        TASKS.get(task)
    problems: list[str | None] = []
    for params in job.get("configs") or []:  # the records' method configs, within its bounds?
        try:
            from_mapping(cls.Config, dict(params))
            problems.append(None)
        except Exception as exc:  # noqa: BLE001 - any refusal of the config is the record's
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            problems.append(first[:300])
    tasks: list[dict[str, Any]] = []
    for name, params in job.get("task_configs") or []:  # a plugin task's version and card
        try:
            task_cls = TASKS.get(name)
            card = task_cls(from_mapping(task_cls.Config, dict(params))).card()
            tasks.append(
                {
                    "version": str(component_version(TASKS, task_cls)),
                    "card_id": str(card.card_id),
                    "card_name": str(card.name),
                }
            )
        except Exception as exc:  # noqa: BLE001 - a task that cannot be built is the record's
            first = str(exc).splitlines()[0] if str(exc) else ""
            tasks.append({"error": f"{type(exc).__name__}: {first}"[:300]})
    return {
        "requires": sorted(str(getattr(r, "value", r)) for r in cls.requires),
        "federation": str(cls.federation),
        "encoder_needs_clients": bool(cls.encoder_needs_clients),
        # what the accepting process would otherwise import the plugin to read (issue 52)
        "version": str(component_version(METHODS, cls)),
        "export_params": [str(p) for p in cls.export_params],
        "config_problems": problems,
        "tasks": tasks,
    }


def _evaluate(job: dict[str, Any], box: Path) -> dict[str, Any]:
    """The record's plugin tasks (``job["tasks"]``) on the encoder its method exports from the
    checkpoint's state, with the splits the parent handed over (no data root: a task that needs
    another data set fails here)."""
    import dataclasses

    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.contracts.data_types import DatasetSplit, DatasetSplits
    from benchmark.contracts.method import InputSpec
    from benchmark.contracts.registries import load_builtins
    from benchmark.contracts.types import ClientState, ServerState
    from benchmark.engine.stages import build_method, build_partition, evaluate, export_encoder
    from benchmark.runroot.rundir import RunDir

    load_builtins()
    data = torch.load(box / "payload.pt", map_location="cpu", weights_only=True)
    cell = Cell.from_dict(job["cell"])
    num_classes = int(job["num_classes"])
    ds = DatasetSplits(
        name=str(job["dataset"]),
        train=DatasetSplit(data["train_images"], data["train_labels"].numpy(), num_classes),
        test=DatasetSplit(data["test_images"], data["test_labels"].numpy(), num_classes),
        revision=str(job["revision"]),
        mean=tuple(job["mean"]),
        std=tuple(job["std"]),
    )
    inputs = InputSpec(
        image_size=ds.image_size, mean=ds.mean, std=ds.std, num_classes=ds.num_classes
    )
    state = data["state"]
    server = ServerState(model=state["model"], extra=state["extra"])
    clients = {int(k): ClientState(tensors=dict(v)) for k, v in state["clients"].items()}
    encoder = export_encoder(build_method(cell, inputs), server, clients)
    wanted = set(job["tasks"])
    mine = dataclasses.replace(cell, tasks=tuple(t for t in cell.tasks if t.name in wanted))
    part = build_partition(cell, ds.train.labels)
    work = box / "work"
    work.mkdir()
    ev = evaluate(mine, encoder, ds, part, RunDir.of(cell, work), device=torch.device("cpu"))
    return {
        "scores": [
            {
                "task": s.task,
                "card_id": s.card.card_id,
                "values": {str(k): float(v) for k, v in dict(s.values).items()},
            }
            for s in ev.scores
        ],
        "failures": {str(k): str(v)[:300] for k, v in ev.failures.items()},
    }


def _settings(cell: Any, method: Any, num_classes: int, num_clients: int) -> Any:
    """The round loop's settings, as the runner builds them for a CPU cell."""
    import torch

    from benchmark.core.precision import Precision
    from benchmark.engine.rounds import SimSettings

    return SimSettings(
        seed=cell.seed,
        num_rounds=cell.fl.rounds,
        local_epochs=cell.fl.local_epochs,
        per_round=1 if method.federation == "pooled" else cell.fl.clients_per_round,
        device=torch.device("cpu"),
        precision=Precision(cell.precision),
        channels_last=False,
        num_classes=num_classes,
        num_clients=num_clients,
    )


def _train(job: dict[str, Any], box: Path) -> dict[str, Any]:
    import numpy as np
    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.contracts.method import InputSpec
    from benchmark.contracts.registries import load_builtins
    from benchmark.contracts.types import Requirement
    from benchmark.contracts.unlabeled_view import UnlabeledView
    from benchmark.core.config import from_mapping
    from benchmark.data.client_views import ClientViews
    from benchmark.engine.stages import Prepared, build_method, pretrain
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.rundir import PretrainDir

    load_builtins()
    cell = Cell.from_dict(job["cell"])
    data = torch.load(box / "payload.pt", map_location="cpu", weights_only=True)
    inputs = InputSpec(
        image_size=int(job["image_size"]),
        mean=tuple(job["mean"]),
        std=tuple(job["std"]),
        num_classes=int(job["num_classes"]),
    )
    method = build_method(cell, inputs)
    labels = data.get("labels")
    if (Requirement.LABELS in method.requires) != (labels is not None):
        raise RuntimeError("the method's requirements changed between the boxed import and now")
    sizes = [int(n) for n in data["shard_sizes"]]
    starts = np.cumsum([0, *sizes])
    shards = [np.arange(starts[k], starts[k + 1]) for k in range(len(sizes))]
    cls = type(method)
    cls.check_data(  # the partition's clients (a pooled method was handed their union as one)
        from_mapping(cls.Config, dict(cell.method.params)),
        client_sizes=[int(n) for n in job["client_sizes"]],
        public_size=None if data.get("public") is None else len(data["public"]),
    )
    num_classes = int(job["num_classes"])
    clients = ClientViews(
        data["images"],
        shards,
        inputs.mean,
        inputs.std,
        labels.numpy() if labels is not None else None,
        num_classes if labels is not None else 0,
    )
    public = data.get("public")
    settings = _settings(cell, method, num_classes, len(clients))
    prep = Prepared(
        cell,
        None,  # type: ignore[arg-type] - the dataset stays with the parent
        None,  # type: ignore[arg-type]
        "",
        {},
        inputs,
        method,
        clients,
        None if public is None else UnlabeledView(public, inputs.mean, inputs.std),
        settings,
    )
    work = box / "work"
    work.mkdir()
    threads = RunOptions(device="cpu").cell_threads()  # as every launcher pins them: a cell's
    if threads:  # numbers depend on its intra-op threads
        torch.set_num_threads(threads)
    pre = pretrain(prep, PretrainDir(work))
    assert pre is not None
    (box / "out" / TRAINED).write_bytes(PretrainDir(work).final.read_bytes())
    return {"status": pre.status}


def _export(job: dict[str, Any], box: Path) -> dict[str, Any]:
    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.contracts.method import InputSpec
    from benchmark.contracts.registries import load_builtins
    from benchmark.contracts.types import ClientState, ServerState
    from benchmark.engine.stages import build_method, export_encoder
    from benchmark.submission.bounds import encoder_bytes
    from benchmark.submission.exported import ENCODER_FILE, describe

    load_builtins()
    data = torch.load(box / "payload.pt", map_location="cpu", weights_only=True)
    inputs = InputSpec(
        image_size=int(job["image_size"]),
        mean=tuple(job["mean"]),
        std=tuple(job["std"]),
        num_classes=int(job["num_classes"]),
    )
    out = []
    for i, (cell_dict, state) in enumerate(zip(job["cells"], data["states"], strict=True)):
        cell = Cell.from_dict(cell_dict)
        server = ServerState(model=state["model"], extra=state["extra"])
        clients = {int(k): ClientState(tensors=dict(v)) for k, v in state["clients"].items()}
        try:
            with torch.device("meta"):  # sized before anything of that size is allocated
                sized = export_encoder(build_method(cell, inputs), server, clients)
        except Exception as exc:  # noqa: BLE001 - the record's problem, in one line
            first = str(exc).splitlines()[0] if str(exc) else ""
            out.append({"unfit": f"{type(exc).__name__}: {first[:300]}"})
            continue
        size = encoder_bytes(sized)
        if size > int(job["max_bytes"]):
            out.append({"bytes": int(size)})
            continue
        del sized
        encoder = export_encoder(build_method(cell, inputs), server, clients)
        modules, fields = describe(encoder)
        torch.save(modules, box / "out" / ENCODER_FILE.format(i=i))
        out.append({"fields": fields})
    return {"exported": out}


def _train_job(job: dict[str, Any], box: Path) -> dict[str, Any]:
    from benchmark.contracts.cell import Cell
    from benchmark.portable import mode as portable

    portable.activate(Cell.from_dict(job["cell"]).kernels, "cpu")  # before torch is imported
    return _train(job, box)


JOBS: dict[str, Callable[[dict[str, Any], Path], dict[str, Any]]] = {
    "train": _train_job,
    "export": _export,
    "declare": lambda job, _box: _declare(job),
    "evaluate": _evaluate,
}


def serve(box: Path, jobs: Mapping[str, Callable[[dict[str, Any], Path], dict[str, Any]]]) -> int:
    """Read ``box/job.json``, set the limits it names, run the job of its kind (``jobs``), write
    ``box/out/result.json``: the job's answer, or its failure in one line. A later layer's child
    (``check-method``'s, ``benchmark.commands.check_method``) serves its own jobs through this."""
    job = json.loads((box / "job.json").read_text(encoding="utf-8"))
    _limit(job["limits"])
    out = box / "out" / "result.json"
    try:
        if job["kind"] not in jobs:
            raise ValueError(f"unknown job {job['kind']!r}")
        text = json.dumps({"ok": True, **jobs[job["kind"]](job, box)})
    except BaseException as exc:  # noqa: BLE001 - every failure is the result, in one line
        traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        text = json.dumps({"ok": False, "error": f"{type(exc).__name__}: {first}"[:500]})
    out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), JOBS))
