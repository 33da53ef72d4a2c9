"""Larger hub datasets: ``tiny_imagenet``, ``imagenet100``, ``mini_imagenet`` (HF ``datasets``), and
``coco2017``.

Same contract as ``benchmark/data/datasets.py``: a run never downloads. ``python -m benchmark
prefetch NAME`` (on a machine with network) calls ``datasets.load_dataset`` and ``save_to_disk``
into ``<data root>/<name>``; ``load`` reads that folder with ``load_from_disk``, decodes once into
uint8 arrays at the configured resolution and caches them next to the data
(``_fssl_uint8_<size>.npz``). A missing folder raises ``DatasetUnavailable`` at once, with the
prefetch command.

Column names and splits are those of the hub datasets' cards (checked there, not guessed):

- ``zh-plus/tiny-imagenet``: features ``image`` (Image, 64×64) and ``label`` (ClassLabel, 200
  wnids); splits ``train`` (100,000) and ``valid`` (10,000) —
  huggingface.co/datasets/zh-plus/tiny-imagenet (dataset_infos.json).
- ``clane9/imagenet-100``: features ``image`` and ``label`` (ClassLabel, 100 classes whose order is
  CMC's ``imagenet100.txt``: '0' bonnet = n02869837, '1' green mamba = n01749939, ...); splits
  ``train`` (126,689) and ``validation`` (5,000) — huggingface.co/datasets/clane9/imagenet-100
  (README dataset_info).
- ``timm/mini-imagenet``: features ``image`` (original resolution) and ``label`` (ClassLabel, 100
  wnids); splits ``train`` (50,000), ``validation`` (10,000) and ``test`` (5,000); the card says
  train/validation are the train/test of the common 60,000-image Mini-ImageNet —
  huggingface.co/datasets/timm/mini-imagenet (README).

``coco2017`` is not an image-classification set: it locates the COCO 2017 detection data (images and
instance annotation JSONs) under ``<data root>/coco``, the layout ``tasks/coco_detection`` reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmark.contracts.registries import DATASETS
from benchmark.data.datasets import DatasetUnavailable, HubImageDataset

IMAGENET100_CLASSES_FILE = Path(__file__).with_name("imagenet100_classes.txt")
# the hub set's ClassLabel names, as served ("bonnet, poke bonnet", "green mamba", ...): the
# ImageNet synset
# words of the CMC wnids, line for line (the hub repo's scripts/classes.py maps each wnid to these
# words)
IMAGENET100_NAMES_FILE = Path(__file__).with_name("imagenet100_names.txt")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def imagenet100_classes() -> list[str]:
    """The 100 ImageNet synsets of CMC's ImageNet-100 (github.com/HobbitLong/CMC
    ``imagenet100.txt``), in its order."""
    names = [
        ln.strip()
        for ln in IMAGENET100_CLASSES_FILE.read_text(encoding="utf-8").splitlines()
        if ln.strip()
    ]
    if len(names) != 100 or len(set(names)) != 100:
        raise ValueError(
            f"{IMAGENET100_CLASSES_FILE} must list 100 distinct synsets, found {len(set(names))}"
        )
    return names


def imagenet100_names() -> list[str]:
    """The hub's human-readable class names, in the order of ``imagenet100_classes()``."""
    text = IMAGENET100_NAMES_FILE.read_text(encoding="utf-8")
    names = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(names) != 100 or len(set(names)) != 100:
        raise ValueError(
            f"{IMAGENET100_NAMES_FILE} must list 100 distinct names, found {len(set(names))}"
        )
    return names


def resize_center_crop(img: Any, size: int) -> np.ndarray:
    """RGB uint8 (size, size, 3): shorter side resized to ``size`` (bicubic), then the central
    square.

    Square inputs of the target size are returned unchanged (bit for bit), so 64×64 Tiny-ImageNet
    stays as is.
    """
    from PIL import Image

    im = img if isinstance(img, Image.Image) else Image.fromarray(np.asarray(img, dtype=np.uint8))
    im = im.convert("RGB")
    w, h = im.size
    if (w, h) != (size, size):
        scale = size / min(w, h)
        nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
        im = im.resize((nw, nh), Image.BICUBIC)
        left, top = (nw - size) // 2, (nh - size) // 2
        im = im.crop((left, top, left + size, top + size))
    return np.asarray(im, dtype=np.uint8)


