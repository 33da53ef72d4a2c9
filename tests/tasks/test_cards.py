"""Protocol cards as data (docs/protocols/evaluation.md §1, §7 items 4 and 9): every JSON validates
against the closed schema, the canonical digests are golden, the digest covers every comparability
field and nothing else, and the tasks' cards are the JSON's."""

from __future__ import annotations

import copy
import json

import pytest

from benchmark.contracts.registries import TASKS, load_builtins
from benchmark.core.config import from_mapping
from benchmark.records.schema import ProtocolCard
from tasks.cards import (
    CARDS_DIR,
    FIELD_GROUPS,
    CardError,
    all_cards,
    card_digest,
    card_for_id,
    iter_card_files,
    load_card,
    parse_card,
)

load_builtins()

# §7.9: the canonical cards' digests, committed. Changing a canonical card's comparability field
# changes its digest and must come with a new version (`@v2`), not an edit of these values.
GOLDEN = {
    "knn@v1": "2d8015a039df6255",
    "linear@v1": "a2a4dbba5159cebe",
    "semisup@v1": "ae6e5dbc719bb0ca",  # label_fraction 0.01
    "transfer-linear@v1": "b2ec216e8764407e",  # CIFAR-10 -> STL-10, 100 %, 32 px
    "recon/mae@v1": "6d483aedb74d0f47",
    "e2e-classifier@v1": "107a89ee3d3de433",
    # task perclient; the linear@v1 probe fields are part of the card
    "perclient@v1": "d94da064ae473e7e",
    # (framework facts left the detection cards for the score's extra: protocol only, so real
    # records match them)
    "detection/maskrcnn-r18fpn-1x@v1": "bd8e362adbd2b875",
    "detection/maskrcnn-r18fpn-1x-cifarstem@v1": "0f770990fe926eca",
}
# semisup@v1 with label_fraction 0.1: the fraction is a card field
SEMISUP_10PCT = "0e91ca6bb377c296"
NATIVE = {
    "linear/orchestra",
    "linear/decssl",
    "linear/easyfl",
    "linear/moco-lincls",
    "semisup/orchestra",
    "finetune/fedmae",
    "transfer/decssl",
}
DOCUMENTATION_ONLY = {"semisup/easyfl", "transfer/flesd", "detection/decssl-maskrcnn-r18fpn-1x"}
SELECTS_ON_TEST = {"linear/decssl", "linear/moco-lincls", "transfer/decssl"}


def test_every_card_file_validates_and_is_named_after_its_card() -> None:
    files = list(iter_card_files())
    cards = all_cards()
    assert len(files) == len(cards) >= len(GOLDEN) + len(NATIVE) + len(DOCUMENTATION_ONLY)
    for path in files:
        raw = json.loads(path.read_text())
        assert parse_card(raw, str(path)).name == raw["name"]
    assert set(GOLDEN) | NATIVE | DOCUMENTATION_ONLY <= set(cards)


def test_golden_digests_of_the_canonical_cards() -> None:
    cards = all_cards()
    assert {n: cards[n].digest for n in GOLDEN} == GOLDEN
    assert all(cards[n].status == "canonical" for n in GOLDEN)
    assert {n for n, c in cards.items() if c.status == "canonical"} == set(GOLDEN)
    semi = load_card("semisup@v1")
    assert semi.resolve({"label_fraction": 0.1}).digest == SEMISUP_10PCT != semi.digest


def test_status_documentation_only_and_selects_on_test() -> None:
    cards = all_cards()
    assert {n for n, c in cards.items() if c.status == "native"} == NATIVE
    assert {n for n, c in cards.items() if c.documentation_only} == DOCUMENTATION_ONLY
    assert {
        n for n, c in cards.items() if c.selects_on_test and not c.documentation_only
    } == SELECTS_ON_TEST
    with pytest.raises(CardError, match="documentation only"):
        load_card("semisup/easyfl").protocol_card()


def test_digest_is_the_record_card_id_and_ignores_name_description_references() -> None:
    for spec in all_cards().values():
        if spec.documentation_only:
            continue
        pc = spec.protocol_card()
        assert isinstance(pc, ProtocolCard) and pc.card_id == spec.digest and pc.name == spec.name
        assert pc.selects_on_test == spec.selects_on_test and spec.matches(pc)
        assert card_for_id(spec.digest) is spec
    raw = json.loads((CARDS_DIR / "linear@v1.json").read_text())
    base = card_digest(raw)
    renamed = {**raw, "name": "other@v1", "description": "x", "references": ["y"]}
    assert card_digest(renamed) == base == GOLDEN["linear@v1"]


