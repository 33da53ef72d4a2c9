"""Reading a submission bundle someone else wrote: bounded extraction, a strict manifest, paths
confined to the bundle before any file is opened. ``accept`` and ``submit``'s ``verify_bundle`` both
read bundles through here.

Limits (``BundleLimits``, raised with ``accept --max-total-mb / --max-file-mb / --max-members``):
a tarball is read only by the project's own header walker (``benchmark.submission.tarscan``: a strict
subset of tar, PAX and GNU long-name headers bounded, files and folders counted): a first walk checks
every header before anything is extracted, the second writes, bounded again on every byte written
(``tarfile`` only writes bundles, in ``submit``). Only regular files are written from a tarball
(``submit`` writes nothing else), each to the path its checked name gives (``member_target``: never an absolute name, ``..`` or a path outside the scratch
folder); links and devices are refused, folders only counted. A refusal is a :class:`BundleError`
(a ``UsageError``: one line, exit 2) and the scratch folder is removed. Torch-free.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.core import bounded_json
from benchmark.core.canonical import bytes_sha256
from benchmark.core.errors import UsageError
from benchmark.core.terminal import printable
from benchmark.records.identity import cell_id_of
from benchmark.records.schema import SCHEMA_VERSION, RecordError
from benchmark.runroot.rundir import RunDir
from benchmark.submission.checks import RecordCheck, SubmitError, SubmitReport
from benchmark.submission.limits import DEFAULT_LIMITS, MB, BundleLimits

MANIFEST = "manifest.json"
SHA256_RE = re.compile(r"[0-9a-f]{64}")


class BundleError(UsageError):
    """A bundle refused before anything was re-run or written."""


# ------------------------------------------------------------------------------------------------
# opening


@contextmanager
def opened_bundle(bundle: Path, limits: BundleLimits = DEFAULT_LIMITS) -> Iterator[Path]:
    """The bundle's root folder: a folder as it is (after its files were counted against
    ``limits``), a tarball extracted into a temporary folder that is removed however the block ends
    (an exception, Ctrl-C, or SIGTERM turned into SystemExit by the CLI)."""
    bundle = Path(bundle)
    if not bundle.exists():
        raise BundleError(f"bundle {bundle} does not exist")
    if bundle.is_dir():
        _check_folder(bundle, limits)
        if not (bundle / MANIFEST).is_file():
            raise BundleError(
                f"{bundle} is not a submission bundle (no {MANIFEST}): make one with "
                "python -m benchmark submit"
            )
        yield bundle
        return
    tmp = Path(tempfile.mkdtemp(prefix="fssl-accept-"))
    try:
        extract(bundle, tmp, limits)
        if not (tmp / MANIFEST).is_file():
            raise BundleError(f"{bundle} is not a submission bundle (no {MANIFEST})")
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_folder(root: Path, limits: BundleLimits) -> None:
    """Every entry of the folder bundle ``root``, walked without recursion and without following
    links: regular files within the limits, folders at most ``limits.max_depth`` deep."""
    total = count = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    _check_depth(root, str(path.relative_to(root)), depth + 1, limits)
                    count += 1  # folders count against --max-members too (issue 44)
                    _check_sizes(root, str(path.relative_to(root)), 0, total, count, limits)
                    stack.append((path, depth + 1))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise BundleError(
                        f"{root}: {path.relative_to(root)} is not a regular file (links "
                        "and devices are refused)"
                    )
                count += 1
                size = entry.stat(follow_symlinks=False).st_size
                total += size
                _check_sizes(root, str(path.relative_to(root)), size, total, count, limits)


def _check_depth(bundle: Path, name: str, depth: int, limits: BundleLimits) -> None:
    if depth > limits.max_depth:
        raise BundleError(
            f"{bundle}: {name[:80]}... is more than {limits.max_depth} folders deep (a bundle "
            "written by submit is 6)"
        )


def _check_sizes(
    bundle: Path, name: str, size: int, total: int, count: int, limits: BundleLimits
) -> None:
    if count > limits.max_members:
        raise BundleError(
            f"{bundle}: more than {limits.max_members} files and folders (raise --max-members)"
        )
    if size > limits.max_file_bytes:
        raise BundleError(
            f"{bundle}: {name} holds {size:,} bytes, more than the "
            f"{limits.max_file_bytes // MB} MB a file may hold (raise --max-file-mb)"
        )
    if total > limits.max_total_bytes:
        raise BundleError(
            f"{bundle}: more than {limits.max_total_bytes // MB} MB uncompressed "
            "(raise --max-total-mb)"
        )


def extract(bundle: Path, dest: Path, limits: BundleLimits = DEFAULT_LIMITS) -> None:
    """Extract the regular files of the tarball ``bundle`` into ``dest`` through the project's own
    header walker (``benchmark.submission.tarscan``), the only reader of the archive: a first walk
    checks every header (the subset, ``limits``, each name's target under ``dest``) before the first
    byte is written; the second walk, the same code over the same bytes, writes each file to the
    path its checked name gives, stopping at the header's size and at the limits."""
    import lzma
    import zlib

    from benchmark.submission.tarscan import TarScanError, open_decompressed, walk

    try:
        for write in (False, True):  # check every header, then extract
            with open_decompressed(bundle) as stream:
                names: set[Path] = set()
                written = 0
                for member, data in walk(stream, limits):
                    target = _member_target(bundle, dest, member, limits)
                    if target is None:
                        continue  # a folder: counted, checked, not written
                    if target in names:
                        raise BundleError(
                            f"{bundle}: member '{printable(member.name)}' appears twice"
                        )
                    names.add(target)
                    if write:
                        written = _write_member(bundle, target, data, written, limits)
    except TarScanError as exc:
        raise BundleError(f"{bundle}: {exc}") from None
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise BundleError(
            f"{bundle} is not a submission bundle (a folder or a .tar.gz): "
            f"{type(exc).__name__}: {printable(str(exc))[:200]}"
        ) from None


def _member_target(bundle: Path, dest: Path, member: Any, limits: BundleLimits) -> Path | None:
    """Where a regular member goes under ``dest`` (None for a folder), checked: depth, name."""
    parts = len(Path(member.name).parts)
    _check_depth(bundle, member.name, parts if member.folder else parts - 1, limits)
    if member.folder:
        if member.name.strip("/") not in ("", "."):
            member_target(bundle, dest, member.name)
        return None
    return member_target(bundle, dest, member.name)  # absolute names, '..', outside dest


def _write_member(bundle: Path, target: Path, data: Any, written: int, limits: BundleLimits) -> int:
    """Write one member's data to ``target`` (a new file), counting against ``limits`` as it goes;
    the bytes written so far in the archive."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:
        for block in data.chunks():
            written += len(block)
            if written > limits.max_total_bytes:
                raise BundleError(
                    f"{bundle}: more than {limits.max_total_bytes // MB} MB uncompressed "
                    "(raise --max-total-mb)"
                )
            out.write(block)
    return written


def member_target(bundle: Path, dest: Path, name: str) -> Path:
    """Where the member ``name`` goes under ``dest``, refused (BundleError) unless it is a plain
    relative path that stays inside ``dest``: no leading ``/``, no ``..``, no backslash, NUL or
    control character, and nothing that resolves outside ``dest``. The archive's name is checked,
    never rewritten: ``tarfile.data_filter`` strips a leading ``/`` and returns a copy, and writing
    ``dest / member.name`` with the original name wrote to the absolute path (issue 44)."""
    shown = f"'{printable(name)}'"
    if not name or name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        raise BundleError(f"{bundle}: member {shown} refused: an absolute name")
    if "\\" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BundleError(f"{bundle}: member {shown} refused: a backslash or control character")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise BundleError(f"{bundle}: member {shown} refused: '..' or an empty name")
    target = dest.joinpath(*parts)
    root = dest.resolve()
    if not target.resolve().is_relative_to(root) or target.resolve() == root:
        raise BundleError(f"{bundle}: member {shown} refused: it resolves outside the bundle")
    return target


# ------------------------------------------------------------------------------------------------
# manifest


def read_manifest(root: Path, limits: BundleLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The manifest as a checked object: ``files`` maps relative paths to sha256s, ``records`` lists
    objects with a ``path``, a ``cell_id`` and a ``checkpoint`` (null, or path, sha256 and bytes).
    BundleError otherwise."""
    from benchmark.records.files import read_text_bounded
    from benchmark.records.record_error import RecordError

    try:
        raw = bounded_json.loads(read_text_bounded(root / MANIFEST, limits.max_manifest_bytes))
    except RecordError as exc:
        raise BundleError(f"{MANIFEST} unreadable: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BundleError(f"{MANIFEST} is not valid JSON: {exc}") from None
    except RecursionError:
        raise BundleError(f"{MANIFEST} is nested too deeply to be a manifest") from None
    if not isinstance(raw, dict):
        raise BundleError(f"{MANIFEST} must be an object, got {type(raw).__name__}")
    files = raw.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and SHA256_RE.fullmatch(v)
        for k, v in files.items()
    ):
        raise BundleError(f"{MANIFEST}: 'files' must map paths to sha256 hex digests")
    records = raw.get("records")
    if not isinstance(records, list) or not records:
        raise BundleError(f"{MANIFEST}: 'records' must be a non-empty list")
    if len(records) > limits.max_records:
        raise BundleError(f"{MANIFEST}: more than {limits.max_records} records")
    for i, entry in enumerate(records):
        _check_entry(i, entry)
    if raw.get("track") is not None and not isinstance(raw.get("track"), str):
        raise BundleError(f"{MANIFEST}: 'track' must be a track id")
    from benchmark.submission.plugin_sources import PluginSourceError, read_sources

    try:
        read_sources(raw)
    except PluginSourceError as exc:
        raise BundleError(f"{MANIFEST}: {exc}") from None
    return raw


def _check_entry(i: int, entry: Any) -> None:
    where = f"{MANIFEST}: records[{i}]"
    if not isinstance(entry, dict):
        raise BundleError(f"{where} must be an object, got {type(entry).__name__}")
    for key in ("path", "cell_id"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise BundleError(f"{where}.{key} must be a non-empty string")
    ckpt = entry.get("checkpoint")
    if ckpt is None:
        return
    if (
        not isinstance(ckpt, dict)
        or not isinstance(ckpt.get("path"), str)
        or not isinstance(ckpt.get("sha256"), str)
        or not SHA256_RE.fullmatch(ckpt["sha256"])
        or not isinstance(ckpt.get("bytes"), int)
        or isinstance(ckpt.get("bytes"), bool)
    ):
        raise BundleError(
            f"{where}.checkpoint must be null or an object with path, sha256 and bytes"
        )


def inside(root: Path, rel: Any) -> Path | None:
    """``root / rel`` when ``rel`` is a relative path that stays inside ``root`` and names a regular
    file there (checked before it is opened: a manifest cannot make accept read /dev/zero or
    /proc/self/environ)."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        return None
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts:
        return None
    path = root / rel
    try:
        if path.is_symlink() or not path.resolve().is_relative_to(root.resolve()):
            return None
        return path if stat.S_ISREG(path.lstat().st_mode) else None
    except OSError:
        return None


def bundle_problems(root: Path, manifest: Mapping[str, Any]) -> list[str]:
    """Problems of a received bundle: a manifest path that leaves it, missing or extra files, sha256
    mismatches. Every path is confined before any file is opened."""
    from benchmark.core.canonical import file_sha256

    files: Mapping[str, str] = manifest["files"]
    problems = []
    for rel in files:
        if inside(root, rel) is None and not _absent_inside(root, rel):
            problems.append(f"files: {rel!r} is not a file inside the bundle (refused, not read)")
    for i, entry in enumerate(manifest["records"]):
        for what, rel in (
            ("record", entry["path"]),
            ("checkpoint", (entry.get("checkpoint") or {}).get("path")),
        ):
            if rel is None:
                continue
            if rel not in files:
                problems.append(
                    f"records[{i}] {what} {rel!r} is not listed in the manifest's files"
                )
        ckpt = entry.get("checkpoint")
        if ckpt and files.get(ckpt["path"]) not in (None, ckpt["sha256"]):
            problems.append(
                f"records[{i}] checkpoint {ckpt['path']} has sha256 "
                f"{ckpt['sha256'][:12]}… in its entry and "
                f"{files[ckpt['path']][:12]}… in the manifest's files"
            )
    if problems:
        return problems
    for rel, digest in files.items():
        path = inside(root, rel)
        if path is None:
            problems.append(f"{rel} is missing")
        elif file_sha256(path) != digest:
            problems.append(f"{rel} does not match its sha256 in the manifest")
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {MANIFEST}
    problems += [f"{extra} is not in the manifest" for extra in sorted(present - set(files))]
    return problems


def _absent_inside(root: Path, rel: str) -> bool:
    """A relative path without '..' that names nothing yet (reported as missing, not as outside)."""
    return (
        isinstance(rel, str)
        and bool(rel)
        and not Path(rel).is_absolute()
        and ".." not in Path(rel).parts
        and "\\" not in rel
        and "\x00" not in rel
        and not os.path.lexists(root / rel)
    )


__all__ = [
    "DEFAULT_LIMITS",
    "MANIFEST",
    "BundleError",
    "BundleLimits",
    "bundle_problems",
    "extract",
    "inside",
    "opened_bundle",
    "read_manifest",
]


BUNDLE_VERSION = 1


BUNDLE_RECORDS = "records"  # the bundle's run root: records/<method>/<cell_id>/ as in a run root


def _bundle_files(check: RecordCheck) -> list[tuple[Path, str]]:
    """(source file, path inside the bundle) for one record: the record and the runner's
    sidecars."""
    assert check.record is not None
    r = check.record
    # a bundle is laid out as a run root
    inside = RunDir(Path(BUNDLE_RECORDS), r.method, r.cell_id, r.pretrain_key)
    files = [(check.path, str(inside.record_path))]
    rd = RunDir.from_record_file(check.path, r)
    if rd is not None:
        files += [
            (side, str(inside.cell_dir / side.relative_to(rd.cell_dir)))
            for side in rd.sidecar_files()
        ]
    return files


def _bundle_checkpoint(check: RecordCheck) -> tuple[Path, str] | None:
    """(source, path inside the bundle) of the encoder checkpoint the record's tasks need, when it
    has one."""
    if check.checkpoint is None or check.record is None:
        return None
    r = check.record
    inside = RunDir(Path(BUNDLE_RECORDS), r.method, r.cell_id, r.pretrain_key)
    return check.checkpoint, str(inside.pretrain.final)


def _manifest_reevaluation(report: SubmitReport) -> dict[str, Any]:
    from benchmark.records.acceptance_files import tolerance_for

    tasks = sorted({s.task for c in report.checks if c.record is not None for s in c.record.scores})
    return {
        "by_submitter": report.reevaluate,
        "note": (
            "the submitter re-ran every task of every record from its checkpoint (submit's default); the "
            "maintainers repeat it with python -m benchmark accept"
            if report.reevaluate
            else "NOT re-evaluated by the submitter (submit --no-reevaluate): the scores are the runner's own "
            "until the maintainers' python -m benchmark accept re-runs them"
        ),
        "tolerance": {t: tolerance_for(t) for t in tasks},
        "tolerance_rule": "absolute, per value, in the value's unit (percentage points for classification tasks)",
    }


def write_bundle(report: SubmitReport, out: Path) -> Path:
    """Write the records, their sidecars, the encoder checkpoints their tasks need and
    ``manifest.json`` (sha256 of every file, provenance and checkpoint of every record, whether the
    submitter re-evaluated, the total size)."""
    from benchmark.core.canonical import file_sha256
    from benchmark.records.env_info import collect_env

    tarball = out.name.endswith((".tar.gz", ".tgz"))
    if out.exists():
        raise SubmitError(f"{out} exists; bundles are never overwritten")
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "bundle"
        files: dict[str, str] = {}
        sizes: dict[str, int] = {}
        entries = []
        for c in report.checks:
            assert c.record is not None
            bundled = _bundle_files(c)
            for src, rel in bundled:
                data = src.read_bytes()
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                (stage / rel).write_bytes(data)
                files[rel], sizes[rel] = bytes_sha256(data), len(data)
            checkpoint = None
            ckpt = _bundle_checkpoint(c)
            if ckpt is not None:
                src, rel = ckpt
                if rel not in files:  # cells that differ only in their tasks share one pre-training
                    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, stage / rel)
                    files[rel], sizes[rel] = file_sha256(stage / rel), (stage / rel).stat().st_size
                checkpoint = {"path": rel, "bytes": sizes[rel], "sha256": files[rel]}
            entries.append(_manifest_entry(c, bundled[0][1], files, checkpoint))
        sources = _bundle_plugin_sources(report, stage, files, sizes)
        cards = _bundle_cards(report, stage, files, sizes)
        env = collect_env()
        ckpt_paths = {e["checkpoint"]["path"] for e in entries if e["checkpoint"]}
        manifest = {
            "bundle_version": BUNDLE_VERSION,
            "schema_version": SCHEMA_VERSION,
            "track": report.track.id if report.track else None,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "submitted_with": {
                "tool": "python -m benchmark submit",
                "git_sha": env.git_sha,
                "git_dirty": env.git_dirty,
            },
            "reevaluation": _manifest_reevaluation(report),
            "size": {
                "files_bytes": sum(sizes.values()),
                "checkpoint_bytes": sum(sizes[p] for p in ckpt_paths),
                "checkpoints": len(ckpt_paths),
            },
            "records": entries,
            "files": dict(sorted(files.items())),
        }
        if sources:
            manifest["plugin_sources"] = sources
        if cards:
            manifest["cards"] = cards
        (stage / "manifest.json").write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        report.bundle_bytes = _write_out(stage, out, tarball)
        report.checkpoint_bytes = manifest["size"]["checkpoint_bytes"]
        report.unpacked_bytes = manifest["size"]["files_bytes"]
    return out


def _bundle_plugin_sources(
    report: SubmitReport, stage: Path, files: dict[str, str], sizes: dict[str, int]
) -> list[dict[str, Any]]:
    """The manifest's ``plugin_sources``; each wheel copied to ``plugins/`` and listed in
    ``files``."""
    from benchmark.core.canonical import file_sha256

    out = []
    for source, wheel in report.plugin_sources:
        entry = source.to_json()
        if wheel is not None and source.wheel is not None:
            (stage / source.wheel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(wheel, stage / source.wheel)
            files[source.wheel] = entry["sha256"] = file_sha256(stage / source.wheel)
            sizes[source.wheel] = (stage / source.wheel).stat().st_size
        out.append(entry)
    return out


def _bundle_cards(
    report: SubmitReport, stage: Path, files: dict[str, str], sizes: dict[str, int]
) -> list[str]:
    """The manifest's ``cards``: the protocol card of every plugin task the records score, written to
    ``cards/<card_id>.card.json`` and listed in ``files`` (benchmark.submission.carried_cards)."""
    from benchmark.records.carried_card_format import card_path, card_text, plugin_cards

    out = []
    cards = plugin_cards(c.record for c in report.checks if c.record is not None)
    for card_id, card in sorted(cards.items()):
        rel = card_path(card_id)
        data = card_text(card).encode("utf-8")
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_bytes(data)
        files[rel], sizes[rel] = bytes_sha256(data), len(data)
        out.append(rel)
    return out


def _manifest_entry(
    c: RecordCheck, rel: str, files: dict[str, str], checkpoint: dict[str, Any] | None
) -> dict[str, Any]:
    """The manifest's entry of one checked record bundled at ``rel``."""
    r = c.record
    return {
        "cell_id": r.cell_id,
        "method": r.method,
        "method_version": r.method_version,
        "seed": r.seed,
        "dataset": r.dataset,
        "partition_label": r.partition_label,
        "partition_digest": r.partition_digest,
        "path": rel,
        "sha256": files[rel],
        "checkpoint": checkpoint,
        "provenance": {
            "runner": r.env.runner,
            "git_sha": r.env.git_sha,
            "git_dirty": r.env.git_dirty,
            "sealed": c.sealed,
            "reevaluated": c.reevaluated,
            "verified": c.verified,
        },
    }


def _write_out(stage: Path, out: Path, tarball: bool) -> int:
    """The staged bundle written to ``out`` (a .tar.gz, or a folder); its size in bytes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if tarball:
        tmp_out = out.with_name(f".{out.name}.tmp")
        with tarfile.open(tmp_out, "w:gz") as tar:
            for path in sorted(stage.rglob("*")):
                if path.is_file():
                    tar.add(path, arcname=str(path.relative_to(stage)))
        tmp_out.replace(out)
        return out.stat().st_size
    shutil.copytree(stage, out)
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def verify_bundle(bundle: Path, limits: Any = None) -> list[str]:
    """Problems with a bundle as received: a refused archive or manifest, paths that leave the
    bundle, missing or extra files, sha256 mismatches, unreadable records
    (``benchmark.submission.bundle``: bounded, confined before reading)."""
    from benchmark.records.files import read_record
    from benchmark.submission.bundle import (
        DEFAULT_LIMITS,
        BundleError,
        bundle_problems,
        inside,
        opened_bundle,
        read_manifest,
    )

    try:
        with opened_bundle(Path(bundle), limits or DEFAULT_LIMITS) as root:
            manifest = read_manifest(root, limits or DEFAULT_LIMITS)
            problems = bundle_problems(root, manifest)
            if problems:
                return problems
            for entry in manifest["records"]:
                path = inside(root, entry["path"])
                try:
                    r = read_record(path) if path is not None else None
                except RecordError as exc:
                    problems.append(f"record {entry['path']}: {exc}")
                    continue
                if r is None or cell_id_of(dict(r.cell)) != r.cell_id:
                    problems.append(f"record {entry['path']}: cell_id does not match its cell")
            return problems
    except BundleError as exc:
        return [str(exc)]
