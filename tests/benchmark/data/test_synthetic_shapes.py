"""``shapes_coco`` (docs/design.md §7): deterministic per seed, valid COCO, annotations agree with
the pixels."""

from __future__ import annotations

import json

import numpy as np

from benchmark.data.synthetic import CATEGORIES, generate_shapes, shapes_coco


def test_deterministic_per_seed_and_seed_sensitive(tmp_path):
    a, b = shapes_coco(tmp_path / "a", seed=3), shapes_coco(tmp_path / "b", seed=3)
    assert a.digest == b.digest
    assert a.train_json.read_bytes() == b.train_json.read_bytes()
    for p in sorted(a.train_images.glob("*.png")):
        assert p.read_bytes() == (b.train_images / p.name).read_bytes()
    assert shapes_coco(tmp_path / "c", seed=4).digest != a.digest
    assert shapes_coco(tmp_path / "a", seed=3).digest == a.digest  # reuse of an existing folder


def test_valid_coco_with_one_to_three_shapes_of_two_classes(tmp_path):
    files = shapes_coco(tmp_path, seed=0, num_train=30, num_val=8)
    train, val = json.loads(files.train_json.read_text()), json.loads(files.val_json.read_text())
    assert [c["name"] for c in train["categories"]] == ["rectangle", "ellipse"]
    assert len(train["images"]) == 30 and len(val["images"]) == 8
    assert not {i["id"] for i in train["images"]} & {i["id"] for i in val["images"]}
    per_image = np.bincount([a["image_id"] for a in train["annotations"]])[1:]
    assert per_image.min() >= 1 and per_image.max() <= 3
    assert {a["category_id"] for a in train["annotations"]} == {1, 2}
    for ann in train["annotations"] + val["annotations"]:
        x, y, w, h = ann["bbox"]
        assert (
            ann["iscrowd"] == 0
            and 0 <= x
            and 0 <= y
            and x + w <= 64
            and y + h <= 64
            and w > 0
            and h > 0
        )
        poly = np.asarray(ann["segmentation"][0]).reshape(-1, 2)
        assert len(poly) == (4 if ann["category_id"] == 1 else 24)
        assert abs(poly[:, 0].min() - x) < 0.02 and abs(poly[:, 1].max() - (y + h)) < 0.02
        assert 0 < ann["area"] <= w * h + 0.5  # (coordinates are rounded to 0.01)
        if ann["category_id"] == 1:
            assert abs(ann["area"] - w * h) < 0.5
    assert len(list(files.train_images.glob("*.png"))) == 30


def test_pixels_match_the_last_drawn_shape():
    split = generate_shapes(12, seed=1)
    for meta, img in zip(split.coco["images"], split.images):
        anns = [a for a in split.coco["annotations"] if a["image_id"] == meta["id"]]
        # drawn last, so never occluded: its centre pixel has one colour and differs from corners
        top = anns[-1]
        x, y, w, h = top["bbox"]
        cy, cx = int(y + h / 2), int(x + w / 2)
        centre = img[cy, cx].astype(int)
        inner = img[
            int(y + h / 2 - 1) : int(y + h / 2 + 2), int(x + w / 2 - 1) : int(x + w / 2 + 2)
        ].astype(int)
        assert np.all(inner == centre)
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    assert len(CATEGORIES) == 2
