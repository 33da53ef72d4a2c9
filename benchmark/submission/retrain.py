"""Reproduce, don't trust (docs/integrity.md): ``accept`` re-trains a bundle's cells in the box
(``benchmark.submission.box``) and requires the record's final-state digest bit for bit.

Training is bit-for-bit reproducible (the portable kernels make it so across x86-64 CPUs), so a
re-training inside the box whose final state hashes to the record's ``final_state_digest`` shows
that the submitted training is this cell's training from its configuration, and that it did not
depend on anything the box hides: the labels of a method that does not declare them, the test
split, the dataset's files, other bundles. A different digest is a refusal naming the cell.

The parent (this module) loads the dataset, builds the partition and hands the boxed child exactly
what the method's declared requirements give it: its clients' images, the public split where the
cell has one, labels only to a method that declares ``Requirement.LABELS``. What the site shows of
an accepted cell's training (traffic, rounds, optimizer steps, client epochs, pre-training time)
is the re-run's, written into the acceptance file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.submission.box import (
    DEFAULT_BOX_LIMITS,
    TRAINED,
    BoxLimits,
    BoxRefused,
    run_boxed,
)

KNOWN_REQUIREMENTS = frozenset({"labels", "public_data"})
# the re-trained checkpoint the parent reads back (the child wrote it; it is read as tensors and
# plain values only, and bounded first)
MAX_RETRAINED_BYTES = 2 << 30


@dataclass(frozen=True)
class Declaration:
    """What a method declares, as its own code says inside the box."""

    requires: frozenset[str]
    federation: str
    encoder_needs_clients: bool
    # what the accepting process would otherwise import a plugin to read (issue 52): the version
    # the method puts into a cell, its export_params (the cell's pre-training key), and whether
    # each method config asked about is within its Config's bounds (canonical JSON -> why not)
    version: str = ""
    export_params: tuple[str, ...] = ()
    config_problems: Mapping[str, str | None] = field(default_factory=dict)
    # a plugin task's config (canonical JSON of [name, params]) -> {"version", "card_id",
    # "card_name"} as the task's code said in the box, or {"error": why it cannot be built}
    tasks: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def labels(self) -> bool:
        return "labels" in self.requires

    def task(self, name: str, params: Mapping[str, Any]) -> Mapping[str, str]:
        """What the plugin task ``name`` with ``params`` declared in the box (see ``tasks``)."""
        return self.tasks.get(
            _config_key([name, dict(params)]), {"error": "it was not built in the box"}
        )

    def config_problem(self, params: Mapping[str, Any]) -> str | None:
        """Why the method's ``Config`` refuses ``params`` (as the box answered), or None."""
        key = _config_key(params)
        if key not in self.config_problems:
            return "its config was not checked in the box"
        return self.config_problems[key]


def _config_key(params: Any) -> str:
    from benchmark.core.canonical import canonical_json

    return canonical_json(dict(params) if isinstance(params, Mapping) else params)


def plugin_names(record: Any) -> list[str]:
    """The record's components that are not built in here (method, tasks), as "kind:name"; read
    from the entry points' metadata, nothing imported."""
    from benchmark.contracts.registries import METHODS, TASKS, load_builtins
    from benchmark.core.registry import BUILT_IN

    load_builtins()
    names = [("method", METHODS, record.method)]
    names += [
        ("task", TASKS, t.get("name"))
        for t in record.cell.get("tasks") or []
        if isinstance(t, Mapping) and isinstance(t.get("name"), str)
    ]
    # an unknown name is left to accept's own check (it says what to install)
    return [
        f"{kind}:{name}" for kind, reg, name in names if reg.origin(name) not in (BUILT_IN, None)
    ]


