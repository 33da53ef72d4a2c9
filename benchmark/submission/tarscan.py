"""The one reader of a bundle's tarball (issues 44 and 52): every 512-byte header block of the
decompressed stream parsed here, bounded before anything it announces is read, and the same walk
both checks the archive and extracts it, so the bytes checked are the bytes written.

``tarfile`` used to extract what this module had only scanned, and the two disagreed on where a
member ends: a GNU long name ending in ``/`` in front of an old-style (AREGTYPE) header was a folder
to the scan and a file to ``tarfile``, which then read a 1 GB long name hidden behind it (307 s,
3.75 GB, a ``MemoryError``); the ustar prefix field and the reverse case did the same. Now nothing
else reads the archive, and anything outside a strict subset is refused (``TarScanError``: one
line, exit 2), during a first walk over every header, before a byte is written:

* headers: a valid checksum and the ustar magic (POSIX ``ustar\\0`` + ``00``, or GNU's
  ``ustar  \\0``); sizes in octal text (a base-256 number is refused: no bundle file is 8 GB);
* members: regular files (``0``, or ``\\0``) and folders (``5``, holding no data) only; a regular
  file whose name ends in ``/`` is refused (``tarfile`` would take it for a folder), and so are
  links, devices, FIFOs, contiguous and sparse files and every other type;
* names: UTF-8, at most :data:`MAX_NAME_BYTES` bytes, taken from exactly one place: the header's
  name (with the ustar prefix field under the POSIX magic), or one PAX ``path`` record, or one GNU
  long name (``L``) — two of them for one member, or an extended name beside a prefix field, is
  refused (which one would win is what the attacks exploited);
* extended headers: a PAX header (``x``) or a GNU long name (``L``) over :data:`MAX_HEADER_BYTES`,
  more than :data:`MAX_EXTENSIONS` of them before one member, one that no member follows, a PAX
  global header (``g``) or GNU long link (``K``); a PAX record other than :data:`PAX_KEYWORDS`
  (``size``, ``GNU.sparse.*``, ``linkpath``... are refused), or a malformed one;
* more members, files and folders together, than ``--max-members``; a file over ``--max-file-mb``;
  files over ``--max-total-mb`` together; a stream that ends inside a header or a member.

The archive ends at its first all-zero block, as ``tarfile`` reads it. So the decompressed bytes
read are bounded by the limits, whatever the archive claims. Torch-free."""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from benchmark.core.terminal import printable

if TYPE_CHECKING:
    from benchmark.submission.limits import BundleLimits