@pytest.mark.parametrize("name", ["linear@v1", "linear/orchestra", "semisup/orchestra"])
def test_changing_any_comparability_field_changes_the_digest(name: str) -> None:
    raw = json.loads((CARDS_DIR / (name.replace("/", "_") + ".json")).read_text())
    base = card_digest(raw)
    for key, value in raw["settings"].items():
        changed = copy.deepcopy(raw)
        changed["settings"][key] = ["changed", value]
        assert card_digest(changed) != base, key
    for key in ("task", "version"):
        assert card_digest({**raw, key: raw[key] + "x"}) != base


def test_schema_rejects_unknown_missing_and_invalid_fields() -> None:
    raw = json.loads((CARDS_DIR / "knn@v1.json").read_text())
    with pytest.raises(CardError, match="unknown keys"):
        parse_card({**raw, "colour": "blue"})
    with pytest.raises(CardError, match="unknown settings"):
        parse_card({**raw, "settings": {**raw["settings"], "learning_rate": 1.0}})
    with pytest.raises(CardError, match="missing"):
        parse_card({k: v for k, v in raw.items() if k != "references"})
    with pytest.raises(CardError, match="selection"):
        parse_card({**raw, "settings": {**raw["settings"], "selection": "best_val"}})
    with pytest.raises(CardError, match="settings.metric is required"):
        parse_card({**raw, "settings": {k: v for k, v in raw["settings"].items() if k != "metric"}})
    with pytest.raises(CardError, match="task"):
        parse_card({**raw, "task": "segmentation"})
    with pytest.raises(CardError, match="@v1"):
        parse_card({**raw, "name": "knn-canonical"})
    with pytest.raises(CardError, match="non-finite"):
        parse_card({**raw, "settings": {**raw["settings"], "k": float("nan")}})
    with pytest.raises(CardError, match="has no fields"):
        load_card("knn@v1").resolve({"epochs": 3})
    groups = [k for keys in FIELD_GROUPS.values() for k in keys]
    assert len(groups) == len(set(groups))  # every field belongs to exactly one group


CANONICAL_TASKS = [
    ("knn", {}, "knn@v1"),
    ("linear_probe", {}, "linear@v1"),
    ("semi_supervised", {}, "semisup@v1"),
    ("transfer", {}, "transfer-linear@v1"),
    ("reconstruction", {}, "recon/mae@v1"),
]


@pytest.mark.parametrize("task,params,card", CANONICAL_TASKS)
def test_canonical_tasks_at_default_config_carry_the_json_card(
    task: str, params: dict, card: str
) -> None:
    cls = TASKS.get(task)
    pc = cls(from_mapping(cls.Config, params)).card()
    assert (pc.name, pc.card_id) == (card, GOLDEN[card])
    assert dict(pc.settings) == dict(load_card(card).settings)


def test_task_overrides_change_the_card_id_not_the_name() -> None:
    cls = TASKS.get("linear_probe")
    pc = cls(from_mapping(cls.Config, {"epochs": 1})).card()
    assert (
        pc.name == "linear@v1" and pc.card_id != GOLDEN["linear@v1"] and pc.settings["epochs"] == 1
    )
    semi = TASKS.get("semi_supervised")
    assert semi(from_mapping(semi.Config, {"label_fraction": 0.1})).card().card_id == SEMISUP_10PCT


def test_detection_cards_come_from_the_json() -> None:
    from tasks.coco_detection.task import CocoDetection, CocoDetectionConfig

    task = CocoDetection(CocoDetectionConfig())
    for stem, name in (
        ("full", "detection/maskrcnn-r18fpn-1x@v1"),
        ("cifar", "detection/maskrcnn-r18fpn-1x-cifarstem@v1"),
    ):
        pc = task.card(stem)
        assert (pc.name, pc.card_id) == (name, GOLDEN[name])
        # the run's framework facts are not protocol: they go to the score's extra, and the card
        # stays the committed one (its digest is the JSON's), whatever Detectron2 version or GPU
        # count ran it
        assert not {
            "detectron2_version",
            "num_gpus",
            "ims_per_gpu",
            "device",
            "backbone_builder",
        } & set(pc.settings)
    assert (
        CocoDetection(CocoDetectionConfig(dataset="shapes_coco")).card("cifar").card_id
        == load_card("detection/shapes-smoke@v1").digest
    )


