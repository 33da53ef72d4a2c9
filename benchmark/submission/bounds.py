"""What a submitted record may ask ``accept`` to build, checked before it is built (issue 39).

A record names its cell's parameters: a dataset size, a backbone width, a projector's hidden width,
a task's batch size. Re-evaluation builds what they say, so before anything is allocated at that
size, cheapest first:

1. every component of the cell is built as a config (no data, no tensors), so each config's own
   bounds apply (digits ``size`` at most 128 px, a ViT at most 64 blocks, FedMAE's cascade at most
   64 blocks): :func:`config_problems`;
2. the checkpoint's tensors are no larger than the storage they were saved with (a stride-0 view
   of one float can claim any size, and hashing it would materialise it):
   :func:`oversized_tensor`;
3. the encoder the cell's parameters build is sized on PyTorch's meta device, which allocates
   nothing, from the checkpoint's tensors: every tensor must fit the module the parameters build (a
   projector of 2**28 hidden units does not fit a checkpoint of 32), the exported models together
   may hold at most ``max_encoder_bytes``, and the architecture fingerprint must be the record's:
   :func:`encoder_problems`;
4. a task's batch size cannot multiply the card's steps: an epoch-based card's batch size is a
   floor, a step-based card's a ceiling (:func:`batch_problems`, beside the card's other cost
   fields in ``accept.protocol_problems``).

Only then are the partition rebuilt and the tasks re-run. Each problem is one line."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmark.records.schema import ResultRecord


def config_problems(record: ResultRecord, declared: Mapping[str, Any] | None = None) -> list[str]:
    """Why a component of ``record``'s cell cannot be configured as the record says ([] when every
    one can): each config is built without data or tensors, so its bounds refuse an oversized
    value before anything of that size exists. ``declared`` (``accept``): a plugin method's config
    was checked in the box (``benchmark.submission.retrain.Declaration``), not imported here."""
    from benchmark.contracts.registries import (
        BACKBONES,
        DATASETS,
        METHODS,
        PARTITIONERS,
        PUBLIC_SPLITS,
        load_builtins,
    )
    from benchmark.core.config import from_mapping

    load_builtins()
    cell = record.cell
    parts = [
        ("dataset", DATASETS, cell["dataset"]),
        ("backbone", BACKBONES, cell["backbone"]),
        ("partition", PARTITIONERS, cell["partition"]),
        ("method", METHODS, cell["method"]),
    ]
    if cell["public"] is not None:
        parts.append(("public split", PUBLIC_SPLITS, cell["public"]))
    out = []
    from benchmark.submission.checks import _declared_plugin

    for kind, registry, spec in parts:
        try:
            boxed = _declared_plugin(registry, spec["name"], declared)
            if boxed is not None:
                problem = boxed.config_problem(dict(spec.get("params") or {}))
                if problem is not None:
                    out.append(f"{kind} {spec['name']!r}: {problem}")
                continue
            target = registry.get(spec["name"])
            target = target.Config if kind == "method" else target
            from_mapping(target, dict(spec.get("params") or {}))
        except Exception as exc:  # noqa: BLE001 - any refusal of the config is the record's problem
            out.append(f"{kind} {spec['name']!r}: {exc}")
    return out


def checkpoint_tensors(pre: Any) -> Iterator[tuple[str, str, Any]]:
    yield from (("model", k, v) for k, v in pre.server.model.items())
    yield from (("extra", k, v) for k, v in pre.server.extra.items())
    for client, tensors in pre.client_tensors.items():
        yield from ((f"client {client}", k, v) for k, v in tensors.items())


def oversized_tensor(pre: Any) -> str | None:
    """The first tensor of the pre-trained state ``pre`` that claims more elements than its storage
    holds (a view with a zero stride: ``torch.save`` keeps the view, so one stored float can
    describe terabytes that hashing or copying would materialise), as "where name shape"; None
    when there is none."""
    import torch

    for where, name, t in checkpoint_tensors(pre):
        if not isinstance(t, torch.Tensor):
            continue  # refused by the digest with its own message
        if t.numel() * t.element_size() > t.untyped_storage().nbytes():
            return f"{where} {name!r} {tuple(t.shape)}"
    return None


def encoder_bytes(encoder: Any) -> int:
    """Bytes of every parameter and buffer of the exported models (encoder, members, classifier,
    extras), each module counted once."""
    modules = [encoder.module, *encoder.members, *encoder.extras.values()]
    if encoder.classifier is not None:
        modules.append(encoder.classifier)
    seen: set[int] = set()
    total = 0
    for module in modules:
        for t in [*module.parameters(), *module.buffers()]:
            if id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()
    return total


def sized_encoder(record: ResultRecord, pre: Any, data_root: str | Path | None) -> Any:
    """The encoder ``record``'s cell exports from ``pre``, built on PyTorch's meta device: every
    module the cell's parameters ask for, its shapes checked against the checkpoint's tensors as
    they are loaded (a mismatch raises), nothing of that size allocated."""
    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.contracts.registries import load_builtins
    from benchmark.engine.stages import build_method, export_encoder, input_spec, load_data

    load_builtins()
    cell = Cell.from_dict(record.cell)
    inputs = input_spec(load_data(cell, data_root))  # the dataset's size is bounded by its config
    with torch.device("meta"):
        return export_encoder(build_method(cell, inputs), pre.server, pre.client_states())


def encoder_problems(
    record: ResultRecord, pre: Any, data_root: str | Path | None, max_bytes: int
) -> list[str]:
    """Why the encoder ``record``'s cell builds from ``pre`` is not the record's, or too large to
    build here ([] when it is neither); see the module's step 3."""
    try:
        encoder = sized_encoder(record, pre, data_root)
    except Exception as exc:  # noqa: BLE001 - a checkpoint that does not fit its cell is refused
        first = str(exc).splitlines()[0] if str(exc) else ""
        return [
            "checkpoint: its tensors do not fit the encoder the record's cell builds (sized on "
            f"the meta device, nothing allocated): {type(exc).__name__}: {first[:300]}"
        ]
    out = []
    size = encoder_bytes(encoder)
    if size > max_bytes:
        out.append(
            f"the encoder the record's cell builds holds {size:,} bytes, more than the "
            f"{max_bytes:,} a re-evaluation may build (raise --max-encoder-mb)"
        )
    if record.backbone_fingerprint and encoder.fingerprint != record.backbone_fingerprint:
        out.append(
            f"the encoder the record's cell builds from the checkpoint has architecture "
            f"fingerprint {encoder.fingerprint}, the record states {record.backbone_fingerprint}"
        )
    return out