BLOCK = 512
# a PAX record set or a GNU long name (submit writes a path and an mtime: ~200 bytes)
MAX_HEADER_BYTES = 8 * 1024
MAX_EXTENSIONS = 2  # x and L headers before one member (tarfile writes at most one)
MAX_NAME_BYTES = 1024  # a member's name (submit writes ~110 bytes)
REGULAR = (b"0", b"\0")  # REGTYPE, AREGTYPE
FOLDER = b"5"
EXTENSIONS = {b"x": "PAX", b"L": "GNU long-name"}
REFUSED_TYPES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
    b"7": "a contiguous file",
    b"g": "a PAX global header",
    b"K": "a GNU long link",
    b"S": "a sparse file",
}
# what tarfile writes in a PAX header, and GNU tar's times: nothing that changes a member's size,
# type, link or sparseness
PAX_KEYWORDS = frozenset(
    {"path", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname", "hdrcharset"}
)
PAX_RECORD = re.compile(rb"([1-9][0-9]{0,4}) ")
MAGICS = (b"ustar\x0000", b"ustar  \x00")
CHUNK = 1 << 20


class TarScanError(ValueError):
    """Why a tarball is refused (bundle.py words it as a BundleError)."""


@dataclass(frozen=True)
class TarMember:
    """One member as this walk reads it: ``name`` (checked UTF-8 text), folder or regular file, and
    the number of data bytes that follow its header."""

    name: str
    folder: bool
    size: int


def open_decompressed(path: Path) -> IO[bytes]:
    """``path``'s bytes, decompressed: gzip, bzip2, xz or plain."""
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
    """The number of members (files and folders) of the tarball ``path`` when every header is
    within the subset and ``limits``; TarScanError at the first that is not. Data is skipped."""
    with open_decompressed(path) as stream:
        return sum(1 for _ in walk(stream, limits))


def walk(stream: IO[bytes], limits: BundleLimits) -> Iterator[tuple[TarMember, MemberData]]:
    """Every member of the tar ``stream``, checked header by header, with a reader of its data;
    whatever of its data the caller leaves unread is skipped before the next header is read."""
    members = total = 0
    while True:
        member = _next_member(stream)
        if member is None:
            return
        members += 1
        if members > limits.max_members:
            raise TarScanError(
                f"more than {limits.max_members} files and folders (raise --max-members)"
            )
        if not member.folder:
            total += member.size
            _sizes(member.name, member.size, total, limits)
        reader = MemberData(stream, member)
        yield member, reader
        _skip(stream, reader.left)
        _skip(stream, _padded(member.size) - member.size)


class MemberData:
    """The data of the member :func:`walk` just yielded: never more than its header's size."""

    def __init__(self, stream: IO[bytes], member: TarMember) -> None:
        self.stream, self.member, self.left = stream, member, member.size

    def chunks(self) -> Iterator[bytes]:
        """The data in chunks of at most 1 MB; TarScanError when the archive ends before the
        header's size."""
        while self.left > 0:
            block = self.stream.read(min(self.left, CHUNK))
            if not block:
                raise TarScanError(f"{_shown(self.member.name)} is shorter than its header says")
            self.left -= len(block)
            yield block


def _next_member(stream: IO[bytes]) -> TarMember | None:
    """The next member's header, its extended headers consumed; None at the end of the archive."""
    extended: str | None = None
    extensions = 0
    while True:
        block = stream.read(BLOCK)
        if not block or block == bytes(BLOCK):
            if extensions:
                raise TarScanError("an extended header with no member after it")
            return None  # the end of the archive, as tarfile reads it
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
            name = _pax_path(data) if kind == b"x" else _long_name(data)
            if name is not None:
                if extended is not None:
                    raise TarScanError("two extended names for one member (refused: ambiguous)")
                extended = name
            continue
        return _member(block, kind, size, extended)


def _member(block: bytes, kind: bytes, size: int, extended: str | None) -> TarMember:
    own = _ustar_name(block, extended is not None)
    name = extended if extended is not None else own
    if kind in REFUSED_TYPES or (kind not in REGULAR and kind != FOLDER):
        what = REFUSED_TYPES.get(kind, f"of type {kind!r}")
        raise TarScanError(
            f"member {_shown(name)} is not a regular file ({what}: links, devices and sparse "
            "files are refused)"
        )
    if kind == FOLDER:
        if size:
            raise TarScanError(f"folder {_shown(name)} announces {size:,} bytes of data")
        return TarMember(name, True, 0)
    if name.endswith("/") or own.endswith("/"):
        raise TarScanError(
            f"member {_shown(name)} is a regular file whose name ends in '/' (refused: a reader "
            "could take it for a folder)"
        )
    return TarMember(name, False, size)


def _sizes(name: str, size: int, total: int, limits: BundleLimits) -> None:
    from benchmark.submission.limits import MB

    if size > limits.max_file_bytes:
        raise TarScanError(
            f"{_shown(name)[1:-1]} holds {size:,} bytes, more than the {limits.max_file_bytes // MB} MB a "
            "file may hold (raise --max-file-mb)"
        )
    if total > limits.max_total_bytes:
        raise TarScanError(
            f"more than {limits.max_total_bytes // MB} MB uncompressed (raise --max-total-mb)"
        )


def _header(block: bytes) -> tuple[bytes, int]:
    """(type flag, size) of a header block whose checksum holds and that carries the ustar magic."""
    stored = _number(block[148:156], "checksum")
    blanked = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(blanked)
    signed = sum(b - 256 if b > 127 else b for b in blanked)
    if stored not in (unsigned, signed):
        raise TarScanError("a header's checksum is wrong (not a tar archive, or a damaged one)")
    if block[257:265] not in MAGICS:
        raise TarScanError(
            "a header without the ustar magic (an old-style tar header: refused; submit writes "
            "POSIX tar)"
        )
    return block[156:157], _number(block[124:136], "size")


def _number(field: bytes, what: str) -> int:
    """A header's number: octal text (digits, padded with spaces or NULs); a base-256 number (GNU's
    encoding of values over 8 GB) is refused."""
    if field[:1] in (b"\x80", b"\xff"):
        raise TarScanError(f"a header's {what} is a base-256 number (refused: no file is 8 GB)")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not re.fullmatch(rb"[0-7]*", text):
        raise TarScanError(f"a header's {what} is not octal (not a tar archive)")
    return int(text, 8) if text else 0


def _text(raw: bytes, what: str) -> str:
    if len(raw) > MAX_NAME_BYTES:
        raise TarScanError(f"{what} of {len(raw):,} bytes (at most {MAX_NAME_BYTES:,})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TarScanError(
            f"{what} is not UTF-8: {_shown(raw.decode('utf-8', 'backslashreplace'))}"
        ) from None


def _ustar_name(block: bytes, extended: bool) -> str:
    name = _text(block[:100].split(b"\0", 1)[0], "a member name")
    prefix = block[345:500].split(b"\0", 1)[0] if block[257:265] == MAGICS[0] else b""
    if prefix:  # POSIX: the prefix field (GNU's magic uses those bytes otherwise)
        if extended:
            raise TarScanError(
                "a member with both an extended name and a ustar prefix (refused: ambiguous)"
            )
        name = f"{_text(prefix, 'a ustar prefix')}/{name}"
    return name


def _long_name(data: bytes) -> str:
    return _text(data.split(b"\0", 1)[0], "a GNU long name")


def _pax_path(data: bytes) -> str | None:
    """The ``path`` of a PAX record set (``"<length> <keyword>=<value>\\n"`` records, end to end);
    a record outside :data:`PAX_KEYWORDS`, a malformed one, or two ``path`` records are refused."""
    pos, path = 0, None
    while pos < len(data):
        match = PAX_RECORD.match(data, pos)
        end = pos + int(match.group(1)) if match else 0
        record = data[match.end() : end] if match else b""
        if not match or end > len(data) or not record.endswith(b"\n") or b"=" not in record:
            if not data[pos:].strip(b"\0"):
                break  # the padding after the last record
            raise TarScanError("a malformed PAX record (not a tar archive)")
        keyword, value = record[:-1].split(b"=", 1)
        name = keyword.decode("ascii", "replace")
        if name not in PAX_KEYWORDS:
            raise TarScanError(
                f"a PAX record sets {printable(name[:40])!r} (only {', '.join(sorted(PAX_KEYWORDS))} "
                "are read: a size, link or sparse map submit never writes is refused)"
            )
        if name == "path":
            if path is not None:
                raise TarScanError("two PAX path records for one member (refused: ambiguous)")
            path = _text(value, "a PAX path")
        pos = end
    return path


def _shown(name: str) -> str:
    """A name from the archive as a refusal prints it: escaped, and cut at 120 characters."""
    cut = f"{name[:120]}… ({len(name):,} characters)" if len(name) > 120 else name
    return f"'{printable(cut)}'"


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


__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_NAME_BYTES",
    "MemberData",
    "TarMember",
    "TarScanError",
    "open_decompressed",
    "scan_tar",
    "walk",
]
