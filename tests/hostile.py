"""Helpers of the hostile-input tests (tests/benchmark/test_hostile_*.py): a real smoke record,
edited and sealed again with the project's own functions as an attacker would; bundles written
around it; and the CLI run that must refuse in one line (exit 2) with nothing written anywhere."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from benchmark.cli import main
from benchmark.records.identity import cell_id_of, pretrain_key_of
from benchmark.records.integrity import seal
from benchmark.records.schema import ResultRecord, to_json

TRACK = "digits-smoke-knn"


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root``; a file with its size and mtime (a folder's own mtime moves when a
    temporary folder is made and removed inside it: what matters is that none is left)."""
    return {
        str(p.relative_to(root)): (0, 0)
        if p.is_dir() and not p.is_symlink()
        else (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
    }


def reseal(record: ResultRecord, **changes: Any) -> ResultRecord:
    """``record`` with ``changes`` (``edit_cell`` edits the cell), ids recomputed, sealed again."""
    cell = json.loads(json.dumps(dict(record.cell)))
    edit_cell = changes.pop("edit_cell", None)
    if edit_cell is not None:
        edit_cell(cell)
    changed = dataclasses.replace(record, cell=cell, **changes)
    changed = dataclasses.replace(
        changed, cell_id=cell_id_of(cell), pretrain_key=pretrain_key_of(cell)
    )
    return seal(changed)


def renamed(record: ResultRecord, method: str) -> ResultRecord:
    def edit(cell: dict) -> None:
        cell["method"]["name"] = method

    return reseal(record, method=method, edit_cell=edit)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bundle_dir(
    where: Path,
    texts: dict[str, bytes | str],
    manifest: Any = None,
    *,
    track: str | None = TRACK,
    records: list[dict] | None = None,
) -> Path:
    """A bundle folder holding ``texts`` (relative path → content) and a manifest listing them (or
    ``manifest`` verbatim); every file whose name ends in record.json is a record entry."""
    where.mkdir(parents=True)
    files = {}
    for rel, text in texts.items():
        data = text.encode() if isinstance(text, str) else text
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_bytes(data)
        files[rel] = _sha(data)
    if manifest is None:
        entries = (
            records
            if records is not None
            else [
                {"path": rel, "cell_id": json.loads(texts[rel])["cell_id"], "checkpoint": None}
                for rel in texts
                if rel.endswith("record.json")
            ]
        )
        manifest = {"track": track, "files": files, "records": entries}
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (where / "manifest.json").write_text(text)
    return where


def one_record_bundle(where: Path, record: ResultRecord) -> Path:
    rel = f"records/x/{record.cell_id}/record.json"
    return bundle_dir(where, {rel: to_json(record)})


def refused(scratch: Path, capsys: pytest.CaptureFixture, argv: list[str], *needles: str) -> str:
    """Run the CLI: exit 2, one line on stderr holding every needle, nothing written anywhere."""
    capsys.readouterr()
    before = snapshot(scratch)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert snapshot(scratch) == before, "something was written"
    return lines[0]


def accept_argv(scratch: Path, bundle: Path, *extra: str) -> list[str]:
    return ["accept", str(bundle), "--results", str(scratch / "deep" / "er" / "results"), *extra]


def _tarball(path: Path, members: list[tuple[str, bytes | None, bytes]]) -> Path:
    """members: (name, data or None for a symlink, link target)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, target.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


# a W&B API that serves record files (collect --from wandb:...)
class _File:
    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text
        self.size = len(text.encode())  # what the W&B API announces before a download

    def download(self, root: str, replace: bool = False) -> None:
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / self.name).write_text(self.text)


class _Run:
    def __init__(self, run_id: str, text: str) -> None:
        self.id, self.state, self._text = run_id, "finished", text

    def files(self) -> list[_File]:
        return [_File("record.json", self._text)]


class _Api:
    def __init__(self, runs: list[_Run]) -> None:
        self._runs = runs

    def runs(self, path: str, filters: dict | None = None, per_page: int = 50) -> list[_Run]:
        return list(self._runs)