@dataclass(frozen=True, kw_only=True)
class HubClassification(HubImageDataset):
    """A hub image-classification set stored at a configurable square resolution ``size``.

    DEVIATION: the harness keeps every split in memory as uint8 N×3×H×W (DatasetSplit), so
    ImageNet-sized images are stored once at ``size`` (shorter side resized, centre crop);
    random-resized crops are then taken from that copy rather than from the full-resolution JPEG.
    ImageNet-100 at 224 px is about 19 GB of RAM per process.
    """

    size: int = 224  # stored square resolution (px); each dataset sets its own default

    def __post_init__(self) -> None:
        if self.size < 8:
            raise ValueError("size must be >= 8 pixels")

    @property
    def image_size(self) -> int:  # type: ignore[override]  # the base class's ClassVar becomes per-instance
        return self.size

    def how_to_get(self, root: Path) -> str:
        return (
            f"dataset {self.name!r} is not under {self.folder(root)}. Fetch it once on a machine with network: "
            f"{self.prefetch_hint(root)} (HF hub {self.hub_id}; gated ImageNet "
            "derivatives need `huggingface-cli login` and the licence accepted on the hub page first), "
            "or pass --data-root / set FSSL_DATA_ROOT to a folder that holds it."
        )

    def square(self, img: Any) -> np.ndarray:
        return resize_center_crop(img, self.image_size)


@DATASETS.register("tiny_imagenet", aliases=("tinyimagenet", "tiny-imagenet"))
@dataclass(frozen=True, kw_only=True)
class TinyImageNet(HubClassification):
    """Tiny-ImageNet (200 classes, 64×64): train 100,000 / valid 10,000 (the labelled validation set
    is the test split, as in FLESD's Table 1 and the usual SSL protocol)."""

    name: ClassVar[str] = "tiny_imagenet"
    hub_id: ClassVar[str] = "zh-plus/tiny-imagenet"
    image_column: ClassVar[str] = "image"
    label_column: ClassVar[str] = "label"
    test_split: ClassVar[str] = "valid"
    size: int = 64  # native
    mean: ClassVar[tuple[float, ...]] = IMAGENET_MEAN
    std: ClassVar[tuple[float, ...]] = IMAGENET_STD

    def validate(self, train_split: Any) -> None:
        n = self.num_classes_of(train_split)
        if n and n != 200:
            raise DatasetUnavailable(
                f"tiny_imagenet: expected 200 classes, the stored label feature has {n}"
            )


@DATASETS.register("imagenet100", aliases=("imagenet-100", "in100"))
@dataclass(frozen=True, kw_only=True)
class ImageNet100(HubClassification):
    """ImageNet-100, the CMC 100-class subset (``benchmark/data/imagenet100_classes.txt``; Dec-SSL
    Table 1, FLESD Table 1): train 126,689 / validation 5,000 (the ImageNet validation images of
    those classes). Label i is the i-th synset of the class list, as in the hub set's ClassLabel
    order."""

    name: ClassVar[str] = "imagenet100"
    hub_id: ClassVar[str] = "clane9/imagenet-100"
    download_bytes: ClassVar[int | None] = 17_000_000_000
    gated: ClassVar[bool] = True
    image_column: ClassVar[str] = "image"
    label_column: ClassVar[str] = "label"
    test_split: ClassVar[str] = "validation"
    size: int = 224
    mean: ClassVar[tuple[float, ...]] = IMAGENET_MEAN
    std: ClassVar[tuple[float, ...]] = IMAGENET_STD

    @property
    def classes(self) -> list[str]:
        return imagenet100_classes()

    def validate(self, train_split: Any) -> None:
        n = self.num_classes_of(train_split)
        if n != len(self.classes):
            raise DatasetUnavailable(
                f"imagenet100: expected the {len(self.classes)} classes of "
                f"{IMAGENET100_CLASSES_FILE.name}, the stored label feature has {n}"
            )
        names = list(getattr(train_split.features[self.label_column], "names", []) or [])
        indices = [str(i) for i in range(len(names))]  # ClassLabel(num_classes=n): no order
        if names in (self.classes, imagenet100_names(), indices):
            return  # CMC order, by wnid or by the names the hub serves
        want = imagenet100_names() if not names[0].startswith("n0") else self.classes
        i = next(i for i, (a, b) in enumerate(zip(names, want)) if a != b)
        raise DatasetUnavailable(
            f"imagenet100: stored class {i} is {names[i]!r}, {IMAGENET100_CLASSES_FILE.name} "
            f"(CMC order) has {want[i]!r}: not clane9/imagenet-100's class order; re-fetch it with "
            "`python -m benchmark prefetch imagenet100`"
        )


