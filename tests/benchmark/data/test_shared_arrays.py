"""A hub dataset's decoded cache is read as read-only memory maps (one copy per machine, shared by
the cell processes), holding exactly the arrays ``np.load`` gives, in the same order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.contracts.registries import DATASETS, load_builtins
from benchmark.data import datasets as ds_mod
from benchmark.data.shared_arrays import is_shared, load_npz_shared

pytest.importorskip("datasets")
load_builtins()


def test_every_array_of_an_npz_is_mapped_read_only_with_np_loads_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "xtr": rng.integers(0, 256, (7, 3, 5, 5), dtype=np.uint8),
        "ytr": rng.integers(0, 10, 7).astype(np.int64),
        "fortran": np.asfortranarray(rng.standard_normal((4, 3))),
        "num_classes": np.int64(10),
    }
    path = tmp_path / "c.npz"
    ds_mod.write_cache_atomically(path, arrays)
    got = load_npz_shared(path)
    with np.load(path) as z:
        want = {k: z[k] for k in z.files}
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        assert np.array_equal(got[k], want[k]), k
    assert is_shared(got["xtr"]) and is_shared(got["ytr"]) and is_shared(got["fortran"])
    assert not got["xtr"].flags.writeable
    assert int(got["num_classes"]) == 10  # a scalar is read, not mapped


def test_a_hub_dataset_loads_memory_mapped_with_the_same_numbers(tmp_path: Path) -> None:
    from benchmark.data.hub_formats import write_hub_dataset

    write_hub_dataset("cifar10", tmp_path, train=40, test=12)
    cfg = DATASETS.get("cifar10")()
    first = cfg.load(tmp_path)  # decodes and writes the cache, then maps it
    cache = cfg.cache_path(tmp_path)
    assert cache.is_file()
    second = cfg.load(tmp_path)
    with np.load(cache) as z:
        for split, x, y in ((second.train, "xtr", "ytr"), (second.test, "xte", "yte")):
            assert torch.equal(split.images, torch.from_numpy(z[x]))
            assert np.array_equal(split.labels, z[y]) and split.labels.flags.writeable
    assert torch.equal(first.train.images, second.train.images)
    assert first.revision == second.revision
    # the pixels are the cache file's pages, not a private copy: a byte changed in the file shows
    # through every loaded split at once (any system), and where the process's mappings can be
    # read (Linux), they are the cache file's, mapped read-only
    offset = load_npz_shared(cache)["xtr"].offset
    with cache.open("r+b") as fh:
        fh.seek(offset)
        was = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([was ^ 0xFF]))
        fh.flush()
        try:
            for split in (first.train, second.train):
                assert int(split.images.flatten()[0]) == was ^ 0xFF
        finally:
            fh.seek(offset)
            fh.write(bytes([was]))
    assert int(second.train.images.flatten()[0]) == was
    for split in (first.train, second.train, second.test):
        mapping = _mapping_of(split.images.data_ptr())
        assert mapping in (None, (str(cache.resolve()), "r")), mapping


def _mapping_of(address: int) -> tuple[str, str] | None:
    """(file, r or rw) of the memory mapping of this process that holds ``address``; None where
    the mappings cannot be read (no /proc/self/maps: not Linux)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return None
    for line in maps.read_text().splitlines():
        parts = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in parts[0].split("-"))
        if lo <= address < hi:
            path = parts[5] if len(parts) == 6 else ""
            return path, "rw" if "w" in parts[1] else "r"
    return ("", "not mapped")