@pytest.mark.parametrize(
    "task,card",
    [
        ("linear_native", "orchestra"),
        ("linear_native", "decssl"),
        ("linear_native", "easyfl"),
        ("linear_native", "moco-lincls"),
        ("semisup_native", "orchestra"),
        ("transfer_native", "decssl"),
    ],
)
def test_native_tasks_at_default_config_carry_the_native_card(task: str, card: str) -> None:
    cls = TASKS.get(task)
    pc = cls(from_mapping(cls.Config, {"card": card})).card()
    spec = load_card(pc.name)
    assert pc.name.endswith("/" + card) and pc.card_id == spec.digest and spec.status == "native"
    assert pc.selects_on_test == (pc.name in SELECTS_ON_TEST)
    shorter = cls(from_mapping(cls.Config, {"card": card, "epochs": 1})).card()
    assert shorter.name == pc.name and shorter.card_id != pc.card_id


def test_reference_card_ids_are_the_digests_of_their_named_cards() -> None:
    """A paper number may carry a card_id only when its protocol is exactly one of our card JSONs
    (reference.py)."""
    from pathlib import Path

    from benchmark.records.reference import load_references

    good, bad = load_references(Path(__file__).resolve().parents[2] / "results" / "reference")
    assert not bad
    pinned = [v for t in good for v in t.values if v.card_id]
    # Orchestra's linear columns: linear/orchestra is its released linear_eval.py protocol
    assert pinned
    for v in pinned:
        assert v.card_id == load_card(v.card).digest, (v.file, v.column)
        assert not v.selects_on_test


def test_e2e_classifier_scores_the_exported_classifier_once_in_eval_mode(tmp_path) -> None:
    import numpy as np
    import torch
    from torch import nn

    from benchmark.api import DatasetSplit, Encoder, TaskContext, TaskNotApplicable
    from benchmark.contracts.data_types import DatasetSplits

    labels = np.array([0, 1, 1, 0, 1], dtype=np.int64)
    images = torch.zeros(5, 3, 2, 2, dtype=torch.uint8)
    images[labels == 1] = 255  # bright images are class 1
    split = DatasetSplit(images, labels, 2)
    ds = DatasetSplits("toy", split, split, "toy", (0.5,) * 3, (0.5,) * 3)

    class Bright(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert not self.training
            m = x.mean((1, 2, 3))
            return torch.stack([-m, m], 1)

    clf = Bright().train()
    enc = Encoder(
        module=nn.Identity(),
        feat_dim=1,
        backbone="toy",
        fingerprint="x",
        input_size=2,
        mean=(0.5,) * 3,
        std=(0.5,) * 3,
        classifier=clf,
    )
    cls = TASKS.get("e2e_classifier")
    task = cls(from_mapping(cls.Config, {"batch_size": 2}))
    ctx = TaskContext(
        dataset=ds,
        data_root=tmp_path,
        out_dir=tmp_path,
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )
    s = task.run(enc, ctx)
    assert s.values["top1"] == 100.0 and clf.training  # mode restored
    assert s.card.name == "e2e-classifier@v1" and s.card.card_id == GOLDEN["e2e-classifier@v1"]
    with pytest.raises(TaskNotApplicable):
        task.run(
            Encoder(
                module=nn.Identity(),
                feat_dim=1,
                backbone="toy",
                fingerprint="x",
                input_size=2,
                mean=(0.5,) * 3,
                std=(0.5,) * 3,
            ),
            ctx,
        )


def test_finetune_task_carries_the_fedmae_card() -> None:
    cls = TASKS.get("finetune")
    pc = cls(from_mapping(cls.Config, {})).card()
    spec = load_card("finetune/fedmae")
    assert (pc.name, pc.card_id) == ("finetune/fedmae", spec.digest) and spec.settings[
        "protocol_assumed"
    ]
    assert cls(from_mapping(cls.Config, {"label_fraction": 0.1})).card().card_id != spec.digest
