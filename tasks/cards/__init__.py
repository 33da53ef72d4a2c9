"""Protocol cards as data (docs/protocols/evaluation.md §1): one JSON per card in this folder, a
closed schema, and the digest.

A card file holds ``name``, ``description``, ``references`` (documentation, not identity) and
``task``, ``version``, ``settings`` (identity). ``card_digest`` = sha256 of the canonical JSON of
every field except name, description and references, truncated to 16 hex characters. That body is
exactly the one :attr:`benchmark.records.schema.ProtocolCard.card_id` hashes, so a task run at the
card's own values carries the card's digest as its ``card_id``, and the record can be traced back to
the JSON file.

``settings`` is flat (so records and the leaderboard read ``settings["selection"]`` as before);
every key belongs to one group of docs/protocols/evaluation.md §1 (:data:`FIELD_GROUPS`), and a key
outside that vocabulary is rejected. A task obtains its card with :meth:`CardSpec.protocol_card`,
overlaying its resolved config on the card's fields; overriding a field the card does not have
raises, so a config cannot smuggle unreviewed fields into a card. A task run with values that differ
from the JSON (e.g. a 1-epoch smoke probe) keeps the card's name but gets another ``card_id``, and
the leaderboard never puts the two in one column.

Torch-free (a card is data; reading one needs no model): only ``json`` and the torch-free part of
``benchmark.api`` (the records schema and canonical JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from benchmark.api import SELECTION_RULES, ProtocolCard, short_digest, to_plain

CARDS_DIR = Path(__file__).resolve().parent
IDENTITY_EXCLUDED = ("name", "description", "references")  # §1: not part of the digest
TOP_KEYS = frozenset({"name", "description", "references", "task", "version", "settings"})
TASK_KINDS = (
    "knn",
    "linear",
    "semisup",
    "finetune",
    "transfer_linear",
    "e2e_classifier",
    "perclient",
    "detection",
    "reconstruction",
)
STATUSES = ("canonical", "native", "project", "documentation_only")

# docs/protocols/evaluation.md §1 groups; every settings key belongs to exactly one. Adding a key is
# a schema change (review it).
FIELD_GROUPS: dict[str, tuple[str, ...]] = {
    "status": ("status", "protocol_assumed", "member_rule", "source"),
    "data": (
        "train_split",
        "test_split",
        "label_fraction",
        "subset_rule",
        "subset_seed",
        "subset_rng",
        "target",
        "target_split",
        "bank",
        "queries",
        "test_samples",
        "test",
        "test_batch_size",
        "test_drop_last",
        "dataset",
        "shapes_seed",
        "max_images",
        "subset",
        "split",
    ),
    "input": (
        "resolution",
        "resize",
        "normalisation",
        "input",
        "input_format",
        "pixel_mean_std",
        "min_size_train",
        "max_size_train",
        "min_size_test",
        "max_size_test",
    ),
    "features": ("features", "bn", "bn_mode", "l2_normalize", "standardize", "cached"),
    "augmentation": ("augmentation", "train_augmentation", "test_augmentation", "test_transform"),
    "head": ("head", "head_bias", "head_init", "head_input"),
    "model": (
        "model",
        "k",
        "temperature",
        "vote",
        "mask_ratio",
        "mask_seed",
        "masks",
        "space",
        "fine_tuned",
        "preset",
        "norm",
        "freeze_at",
        "stem_policy",
        "weights",
    ),
    "training": (
        "trainable",
        "optimizer",
        "lr",
        "lr_reference_batch",
        "betas",
        "momentum",
        "nesterov",
        "weight_decay",
        "schedule",
        "milestones",
        "gamma",
        "warmup",
        "warmup_iters",
        "warmup_factor",
        "epochs",
        "steps",
        "batch_size",
        "shuffle",
        "drop_last",
        "loss",
        "max_iter",
        "ims_per_batch",
        "base_lr",
        "clip_gradients",
        "num_workers",
        "seed",
        "layer_decay",
        "drop_path",
        "mixup",
        "cutmix",
        "label_smoothing",
        "random_erasing",
        "rand_augment",
        "pooling",
        "test_every_epoch",
        "blr",
        "lr_rule",
        "min_lr",
        "warmup_epochs",
        "drop_path_rule",
        "layer_decay_rule",
        "no_weight_decay",
        "mixup_prob",
        "mixup_switch_prob",
        "mixup_mode",
    ),
    "selection": ("selection", "eval_period", "report"),
    "metric": ("metric", "metric_batch_size", "evaluator"),
    "framework": ("detectron2_version", "num_gpus", "ims_per_gpu", "device", "backbone_builder"),
}
GROUP_OF: dict[str, str] = {k: g for g, keys in FIELD_GROUPS.items() for k in keys}
REQUIRED_SETTINGS = ("status", "selection", "metric")


class CardError(ValueError):
    """A card file does not follow the card schema, or an override names a field the card does not
    have."""


def _check_value(value: Any, where: str) -> None:
    if value is None or isinstance(value, (bool, str, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CardError(f"{where}: non-finite number {value!r}")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_value(v, f"{where}[{i}]")
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CardError(f"{where}: keys must be strings")
            _check_value(v, f"{where}.{k}")
        return
    raise CardError(f"{where}: {type(value).__name__} is not a JSON value")


def card_digest(raw: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the card without name, description and references, 16 hex
    (§1)."""
    return short_digest({k: v for k, v in raw.items() if k not in IDENTITY_EXCLUDED})


def file_name(name: str) -> str:
    """``linear/orchestra`` → ``linear_orchestra.json``; ``knn@v1`` → ``knn@v1.json``."""
    return name.replace("/", "_") + ".json"


