"""A decoded dataset cache read as read-only memory maps, so that the cell processes of one machine
share one copy of a dataset's pixels in the page cache instead of holding one each (ImageNet-100 at
224 px is about 19 GB of uint8: six private copies fill a 128 GB machine).

The cache is the uncompressed ``.npz`` ``HubImageDataset.load`` writes once (``np.savez``: each
array is a stored, not deflated, ``.npy`` member of the zip, contiguous in the file). Each member is
mapped in place: its data offset is the zip's local header, then the ``.npy`` header, and
``np.memmap(mode="r")`` maps the bytes after it. Nothing is copied and nothing is written: the arrays
are the very bytes ``np.load`` would read, in the same order (tests/benchmark/data/
test_shared_arrays.py compares them), so every number a cell computes is unchanged. A member that
cannot be mapped (compressed, an object array, a scalar) is read the ordinary way.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # the zip's local file header, 30 bytes
_LOCAL_MAGIC = 0x04034B50


def _member_offset(fh, info: zipfile.ZipInfo) -> int:
    """Where the bytes of a stored zip member start in the file."""
    fh.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
    if fields[0] != _LOCAL_MAGIC:
        raise ValueError(f"{info.filename}: not a zip local header")
    name_len, extra_len = fields[9], fields[10]
    return info.header_offset + _LOCAL_HEADER.size + name_len + extra_len


def _mapped(path: Path, fh, info: zipfile.ZipInfo) -> np.ndarray | None:
    """The member as a read-only memory map, or None when it cannot be mapped."""
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    fh.seek(_member_offset(fh, info))
    version = np.lib.format.read_magic(fh)
    read_header = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }.get(version)
    if read_header is None:
        return None
    shape, fortran, dtype = read_header(fh)
    if dtype.hasobject or not shape or 0 in shape:
        return None
    order = "F" if fortran else "C"
    return np.memmap(path, dtype=dtype, mode="r", offset=fh.tell(), shape=shape, order=order)


def load_npz_shared(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an ``np.savez`` file: the stored ones memory-mapped read-only, the rest read
    (the same values ``np.load(path)`` gives)."""
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as z, path.open("rb") as fh:
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[: -len(".npy")]
            arr = _mapped(path, fh, info)
            if arr is None:
                with z.open(info) as member:
                    arr = np.lib.format.read_array(member, allow_pickle=False)
            out[name] = arr
    return out


def is_shared(arr: np.ndarray) -> bool:
    """Whether ``arr`` (or the array it views) is a read-only memory map."""
    base = arr
    while base is not None:
        if isinstance(base, np.memmap):
            return not base.flags.writeable
        base = getattr(base, "base", None)
    return False


__all__ = ["is_shared", "load_npz_shared"]
