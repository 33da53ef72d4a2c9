"""Hostile round 3 (issue 44): what a stranger's bundle, record, grid or plugin could still do, and
now cannot. Each case is built as the attacker built it, small and in memory where it can be; each
asserts the one-line refusal (exit 2) and that nothing was written anywhere (the scratch folder,
TMPDIR inside it, is the same before and after)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tests.hostile import TRACK, accept_argv, refused


@pytest.fixture(scope="module")
def honest_folder(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmark.submission.submit import submit

    out = tmp_path_factory.mktemp("bundles") / "honest"
    assert submit([run_root], track=TRACK, out=out, manifests=None, reevaluate=False).ok
    return out


def _tar_of(folder: Path, out: Path, extra: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """The genuine bundle ``folder`` as a .tar.gz, with ``extra`` members appended."""
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(folder)))
        for info, data in extra:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


# ---- 1. an absolute member name never becomes a write path ----------------------------------------
def test_a_member_with_an_absolute_name_is_refused_and_written_nowhere(
    honest_folder: Path, scratch: Path, capsys
) -> None:
    target = scratch / "site-packages" / "evil.pth"
    payload = b"import os; os.system('echo owned')\n"
    bundle = _tar_of(
        honest_folder, scratch / "abs.tar.gz", [(tarfile.TarInfo(str(target)), payload)]
    )
    refused(scratch, capsys, accept_argv(scratch, bundle), "absolute")
    assert not target.exists()
    assert not target.parent.exists()
