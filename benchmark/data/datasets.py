"""Datasets as in-memory uint8 image tensors with integer labels, pinned to a revision.

``digits`` (scikit-learn's handwritten digits, real data that ships with the dependency) is the
embedded default. Hub datasets load through HF ``datasets`` from a data root; nothing is downloaded
during a run. A missing dataset fails in well under a second with the command that fetches it
(``python -m benchmark prefetch NAME``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from benchmark.contracts.data_types import DatasetSplit, DatasetSplits
from benchmark.contracts.registries import DATASETS
from benchmark.data.shared_arrays import load_npz_shared

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that need it, so that availability checks (`run` stopping
# on missing data, `plan`) stay fast: this module and the dataset classes are torch-free at import
# time.


class DatasetUnavailable(RuntimeError):
    """The dataset is not on this machine; the message says how to get it."""


def default_data_root() -> Path:
    return Path(os.environ.get("FSSL_DATA_ROOT", Path.home() / ".cache" / "fssl-bench" / "data"))


def resolve_data_root(data_root: str | Path | None) -> Path:
    """The data root a run uses: the one given, else ``default_data_root()`` (the one resolution
    of the run, preflight, prefetch and the partition oracle)."""
    return Path(data_root) if data_root else default_data_root()


def content_revision(*arrays: np.ndarray | torch.Tensor) -> str:
    h = hashlib.sha256()
    for a in arrays:
        arr = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)
        h.update(str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


_CACHE: dict[Any, DatasetSplits] = {}


# Input normalisation a cell can choose (dataset param ``normalize``): the dataset's own statistics
# (default), the papers' mean = std = 0.5 (Orchestra's and FLESD's CIFAR pipelines), ImageNet's, or
# none (mean 0, std 1: pixels in [0, 1], EasyFL's FedU/FedEMA transforms). It sets the statistics
# the clients normalise with AND the encoder's metadata, so every task evaluates with the encoder's
# own statistics (docs/protocols/evaluation.md, card field "input").
Normalize = Literal["dataset", "half", "imagenet", "none"]
NORMALIZATIONS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "half": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "none": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}


def with_normalization(ds: DatasetSplits, normalize: str) -> DatasetSplits:
    if normalize == "dataset":
        return ds
    if normalize not in NORMALIZATIONS:
        raise ValueError(
            f"normalize must be one of dataset, {', '.join(NORMALIZATIONS)}; got {normalize!r}"
        )
    mean, std = NORMALIZATIONS[normalize]
    return dataclasses.replace(ds, mean=mean, std=std)


# Which split the tasks score on (dataset param ``eval_split``). "test" is the benchmark's number.
# "validation" is for choosing hyperparameters without reading the test split: a class-stratified
# ``val_fraction`` of the train split becomes the evaluation split, the rest is what the clients
# partition, and the test split is not used.
EvalSplit = Literal["test", "validation"]


def stratified_holdout(
    labels: np.ndarray, fraction: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) sorted indices: per class in label order, a ``RandomState(seed)``
    permutation whose first ``round(n_c * fraction)`` images (at least one, at most n_c - 1, none of
    a singleton class) are held out."""
    rs = np.random.RandomState(seed)
    kept, held = [], []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rs.permutation(len(idx))]
        n_held = min(max(round(len(idx) * fraction), 1), len(idx) - 1) if len(idx) > 1 else 0
        held.append(idx[:n_held])
        kept.append(idx[n_held:])
    return np.sort(np.concatenate(kept)), np.sort(np.concatenate(held))


def hold_out_validation(ds: DatasetSplits, fraction: float, seed: int = 0) -> DatasetSplits:
    """The validation view of ``ds``: per class, a seeded random ``round(n_c * fraction)`` of the
    train images (at least one, at most n_c - 1) becomes the evaluation split; the other train
    images stay the train split; the test split is dropped. The normalisation statistics are left as
    they are (the train split's), and the revision names the carve, so records of the two views
    never share a digest."""
    if not 0 < fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {fraction}")
    tr, va = stratified_holdout(ds.train.labels, fraction, seed)
    rev = hashlib.sha256(f"{ds.revision}|validation|{fraction}|{seed}".encode()).hexdigest()[:16]
    return dataclasses.replace(
        ds, train=ds.train.subset(tr), test=ds.train.subset(va), revision=rev
    )