def declare(
    method: str,
    tasks: Sequence[str] = (),
    *,
    configs: Sequence[Mapping[str, Any]] = (),
    task_configs: Sequence[tuple[str, Mapping[str, Any]]] = (),
    hidden: Iterable[Path | str | None] = (),
    limits: BoxLimits = DEFAULT_BOX_LIMITS,
    unboxed: bool = False,
) -> Declaration:
    """Import ``method`` (and ``tasks``) in the box, with no data, and read what it declares
    (``configs``: method configs whose bounds its ``Config`` checks there; ``task_configs``:
    (plugin task, params) whose version and card it reports). BoxRefused (one line) when the import
    fails, exits, hangs past the deadline, or the answer is not a declaration."""
    what = f"importing method {method!r} in the box"
    keys = sorted({_config_key(c) for c in configs})
    task_keys = sorted({_config_key([n, dict(p)]) for n, p in task_configs})
    raw = run_boxed(
        {
            "kind": "declare",
            "method": method,
            "tasks": list(tasks),
            "configs": [json.loads(k) for k in keys],
            "task_configs": [json.loads(k) for k in task_keys],
        },
        what=what,
        hidden=hidden,
        limits=limits,
        unboxed=unboxed,
    )
    requires, federation = raw.get("requires"), raw.get("federation")
    version, export, problems = (
        raw.get("version"),
        raw.get("export_params"),
        raw.get("config_problems"),
    )
    if (
        not isinstance(requires, list)
        or not set(map(str, requires)) <= KNOWN_REQUIREMENTS
        or federation not in ("federated", "pooled", "none")
        or not isinstance(raw.get("encoder_needs_clients"), bool)
        or not _short_text(version, 200)
        or not isinstance(export, list)
        or len(export) > 64
        or not all(_short_text(p, 100) for p in export)
        or not isinstance(problems, list)
        or len(problems) != len(keys)
        or not all(p is None or _short_text(p, 500) for p in problems)
        or not isinstance(raw.get("tasks"), list)
        or len(raw["tasks"]) != len(task_keys)
        or not all(_task_answer(t) for t in raw["tasks"])
    ):
        raise BoxRefused(f"{what}: the child's answer is not a method's declaration")
    return Declaration(
        frozenset(requires),
        federation,
        raw["encoder_needs_clients"],
        version=version,
        export_params=tuple(export),
        config_problems=dict(zip(keys, problems, strict=True)),
        tasks=dict(zip(task_keys, raw["tasks"], strict=True)),
    )