# card settings that set a batch size: with a fixed number of epochs a smaller batch means more
# steps; with a fixed number of steps (or iterations) a larger batch means more work per step
BATCH_FIELDS = ("batch_size", "ims_per_batch")


def batch_problems(
    task: str, card: str, mine: Mapping[str, Any], published: Mapping[str, Any]
) -> list[str]:
    """Why a task's batch size makes its re-evaluation cost more than the published card ``card``
    (settings ``published``) allows ([] when it does not)."""
    out = []
    by_epochs = _number(published.get("epochs"))
    for key in BATCH_FIELDS:
        have, card_value = mine.get(key), published.get(key)
        if not (_number(have) and _number(card_value)):
            continue
        if by_epochs and have < card_value:
            out.append(
                f"task {task}: {key} {have} is below the card {card}'s {card_value} (more steps "
                "per epoch than the track's protocol; it bounds a re-evaluation)"
            )
        elif not by_epochs and have > card_value:
            out.append(
                f"task {task}: {key} {have} exceeds the card {card}'s {card_value} (the track's "
                "protocol bounds a re-evaluation)"
            )
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


__all__ = [
    "BATCH_FIELDS",
    "batch_problems",
    "checkpoint_tensors",
    "config_problems",
    "encoder_bytes",
    "encoder_problems",
    "oversized_tensor",
    "sized_encoder",
]