def load_dataset_splits(
    name: str, params: dict[str, Any] | None = None, data_root: str | Path | None = None
) -> DatasetSplits:
    """Load (and memoise in-process) a registered dataset by name and params."""
    from benchmark.core.config import canonical_json, from_mapping

    cls = DATASETS.get(name)
    cfg = from_mapping(cls, params or {})
    root = resolve_data_root(data_root)
    # normalisation and the validation carve are views of the stored data: one in-memory copy serves
    # them all
    views = {k: v for k, v in (("normalize", "dataset"), ("eval_split", "test")) if hasattr(cfg, k)}
    raw_cfg = dataclasses.replace(cfg, **views)
    key = (DATASETS.canonical(name), canonical_json(raw_cfg), str(root))
    if key not in _CACHE:
        _CACHE[key] = raw_cfg.load(root)
    ds = _CACHE[key]
    # the config type admits only "test" and "validation"
    if getattr(cfg, "eval_split", "test") == "validation":
        ds = hold_out_validation(ds, cfg.val_fraction)
    return with_normalization(ds, getattr(cfg, "normalize", "dataset"))


DIGITS_MAX_SIZE = 128


@DATASETS.register("digits")
@dataclass(frozen=True, kw_only=True)
class Digits:
    """scikit-learn's 8×8 handwritten digits (1,797 images, 10 classes), upsampled to ``size``, 3
    channels.

    Fixed split: a stratified permutation with seed 0; the last ``test_fraction`` of each class is
    the test set. ``eval_split: validation`` scores on a held-out part of the train split instead
    (see ``hold_out_validation``).
    """

    version: ClassVar[str] = "1"
    hub_id: ClassVar[str | None] = None
    size: int = 16
    test_fraction: float = 0.2
    normalize: Normalize = "dataset"  # see NORMALIZATIONS
    eval_split: EvalSplit = "test"  # see EvalSplit
    # with eval_split "validation": the share of each class's train images held out
    val_fraction: float = 0.2

    def __post_init__(self) -> None:
        if not 8 <= self.size <= DIGITS_MAX_SIZE:
            # the 8-px images upsampled: 128 px already takes 1,797 x 128² x 3 bytes and a few float
            # copies while resizing; a record asking for 2048 px would take ~90 GB before failing
            raise ValueError(f"digits size must be in [8, {DIGITS_MAX_SIZE}], got {self.size}")
        if not 0 < self.test_fraction < 1:
            raise ValueError("test_fraction must be in (0, 1)")

    def available(self, root: Path) -> bool:
        return True

    def load(self, root: Path) -> DatasetSplits:
        import torch
        import torch.nn.functional as F
        from sklearn.datasets import load_digits

        bunch = load_digits()
        x = torch.as_tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0  # values 0..16
        if self.size != 8:
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        images = (x.clamp(0, 1) * 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
        labels = np.asarray(bunch.target, dtype=np.int64)
        tr, te = stratified_holdout(labels, self.test_fraction, seed=0)
        train = DatasetSplit(images[torch.as_tensor(tr)], labels[tr], 10)
        test = DatasetSplit(images[torch.as_tensor(te)], labels[te], 10)
        mean = tuple(float(v) for v in train.images.float().div(255).mean(dim=(0, 2, 3)))
        std = tuple(float(v) for v in train.images.float().div(255).std(dim=(0, 2, 3)))
        rev = content_revision(train.images, train.labels, test.images, test.labels)
        return DatasetSplits("digits", train, test, rev, mean, std)


@dataclass(frozen=True, kw_only=True)
class HubImageDataset:
    """An image-classification dataset from the HF hub, stored under ``<data_root>/<name>`` by
    ``prefetch``.

    The run never downloads: ``prefetch`` (on a machine with network) calls
    ``datasets.load_dataset`` and ``save_to_disk``; ``load`` reads that folder with
    ``load_from_disk`` and caches the decoded uint8 arrays.
    """

    version: ClassVar[str] = "1"
    name: ClassVar[str] = ""
    hub_id: ClassVar[str] = ""
    hub_revision: ClassVar[str | None] = None
    image_column: ClassVar[str] = "img"
    label_column: ClassVar[str] = "label"
    train_split: ClassVar[str] = "train"
    test_split: ClassVar[str] = "test"
    image_size: ClassVar[int] = 32
    mean: ClassVar[tuple[float, ...]] = (0.5, 0.5, 0.5)
    std: ClassVar[tuple[float, ...]] = (0.5, 0.5, 0.5)
    normalize: Normalize = "dataset"  # see NORMALIZATIONS
    eval_split: EvalSplit = "test"  # see EvalSplit
    # with eval_split "validation": the share of each class's train images held out
    val_fraction: float = 0.2
    # what `prefetch` downloads, about (the hub's file listing), said before it starts; None: not stated
    download_bytes: ClassVar[int | None] = None
    # a gated hub set: the licence accepted on its hub page and a Hugging Face login (token) needed
    gated: ClassVar[bool] = False

    def folder(self, root: Path) -> Path:
        return Path(root) / self.name

    def cache_path(self, root: Path) -> Path:
        return self.folder(root) / f"_fssl_uint8_{self.image_size}.npz"

    def available(self, root: Path) -> bool:
        """A saved hub set, or a complete decoded cache (a partial or foreign ``.npz`` does not
        count)."""
        saved = (self.folder(root) / "dataset_dict.json").exists()
        return saved or cache_complete(self.cache_path(root))

    def prefetch_hint(self, root: Path) -> str:
        return f"`python -m benchmark prefetch {self.name} --data-root {root}`"

    def how_to_get(self, root: Path) -> str:
        return (
            f"dataset {self.name!r} is not under {self.folder(root)}. Fetch it once on a machine with network: "
            f"{self.prefetch_hint(root)} (HF hub {self.hub_id}), "
            "or pass --data-root / set FSSL_DATA_ROOT to a folder that holds it."
        )

    def prefetch(self, root: Path) -> Path:
        import datasets

        ds = datasets.load_dataset(self.hub_id, revision=self.hub_revision)
        out = self.folder(root)
        ds.save_to_disk(str(out))
        return out

    def check_features(self, split: Any, root: Path) -> None:
        """One-line error naming the columns found when the stored set is not in the hub's
        format."""
        cols = set(split.column_names)
        want = {self.image_column, self.label_column}
        if not want <= cols:
            raise DatasetUnavailable(
                f"{self.name}: expected columns {sorted(want)} (hub {self.hub_id}), found "
                f"{sorted(cols)} under {self.folder(root)}; "
                f"re-fetch it: {self.prefetch_hint(root)}"
            )

    def square(self, img: Any) -> np.ndarray:
        """One decoded image as RGB uint8 (image_size, image_size, 3): resized (bicubic) when not
        that size."""
        arr = np.asarray(img.convert("RGB") if hasattr(img, "convert") else img, dtype=np.uint8)
        if arr.shape[0] != self.image_size or arr.shape[1] != self.image_size:
            from PIL import Image

            side = (self.image_size, self.image_size)
            arr = np.asarray(Image.fromarray(arr).resize(side, Image.BICUBIC))
        return arr

    def _decode(self, split: Any) -> tuple[np.ndarray, np.ndarray]:
        """uint8 N×3×S×S images and int64 labels, decoded DECODE_SLICE rows at a time into
        preallocated arrays.

        ``split[a:b]`` decodes only those rows in every ``datasets`` version; ``split[column]``
        decodes the whole column into a Python list before datasets 4.0 (tens of GB for
        ImageNet-100's full-size JPEGs)."""
        n, s = len(split), self.image_size
        x = np.empty((n, 3, s, s), dtype=np.uint8)
        y = np.empty(n, dtype=np.int64)
        part = split.select_columns([self.image_column, self.label_column])
        for lo in range(0, n, DECODE_SLICE):
            rows = part[lo : lo + DECODE_SLICE]
            for i, img in enumerate(rows[self.image_column], start=lo):
                x[i] = self.square(img).transpose(2, 0, 1)
                if hasattr(img, "close"):
                    img.close()  # frees the decoded pixels now, not when the slice is dropped
            y[lo : lo + len(rows[self.label_column])] = rows[self.label_column]
        return x, y

    def num_classes_of(self, split: Any) -> int:
        feature = split.features[self.label_column]
        return int(getattr(feature, "num_classes", 0) or 0)

    def validate(self, train_split: Any) -> None:
        """Dataset-specific checks on the stored train split (class count, class list)."""

    def _read_saved(self, root: Path) -> dict[str, np.ndarray]:
        import datasets

        folder = self.folder(root)
        dd = datasets.load_from_disk(str(folder))
        for split in (self.train_split, self.test_split):
            if split not in dd:
                raise DatasetUnavailable(
                    f"{self.name}: split {split!r} missing under {folder} (found {sorted(dd)}); "
                    f"re-fetch it: {self.prefetch_hint(root)}"
                )
            self.check_features(dd[split], root)
        self.validate(dd[self.train_split])
        xtr, ytr = self._decode(dd[self.train_split])
        xte, yte = self._decode(dd[self.test_split])
        num_classes = self.num_classes_of(dd[self.train_split]) or label_count(ytr, yte)
        return {
            "xtr": xtr,
            "ytr": ytr,
            "xte": xte,
            "yte": yte,
            "num_classes": np.int64(num_classes),
        }

    def load(self, root: Path) -> DatasetSplits:
        import torch

        if not self.available(root):
            raise DatasetUnavailable(self.how_to_get(root))
        cache = self.cache_path(root)
        if not cache_complete(cache):
            write_cache_atomically(cache, self._read_saved(root))
        # the images memory-mapped read-only from the cache: the cell processes of a machine share
        # one copy (benchmark.data.shared_arrays); the same bytes np.load reads
        arrays = load_npz_shared(cache)
        xtr, ytr, xte, yte = arrays["xtr"], arrays["ytr"], arrays["xte"], arrays["yte"]
        stored = arrays.get("num_classes")  # absent from caches written before the ClassLabel count
        num_classes = int(stored) if stored is not None else label_count(ytr, yte)
        ytr, yte = np.array(ytr), np.array(yte)  # labels are small: private, writable copies
        with warnings.catch_warnings():  # read-only on purpose: nothing writes a dataset's pixels
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            train = DatasetSplit(torch.from_numpy(xtr), ytr, num_classes)
            test = DatasetSplit(torch.from_numpy(xte), yte, num_classes)
        rev = self.hub_revision or content_revision(ytr, yte, xtr[:64])
        return DatasetSplits(self.name, train, test, rev, self.mean, self.std)


DECODE_SLICE = 64  # rows decoded at a time: peak memory is one slice of full-size images (P9)
CACHE_ARRAYS = ("xtr", "ytr", "xte", "yte")


def label_count(*labels: np.ndarray) -> int:
    return int(max(y.max() for y in labels)) + 1


def cache_complete(path: Path) -> bool:
    """True for a finished decoded cache: a readable zip that holds every array (a write cut short
    has no central directory, so it is not a zip)."""
    import zipfile

    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
    return all(f"{k}.npy" in names for k in CACHE_ARRAYS)


def write_cache_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write the .npz under a temporary name (not ``*.npz``) in the same folder, then rename it into
    place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a bare path
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@DATASETS.register("cifar10", aliases=("cifar-10",))
@dataclass(frozen=True, kw_only=True)
class CIFAR10(HubImageDataset):
    name: ClassVar[str] = "cifar10"
    hub_id: ClassVar[str] = "uoft-cs/cifar10"
    download_bytes: ClassVar[int | None] = 144_000_000
    mean: ClassVar[tuple[float, ...]] = (0.4914, 0.4822, 0.4465)
    std: ClassVar[tuple[float, ...]] = (0.2470, 0.2435, 0.2616)


@DATASETS.register("cifar100", aliases=("cifar-100",))
@dataclass(frozen=True, kw_only=True)
class CIFAR100(HubImageDataset):
    name: ClassVar[str] = "cifar100"
    hub_id: ClassVar[str] = "uoft-cs/cifar100"
    download_bytes: ClassVar[int | None] = 141_000_000
    label_column: ClassVar[str] = "fine_label"
    mean: ClassVar[tuple[float, ...]] = (0.5071, 0.4865, 0.4409)
    std: ClassVar[tuple[float, ...]] = (0.2673, 0.2564, 0.2762)


@DATASETS.register("stl10", aliases=("stl-10",))
@dataclass(frozen=True, kw_only=True)
class STL10(HubImageDataset):
    """STL-10 labelled splits at native 96×96: train (5,000; the 10 predefined folds and the 100,000
    unlabelled images unused) and test (8,000), docs/protocols/evaluation.md §3.6. Resizing to the
    encoder's resolution is the transfer card's business (``target_resolution``), not the loader's."""

    name: ClassVar[str] = "stl10"
    hub_id: ClassVar[str] = "tanganke/stl10"
    image_column: ClassVar[str] = "image"
    image_size: ClassVar[int] = 96
    mean: ClassVar[tuple[float, ...]] = (0.4467, 0.4398, 0.4066)
    std: ClassVar[tuple[float, ...]] = (0.2603, 0.2566, 0.2713)
