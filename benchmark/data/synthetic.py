"""``shapes_coco``: a procedurally generated detection / instance-segmentation set in COCO format
(docs/design.md §7).

Each image (64×64 RGB by default) holds 1–3 filled shapes of 2 categories, ``rectangle`` (id 1) and
``ellipse`` (id 2), in random colours on a random plain background. Every instance has a COCO
``bbox`` (x, y, w, h), an ``area`` (of its polygon), ``iscrowd: 0`` and a polygon ``segmentation``
(4 points for a rectangle, 24 for an ellipse); the image is drawn from the same polygons, so masks
and pixels agree. Deterministic per seed: the generator is ``np.random.default_rng(seed)`` and
nothing else; the written PNGs and JSON are identical across runs. Later shapes may partly occlude
earlier ones; the annotation keeps each shape's full polygon (as COCO does).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CATEGORIES = (
    {"id": 1, "name": "rectangle", "supercategory": "shape"},
    {"id": 2, "name": "ellipse", "supercategory": "shape"},
)
ELLIPSE_POINTS = 24


@dataclass(frozen=True)
class ShapesSplit:
    """In-memory images (N, H, W, 3) uint8 and the COCO dict (``images``, ``annotations``,
    ``categories``)."""

    images: np.ndarray
    coco: dict[str, Any]


def _polygon(kind: int, cx: float, cy: float, rw: float, rh: float) -> list[float]:
    if kind == 1:
        pts = [(cx - rw, cy - rh), (cx + rw, cy - rh), (cx + rw, cy + rh), (cx - rw, cy + rh)]
    else:
        angles = [2 * math.pi * i / ELLIPSE_POINTS for i in range(ELLIPSE_POINTS)]
        pts = [(cx + rw * math.cos(a), cy + rh * math.sin(a)) for a in angles]
    return [round(float(v), 2) for p in pts for v in p]


def _polygon_area(poly: list[float]) -> float:
    x, y = np.asarray(poly[0::2]), np.asarray(poly[1::2])
    return float(0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def generate_shapes(
    num_images: int, seed: int, *, size: int = 64, max_shapes: int = 3, first_image_id: int = 1
) -> ShapesSplit:
    """Pure generator: ``num_images`` images with 1..``max_shapes`` shapes each, and their COCO
    annotations."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    images = np.zeros((num_images, size, size, 3), dtype=np.uint8)
    coco: dict[str, Any] = {
        "images": [],
        "annotations": [],
        "categories": [dict(c) for c in CATEGORIES],
    }
    ann_id = 1
    for i in range(num_images):
        image_id = first_image_id + i
        background = tuple(int(v) for v in rng.integers(0, 256, 3))
        canvas = Image.new("RGB", (size, size), background)
        draw = ImageDraw.Draw(canvas)
        for _ in range(int(rng.integers(1, max_shapes + 1))):
            kind = int(rng.integers(1, 3))
            rw, rh = (float(v) for v in rng.uniform(size * 0.08, size * 0.22, 2))
            cx = float(rng.uniform(rw + 1, size - rw - 1))
            cy = float(rng.uniform(rh + 1, size - rh - 1))
            colour = rng.integers(0, 256, 3)
            if np.abs(colour.astype(int) - np.array(background)).sum() < 120:  # keep shapes visible
                colour = 255 - colour
            poly = _polygon(kind, cx, cy, rw, rh)
            draw.polygon(list(zip(poly[0::2], poly[1::2])), fill=tuple(int(v) for v in colour))
            xs, ys = poly[0::2], poly[1::2]
            x0, y0 = max(min(xs), 0.0), max(min(ys), 0.0)
            x1, y1 = min(max(xs), float(size)), min(max(ys), float(size))
            coco["annotations"].append(
                {
                    "id": ann_id,
                    "image_id": image_id,
                    "category_id": kind,
                    "iscrowd": 0,
                    "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
                    "area": round(_polygon_area(poly), 2),
                    "segmentation": [poly],
                }
            )
            ann_id += 1
        images[i] = np.asarray(canvas, dtype=np.uint8)
        coco["images"].append(
            {"id": image_id, "file_name": f"{image_id:06d}.png", "width": size, "height": size}
        )
    return ShapesSplit(images, coco)


@dataclass(frozen=True, kw_only=True)
class ShapesCocoFiles:
    root: Path
    train_json: Path
    train_images: Path
    val_json: Path
    val_images: Path
    digest: str  # content digest of both splits (images and annotations)


def shapes_digest(*splits: ShapesSplit) -> str:
    h = hashlib.sha256()
    for s in splits:
        h.update(np.ascontiguousarray(s.images).tobytes())
        h.update(json.dumps(s.coco, sort_keys=True).encode())
    return h.hexdigest()[:16]


def shapes_coco(
    root: str | Path,
    *,
    seed: int = 0,
    num_train: int = 20,
    num_val: int = 8,
    size: int = 64,
    max_shapes: int = 3,
) -> ShapesCocoFiles:
    """Write (once) a train and a val split as PNGs plus COCO JSON under ``root``; return their
    paths.

    The val split uses a different stream (``seed + 1_000_003``) and continues the image ids, so the
    two splits never share images. Rewriting with the same arguments produces identical files; an
    existing folder whose stored digest matches is reused as is.
    """
    from PIL import Image

    train = generate_shapes(num_train, seed, size=size, max_shapes=max_shapes)
    val = generate_shapes(
        num_val, seed + 1_000_003, size=size, max_shapes=max_shapes, first_image_id=num_train + 1
    )
    digest = shapes_digest(train, val)
    root = Path(root)
    files = ShapesCocoFiles(
        root=root,
        train_json=root / "annotations" / "train.json",
        train_images=root / "train",
        val_json=root / "annotations" / "val.json",
        val_images=root / "val",
        digest=digest,
    )
    stamp = root / "DIGEST"
    if stamp.exists() and stamp.read_text().strip() == digest:
        return files
    for split, json_path, folder in (
        (train, files.train_json, files.train_images),
        (val, files.val_json, files.val_images),
    ):
        folder.mkdir(parents=True, exist_ok=True)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        for img, meta in zip(split.images, split.coco["images"]):
            Image.fromarray(img).save(folder / meta["file_name"], format="PNG")
        json_path.write_text(json.dumps(split.coco, sort_keys=True, indent=1) + "\n")
    stamp.write_text(digest + "\n")
    return files