@DATASETS.register("mini_imagenet", aliases=("miniimagenet", "mini-imagenet"))
@dataclass(frozen=True, kw_only=True)
class MiniImageNet(HubClassification):
    """Mini-ImageNet (100 classes; FedMAE's pre-training set, docs/methods/fedmae.md §4): train
    50,000 / test = the hub's ``validation`` 10,000 (together the 60,000 images the FedMAE paper
    cites); the hub's 5,000-image ``test`` split, taken from ImageNet's validation set, is not used.
    The card says its classes and splits are not Vinyals et al.'s few-shot Mini-ImageNet; FedMAE
    does not name its list (docs/official-code.md)."""

    name: ClassVar[str] = "mini_imagenet"
    hub_id: ClassVar[str] = "timm/mini-imagenet"
    image_column: ClassVar[str] = "image"
    label_column: ClassVar[str] = "label"
    test_split: ClassVar[str] = "validation"
    size: int = 224
    mean: ClassVar[tuple[float, ...]] = IMAGENET_MEAN
    std: ClassVar[tuple[float, ...]] = IMAGENET_STD

    def validate(self, train_split: Any) -> None:
        n = self.num_classes_of(train_split)
        if n and n != 100:
            raise DatasetUnavailable(
                f"mini_imagenet: expected 100 classes, the stored label feature has {n}"
            )


# --------------------------------------------------------------------------------------------------
# COCO 2017 (detection data for tasks/coco_detection)

COCO_URLS = {  # cocodataset.org/#download
    "train2017.zip": "http://images.cocodataset.org/zips/train2017.zip",
    "val2017.zip": "http://images.cocodataset.org/zips/val2017.zip",
    "annotations_trainval2017.zip": "http://images.cocodataset.org/annotations/annotations_trainval2017.zip",
}


COCO_BYTES = {  # the three archives' sizes as served: said before `prefetch` starts (the download
    # itself trusts the server's Content-Length)
    "train2017.zip": 19_336_861_798,
    "val2017.zip": 815_585_330,
    "annotations_trainval2017.zip": 252_907_541,
}


@dataclass(frozen=True)
class CocoLayout:
    """Where the COCO 2017 detection files are (what Detectron2's ``register_coco_instances``
    needs)."""

    root: Path
    train_images: Path
    val_images: Path
    train_annotations: Path
    val_annotations: Path

    def splits(self) -> dict[str, tuple[Path, Path]]:
        return {
            "train2017": (self.train_annotations, self.train_images),
            "val2017": (self.val_annotations, self.val_images),
        }