def _short_text(value: Any, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _task_answer(answer: Any) -> bool:
    """A plugin task's answer from the box: its version, card id (16 hex digits) and card name, or
    why it cannot be built."""
    import re

    if not isinstance(answer, dict):
        return False
    if set(answer) == {"error"}:
        return _short_text(answer["error"], 500)
    return (
        set(answer) == {"version", "card_id", "card_name"}
        and _short_text(answer["version"], 200)
        and _short_text(answer["card_name"], 200)
        and isinstance(answer["card_id"], str)
        and re.fullmatch(r"[0-9a-f]{16}", answer["card_id"]) is not None
    )


@dataclass(frozen=True)
class Retrained:
    """A cell's pre-training, re-run in the box: the final state (read back as tensors only) and
    what the site shows of it."""

    pretrained: Any  # benchmark.engine.pretrained.Pretrained
    digest: str
    declaration: Declaration
    wall_s: float

    def summary(self, local_epochs: int) -> dict[str, Any]:
        """The re-run's numbers, for the acceptance file (what the site shows)."""
        from benchmark.records.env_info import collect_env

        pre = self.pretrained
        return {
            "final_state_digest": self.digest,
            "status": pre.status,
            "rounds_completed": pre.rounds_completed,
            "bytes_up": int(sum(pre.comm_up)),
            "bytes_down": int(sum(pre.comm_down)),
            "client_steps": pre.client_steps,
            "client_epochs": pre.client_epochs_run * local_epochs,
            "pretrain_time_s": pre.pretrain_time_s,
            "machine": collect_env("cpu").machine,
            "labels_handed": self.declaration.labels,
        }


def retrain(
    record: Any,
    declaration: Declaration,
    *,
    data_root: str | Path | None = None,
    hidden: Iterable[Path | str | None] = (),
    limits: BoxLimits = DEFAULT_BOX_LIMITS,
    unboxed: bool = False,
) -> Retrained:
    """Re-run ``record``'s pre-training in the box from its cell's configuration, handing the child
    what ``declaration`` allows. BoxRefused (one line) when the child gives no valid checkpoint."""
    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.engine.pretrained import Pretrained
    from benchmark.engine.stages import build_partition, load_data
    from benchmark.submission.bounds import oversized_tensor

    cell = Cell.from_dict(record.cell)
    what = f"re-training {record.cell_id} in the box"
    ds = load_data(cell, data_root)
    part = build_partition(cell, ds.train.labels)
    shards = [torch.as_tensor(s, dtype=torch.long) for s in part.client_indices]
    if declaration.federation == "pooled":  # one client holding the union, as the runner builds it
        shards = [torch.sort(torch.cat(shards)).values]
    payload: dict[str, Any] = {
        "images": torch.cat([ds.train.images[s] for s in shards]),
        "shard_sizes": [len(s) for s in shards],
    }
    if declaration.labels:  # the supervised references, and only they, see labels
        labels = torch.as_tensor(ds.train.labels)
        payload["labels"] = torch.cat([labels[s] for s in shards])
    if part.public_indices is not None:
        payload["public"] = ds.train.images[torch.as_tensor(part.public_indices)]
    job = {
        "kind": "train",
        "cell": dict(record.cell),
        "image_size": ds.image_size,
        "mean": list(ds.mean),
        "std": list(ds.std),
        "num_classes": ds.num_classes,
        "client_sizes": [int(n) for n in part.sizes()],
    }
    with tempfile.TemporaryDirectory(prefix="fssl-retrained-") as tmp:
        raw = run_boxed(
            job,
            payload,
            what=what,
            hidden=hidden,
            limits=limits,
            keep=[TRAINED],
            into=Path(tmp),
            unboxed=unboxed,
        )
        final = Path(tmp) / TRAINED
        if final.stat().st_size > MAX_RETRAINED_BYTES:
            raise BoxRefused(f"{what}: its checkpoint is over {MAX_RETRAINED_BYTES} bytes")
        try:
            pre = Pretrained.load(final, untrusted=True)
        except Exception as exc:  # noqa: BLE001 - whatever the child wrote, one line
            raise BoxRefused(
                f"{what}: its checkpoint does not load: {type(exc).__name__}"
            ) from None
    if oversized_tensor(pre) is not None:
        raise BoxRefused(f"{what}: its checkpoint holds a view larger than its storage")
    try:
        digest = pre.state_digest()
    except TypeError as exc:
        raise BoxRefused(
            f"{what}: its checkpoint holds a value that is not a tensor: {exc}"
        ) from None
    return Retrained(pre, digest, declaration, float(raw.get("box_wall_s", 0.0)))


def training_problems(record: Any, again: Retrained) -> list[str]:
    """Where ``record`` and its re-run in the box disagree ([] when they agree bit for bit): the
    final-state digest first, then what the record states of the training."""
    from benchmark.contracts.cell import Cell

    pre = again.pretrained
    if again.digest != record.final_state_digest:
        return [
            f"re-trained in the box from its configuration, its final state hashes to "
            f"{again.digest[:12]}…, the record's to {record.final_state_digest[:12]}…: the "
            "submitted training is not this cell's, or it used what the box hides (labels the "
            "method does not declare, the test split, data files)"
        ]
    out = []
    stated = {
        "status": (record.status, pre.status),
        "rounds": (record.rounds_completed, pre.rounds_completed),
        "bytes up": (record.comm.bytes_up, int(sum(pre.comm_up))),
        "bytes down": (record.comm.bytes_down, int(sum(pre.comm_down))),
        "traffic per round up": (tuple(record.comm.per_round_up), tuple(pre.comm_up)),
        "traffic per round down": (tuple(record.comm.per_round_down), tuple(pre.comm_down)),
        "client steps": (record.compute.client_steps, pre.client_steps),
        "client epochs": (
            record.compute.client_epochs,
            pre.client_epochs_run * Cell.from_dict(record.cell).fl.local_epochs,
        ),
    }
    for name, (theirs, ours) in stated.items():
        if theirs != ours:
            out.append(f"the record states {name} {theirs!r}, its re-training in the box {ours!r}")
    return out


__all__ = [
    "Declaration",
    "Retrained",
    "declare",
    "plugin_names",
    "retrain",
    "training_problems",
]


def retrain_workers(n: int) -> int:
    """Boxed re-trainings run side by side: one per CPU core (each child pins its intra-op threads
    as a launcher does, ``$FSSL_CELL_THREADS``, default 1), at most ``n``."""
    threads = max(1, int(os.environ.get("FSSL_CELL_THREADS") or 1))
    return max(1, min(n, (os.cpu_count() or 1) // threads))


# ------------------------------------------------------------------------------------------------
# accept's two steps: the boxed imports (before this process imports any plugin), the re-training


def boxed_imports(
    records: Sequence[Any], *, reproduce: bool, hidden: Sequence[Any], unboxed: bool
) -> tuple[dict[str, Declaration], str | None]:
    """Import every method the ``records`` run (and their plugin tasks) in the box, before the
    accepting process imports any of them: (method → its declaration, why no box runs here or
    None). Only methods with plugin code, or every method when the track re-trains (``reproduce``:
    one path for built-ins and plugins). Where no box can run, a bundle with plugin code is
    refused unless ``unboxed``; then (and for re-training) the children run without namespaces.
    BoxRefused (one line) when an import fails."""
    from benchmark.contracts.registries import METHODS
    from benchmark.submission.box import box_unavailable

    plugins = sorted({name for r in records for name in plugin_names(r)})
    wanted: dict[str, set[str]] = {}
    for r in records:
        mine = [n.split(":", 1)[1] for n in plugin_names(r)]
        # a method not installed here is left to accept's own check (it says what to install)
        if mine or (reproduce and METHODS.origin(r.method) is not None):
            wanted.setdefault(r.method, set()).update(t for t in mine if t != r.method)
    if not wanted:
        return {}, None
    why = box_unavailable()
    if why is not None and plugins and not unboxed:
        raise BoxRefused(
            f"its records run plugin code ({', '.join(plugins)}) and no box can run here ({why}): "
            "pass --unboxed only if you trust that code (the rows accepted so are badged unboxed)"
        )
    configs: dict[str, list[Mapping[str, Any]]] = {}
    task_configs: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for r in records:
        params = (r.cell.get("method") or {}).get("params")
        configs.setdefault(r.method, []).append(params if isinstance(params, Mapping) else {})
        mine = {n.split(":", 1)[1] for n in plugin_names(r) if n.startswith("task:")}
        task_configs.setdefault(r.method, []).extend(
            (t["name"], t.get("params") if isinstance(t.get("params"), Mapping) else {})
            for t in r.cell.get("tasks") or []
            if isinstance(t, Mapping) and t.get("name") in mine
        )
    out = {
        method: declare(
            method,
            sorted(tasks),
            configs=configs.get(method, []),
            task_configs=task_configs.get(method, []),
            hidden=hidden,
            unboxed=why is not None,
        )
        for method, tasks in sorted(wanted.items())
    }
    return out, why


def retrain_cells(
    records: Sequence[Any],
    declared: Mapping[str, Declaration],
    *,
    kernels: str | None,
    data_root: str | Path | None,
    hidden: Sequence[Any],
    unboxed: bool,
) -> dict[str, tuple[Retrained | None, list[str]]]:
    """Every record's pre-training re-run in the box, once per pre-training key (sibling cells that
    differ in their tasks share it): cell id → (the re-run, where the record disagrees with it).
    ``kernels``: the mode the track requires (a re-training on another CPU is bit for bit only in
    the portable mode); a cell in another mode is refused before anything runs (ValueError)."""
    from benchmark.contracts.cell import Cell

    if kernels is not None:
        for r in records:
            mode = Cell.from_dict(r.cell).kernels
            if mode != kernels:
                raise ValueError(
                    f"{r.cell_id}: the track re-trains its cells and requires {kernels} kernels, the "
                    f"cell ran {mode} (run it with the track's grid)"
                )
    first = {r.pretrain_key: r for r in reversed(records)}

    def one(r: Any) -> Retrained | str:
        try:
            return retrain(
                r, declared[r.method], data_root=data_root, hidden=hidden, unboxed=unboxed
            )
        except BoxRefused as exc:
            return str(exc)

    if first:  # the dataset loaded once, before the workers share its cache
        from benchmark.contracts.cell import Cell
        from benchmark.engine.stages import load_data

        load_data(Cell.from_dict(next(iter(first.values())).cell), data_root)
    with ThreadPoolExecutor(max_workers=retrain_workers(len(first))) as pool:
        done = dict(zip(first, pool.map(one, first.values())))
    out: dict[str, tuple[Retrained | None, list[str]]] = {}
    for r in records:
        again = done[r.pretrain_key]
        if isinstance(again, str):
            out[r.cell_id] = (None, [again])
        else:
            out[r.cell_id] = (again, training_problems(r, again))
    return out