@dataclass(frozen=True)
class CardSpec:
    name: str
    description: str
    references: tuple[str, ...]
    task: str
    version: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return card_digest(
            {"task": self.task, "version": self.version, "settings": dict(self.settings)}
        )

    @property
    def status(self) -> str:
        return str(self.settings["status"])

    @property
    def documentation_only(self) -> bool:
        return self.status == "documentation_only"

    @property
    def selection(self) -> str:
        return str(self.settings["selection"])

    @property
    def selects_on_test(self) -> bool:
        return self.selection != "final"

    def resolve(self, overrides: Mapping[str, Any] | None = None) -> CardSpec:
        """The card with some fields set from a task's resolved config; unknown fields raise
        :class:`CardError`."""
        overrides = dict(overrides or {})
        missing = sorted(set(overrides) - set(self.settings))
        if missing:
            raise CardError(
                f"card {self.name!r} has no fields {missing}; add them to {file_name(self.name)} "
                "(a reviewed change) instead of passing them from a config"
            )
        settings = {**self.settings, **to_plain(overrides)}
        _check_value(settings, f"{self.name}.settings")
        return CardSpec(
            self.name, self.description, self.references, self.task, self.version, settings
        )

    def protocol_card(
        self, overrides: Mapping[str, Any] | None = None, *, summary: str = ""
    ) -> ProtocolCard:
        """The record-side card: this card's fields with ``overrides`` (the task's config)
        applied."""
        if self.documentation_only:
            raise CardError(
                f"card {self.name!r} is documentation only: no task produces numbers under it"
            )
        spec = self.resolve(overrides)
        return ProtocolCard(
            task=spec.task,
            version=spec.version,
            settings=dict(spec.settings),
            summary=summary or spec.description.split(". ")[0][:120],
            name=spec.name,
        )

    def matches(self, card: ProtocolCard) -> bool:
        """True when a record's card is exactly this card (same digest)."""
        return card.card_id == self.digest


def parse_card(raw: Any, where: str = "<memory>") -> CardSpec:
    """Validate one card document against the schema (unknown keys rejected) and build the
    :class:`CardSpec`."""
    if not isinstance(raw, Mapping):
        raise CardError(f"{where}: a card must be a JSON object")
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise CardError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(TOP_KEYS)}")
    missing = TOP_KEYS - set(raw)
    if missing:
        raise CardError(f"{where}: missing keys {sorted(missing)}")
    name, task, version = raw["name"], raw["task"], raw["version"]
    if not isinstance(name, str) or not name or not isinstance(raw["description"], str):
        raise CardError(f"{where}: name and description must be strings")
    if task not in TASK_KINDS:
        raise CardError(f"{where}: task {task!r} not in {TASK_KINDS}")
    if not isinstance(version, str) or not version:
        raise CardError(f"{where}: version must be a non-empty string")
    refs = raw["references"]
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise CardError(f"{where}: references must be a list of strings")
    settings = raw["settings"]
    if not isinstance(settings, Mapping):
        raise CardError(f"{where}: settings must be an object")
    bad = sorted(set(settings) - set(GROUP_OF))
    if bad:
        raise CardError(
            f"{where}: unknown settings {bad} (the vocabulary is tasks/cards FIELD_GROUPS)"
        )
    for key in REQUIRED_SETTINGS:
        if key not in settings:
            raise CardError(f"{where}: settings.{key} is required")
    if settings["status"] not in STATUSES:
        raise CardError(f"{where}: status {settings['status']!r} not in {STATUSES}")
    rules = SELECTION_RULES + (("unknown",) if settings["status"] == "documentation_only" else ())
    # "unknown" only where the source does not say (documentation only)
    if settings["selection"] not in rules:
        raise CardError(f"{where}: selection {settings['selection']!r} not in {rules}")
    if settings["status"] == "canonical" and not name.endswith(f"@v{version}"):
        raise CardError(f"{where}: a canonical card's name ends with @v{version}")
    _check_value(dict(settings), f"{where}.settings")
    return CardSpec(name, raw["description"], tuple(refs), task, version, dict(settings))


def iter_card_files(root: Path = CARDS_DIR) -> Iterator[Path]:
    yield from sorted(p for p in Path(root).glob("*.json") if p.is_file())


def load_card_file(path: Path) -> CardSpec:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CardError(f"{path}: {exc}") from None
    spec = parse_card(raw, str(path))
    if Path(path).name != file_name(spec.name):
        raise CardError(f"{path}: card {spec.name!r} belongs in {file_name(spec.name)}")
    return spec


@cache
def _all(root: str) -> dict[str, CardSpec]:
    out: dict[str, CardSpec] = {}
    for path in iter_card_files(Path(root)):
        spec = load_card_file(path)
        if spec.name in out:
            raise CardError(f"duplicate card name {spec.name!r}")
        out[spec.name] = spec
    return out


def all_cards(root: Path = CARDS_DIR) -> dict[str, CardSpec]:
    """name → card, every JSON under ``root`` (validated; cached per process)."""
    return dict(_all(str(root)))


def load_card(name: str, root: Path = CARDS_DIR) -> CardSpec:
    cards = _all(str(root))
    if name not in cards:
        raise CardError(f"no protocol card {name!r}; known: {sorted(cards)}")
    return cards[name]


def card_for_id(card_id: str, root: Path = CARDS_DIR) -> CardSpec | None:
    """The card JSON whose digest equals a record's ``card_id`` (None: the record ran with non-card
    values)."""
    for spec in _all(str(root)).values():
        if spec.digest == card_id:
            return spec
    return None