@DATASETS.register("coco2017", aliases=("coco",))
@dataclass(frozen=True, kw_only=True)
class Coco2017:
    """COCO 2017 detection data under ``<data root>/<folder>``: ``train2017/``, ``val2017/`` and
    ``annotations/instances_{train,val}2017.json`` (docs/protocols/evaluation.md §4;
    docs/detection.md). Not a pre-training set: ``load`` returns a ``CocoLayout`` (paths), for the
    ``coco_detection`` task."""

    version: ClassVar[str] = "1"
    hub_id: ClassVar[str | None] = None
    source_url: ClassVar[str] = COCO_URLS["val2017.zip"]  # prefetch's reachability check probes it
    download_bytes: ClassVar[int | None] = sum(COCO_BYTES.values())
    gated: ClassVar[bool] = False
    # tasks/coco_detection reads <data root>/coco unless its coco_root is set
    folder_name: str = "coco"

    def folder(self, root: Path) -> Path:
        return Path(root) / self.folder_name

    def layout(self, root: Path) -> CocoLayout:
        f = self.folder(root)
        return CocoLayout(
            f,
            f / "train2017",
            f / "val2017",
            f / "annotations" / "instances_train2017.json",
            f / "annotations" / "instances_val2017.json",
        )

    def missing(self, root: Path) -> list[str]:
        lay = self.layout(root)
        out = [str(p) for p in (lay.train_annotations, lay.val_annotations) if not p.is_file()]
        out += [
            f"{p}/ (no images)"
            for p in (lay.train_images, lay.val_images)
            if not p.is_dir() or next(p.iterdir(), None) is None
        ]
        return out

    def available(self, root: Path) -> bool:
        return not self.missing(root)

    def how_to_get(self, root: Path) -> str:
        f = self.folder(root)
        absent = [
            str(Path(p).relative_to(f)) if p.startswith(str(f)) else p for p in self.missing(root)
        ]
        return (
            f"COCO 2017 is not complete under {f} (missing: {', '.join(absent)}). Fetch it once "
            f"(about {sum(COCO_BYTES.values()) / 1e9:.0f} GB): `python -m benchmark prefetch coco2017 "
            f"--data-root {root}`, or download "
            + ", ".join(p.rsplit("/", 1)[-1] for p in COCO_URLS.values())
            + f" from {COCO_URLS['val2017.zip'].rsplit('/', 2)[0]}/ (zips/, annotations/) and unzip "
            f"them into {f}."
        )

    def load(self, root: Path) -> CocoLayout:
        if not self.available(root):
            raise DatasetUnavailable(self.how_to_get(root))
        return self.layout(root)

    def categories(self, root: Path, split: str = "val2017") -> list[dict[str, Any]]:
        """The category list of one split's annotation file (reads the JSON; val2017's is 25 MB)."""
        lay = self.load(root)
        path = lay.val_annotations if split == "val2017" else lay.train_annotations
        return list(json.loads(path.read_text(encoding="utf-8"))["categories"])

    def prefetch(self, root: Path) -> Path:  # network; never called during a run
        """Download the three archives (each resumed where an earlier attempt stopped, with a
        progress bar) and unpack each once: an archive whose ``.unpacked`` mark is there is skipped."""
        import zipfile

        out = self.folder(root)
        out.mkdir(parents=True, exist_ok=True)
        for fname, url in COCO_URLS.items():
            target, mark = out / fname, out / f".{fname}.unpacked"
            if mark.exists():
                continue
            if not target.exists():
                download_resumable(url, target)
            with zipfile.ZipFile(target) as z:
                z.extractall(out)
            mark.touch()
        return out


def download_resumable(url: str, target: Path, *, chunk: int = 1 << 20) -> None:
    """``url`` into ``target``: bytes go to ``target.part`` first, an existing ``.part`` is resumed
    with an HTTP Range request (started over when the server ignores it), the file takes its name
    only once the server's Content-Length is reached. Shows a tqdm bar."""
    import urllib.request

    from tqdm import tqdm

    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    with urllib.request.urlopen(request, timeout=60) as resp:
        if have and resp.status != 206:  # no range support: from the start
            have = 0
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        with (
            open(part, "ab" if have else "wb") as f,
            tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=target.name) as bar,
        ):
            while block := resp.read(chunk):
                f.write(block)
                bar.update(len(block))
    size = part.stat().st_size
    if total is not None and size != total:
        raise OSError(f"{url}: {size:,} of {total:,} bytes received; run prefetch again to resume")
    part.replace(target)
