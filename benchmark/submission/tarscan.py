"""A tarball's headers read before ``tarfile`` reads them (issue 44): every 512-byte header block
of the decompressed stream, bounded before anything it announces is read.

``tarfile`` reads a PAX extended header or a GNU long name whole, whatever size its header states:
a 1.5 MB ``.tar.gz`` took 57 s and 4.7 GB, another ended in a ``MemoryError``. Here each header
block is parsed by hand, the way ``tarfile`` walks the stream (a regular member's data is skipped,
a folder's or a link's is not), and refused (``BundleError``: one line, exit 2) at the first of:

* a PAX header (``x``, ``g``) or a GNU long name or link (``L``, ``K``) over
  :data:`MAX_HEADER_BYTES`, or more than :data:`MAX_EXTENSIONS` of them before one member;
* a PAX record that changes a member's size or makes it sparse (``size``, ``GNU.sparse.*``:
  ``submit`` never writes one, and a size ``tarfile`` would read that this scan did not see could
  put the two walks out of step);
* more members, files and folders together, than ``--max-members``; a file over
  ``--max-file-mb``; files over ``--max-total-mb`` together;
* any member that is not a regular file or a folder (links, devices, FIFOs, sparse files);
* a header whose checksum is wrong, or a stream that ends inside a header or a member.

So the decompressed bytes this scan reads are bounded by the limits, whatever the archive claims.
Torch-free."""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
from pathlib import Path
from typing import IO, TYPE_CHECKING

from benchmark.core.terminal import printable

if TYPE_CHECKING:
    from benchmark.submission.limits import BundleLimits

BLOCK = 512
# a PAX record set or a GNU long name (submit writes a path and an mtime: ~200 bytes)
MAX_HEADER_BYTES = 8 * 1024
MAX_EXTENSIONS = 4  # x, g, L, K headers before one member (tarfile writes at most two)
REGULAR = (b"0", b"\0", b"7")  # tarfile: REGTYPE, AREGTYPE, CONTTYPE
FOLDER = b"5"
EXTENSIONS = {b"x": "PAX", b"g": "PAX global", b"L": "GNU long-name", b"K": "GNU long-link"}
PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")
CHUNK = 1 << 20


class TarScanError(ValueError):
    """Why a tarball is refused before ``tarfile`` reads it (bundle.py words it as a BundleError)."""


def open_decompressed(path: Path) -> IO[bytes]:
    """``path``'s bytes as ``tarfile.open(path, "r:*")`` reads them: gzip, bzip2, xz or plain."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.open(path, "rb")
    if magic.startswith(b"BZh"):
        return bz2.open(path, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def scan_tar(path: Path, limits: BundleLimits) -> int:
    """The number of members (files and folders) of the tarball ``path`` when every header is within
    ``limits``; TarScanError at the first that is not."""
    with open_decompressed(path) as stream:
        return _scan(stream, limits)


def _scan(stream: IO[bytes], limits: BundleLimits) -> int:
    members = total = extensions = 0
    long_name: str | None = None
    while True:
        block = stream.read(BLOCK)
        if not block or block == bytes(BLOCK):
            return members  # the end of the archive, as tarfile reads it
        if len(block) != BLOCK:
            raise TarScanError("the archive ends inside a header")
        kind, size = _header(block)
        if kind in EXTENSIONS:
            extensions += 1
            if size > MAX_HEADER_BYTES:
                raise TarScanError(
                    f"a {EXTENSIONS[kind]} header of {size:,} bytes (at most "
                    f"{MAX_HEADER_BYTES:,}: a name or a PAX record over that is refused unread)"
                )
            if extensions > MAX_EXTENSIONS:
                raise TarScanError(f"more than {MAX_EXTENSIONS} extended headers before one member")
            data = _read(stream, _padded(size), "a header")[:size]
            if kind in (b"x", b"g"):
                long_name = _pax_path(data) or long_name
            elif kind == b"L":
                long_name = data.split(b"\0", 1)[0].decode("utf-8", "replace")
            continue
        name = long_name or _ustar_name(block)
        extensions, long_name = 0, None
        members += 1
        if members > limits.max_members:
            raise TarScanError(
                f"more than {limits.max_members} files and folders (raise --max-members)"
            )
        if kind == FOLDER or (kind == b"\0" and name.endswith("/")):
            continue  # tarfile skips no data after a folder, whatever its size field says
        if kind not in REGULAR:
            raise TarScanError(
                f"member {name!r} is not a regular file (links, devices and sparse files are "
                "refused)"
            )
        total += size
        _sizes(name, size, total, limits)
        _skip(stream, _padded(size))


def _sizes(name: str, size: int, total: int, limits: BundleLimits) -> None:
    from benchmark.submission.limits import MB

    if size > limits.max_file_bytes:
        raise TarScanError(
            f"{printable(name)} holds {size:,} bytes, more than the {limits.max_file_bytes // MB} MB a file "
            "may hold (raise --max-file-mb)"
        )
    if total > limits.max_total_bytes:
        raise TarScanError(
            f"more than {limits.max_total_bytes // MB} MB uncompressed (raise --max-total-mb)"
        )


def _header(block: bytes) -> tuple[bytes, int]:
    """(type flag, size) of a header block whose checksum holds."""
    stored = _number(block[148:156])
    blanked = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(blanked)
    signed = sum(b - 256 if b > 127 else b for b in blanked)
    if stored not in (unsigned, signed):
        raise TarScanError("a header's checksum is wrong (not a tar archive, or a damaged one)")
    return block[156:157], _number(block[124:136])


def _number(field: bytes) -> int:
    """A header's number: octal text, or base-256 (GNU) when the first byte is 0x80; a negative
    base-256 number (0xff) is refused."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise TarScanError("a header holds a negative number")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarScanError("a header's number is not octal (not a tar archive)") from None


def _ustar_name(block: bytes) -> str:
    name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
    if block[257:263] == b"ustar\0":  # POSIX: the prefix field (GNU's magic uses it otherwise)
        prefix = block[345:500].split(b"\0", 1)[0].decode("utf-8", "replace")
        if prefix:
            name = f"{prefix}/{name}"
    return name


def _pax_path(data: bytes) -> str | None:
    """The ``path`` of a PAX record set, walked record by record as ``tarfile`` walks it; a record
    that would change a member's size or make it sparse is refused."""
    pos, path = 0, None
    while match := PAX_RECORD.match(data, pos):
        length, keyword = int(match.group(1)), match.group(2)
        if length == 0:
            raise TarScanError("a PAX record of length 0 (not a tar archive)")
        if keyword == b"size" or keyword.startswith(b"GNU.sparse."):
            raise TarScanError(
                f"a PAX record sets {keyword.decode('ascii', 'replace')!r} (submit never writes "
                "one; refused)"
            )
        if keyword == b"path":
            path = data[match.end(2) + 1 : match.start(1) + length - 1].decode("utf-8", "replace")
        pos += length
    return path


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _read(stream: IO[bytes], n: int, what: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise TarScanError(f"the archive ends inside {what}")
    return data


def _skip(stream: IO[bytes], n: int) -> None:
    while n > 0:
        got = len(stream.read(min(n, CHUNK)))
        if got == 0:
            raise TarScanError("the archive ends inside a member")
        n -= got


__all__ = ["MAX_HEADER_BYTES", "TarScanError", "open_decompressed", "scan_tar"]
