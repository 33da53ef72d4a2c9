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
    from benchmark.submission.submit_records import submit

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


# ---- 2-4. headers bounded before tarfile reads them; folders counted ------------------------------
def _raw_header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.USTAR_FORMAT)


def _header_bomb(path: Path, kind: bytes, size: int) -> Path:
    """A .tar.gz whose first header announces ``size`` bytes of PAX records or long name (zeros,
    a few kB compressed), then one small member: built in memory, level 1."""
    import gzip

    body = _raw_header("././@bomb", kind, size) + bytes(-(-size // 512) * 512)
    body += _raw_header("manifest.json", tarfile.REGTYPE, 2) + b"{}".ljust(512, b"\0")
    path.write_bytes(gzip.compress(body + bytes(1024), compresslevel=1))
    return path


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (tarfile.XHDTYPE, "a PAX header of 8,388,608 bytes"),
        (tarfile.GNUTYPE_LONGNAME, "a GNU long-name header of 8,388,608 bytes"),
    ],
)
def test_an_extended_header_bomb_is_refused_before_it_is_read(
    scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch, kind: bytes, words: str
) -> None:
    bomb = _header_bomb(scratch / "bomb.tar.gz", kind, 8 << 20)
    assert bomb.stat().st_size < 64 << 10
    opened = []
    monkeypatch.setattr(tarfile, "open", lambda *a, **k: opened.append(a) or 1 / 0)
    refused(scratch, capsys, accept_argv(scratch, bomb), words, "refused unread")
    assert not opened, "tarfile read the archive before its headers were bounded"


def test_a_pax_record_that_resizes_a_member_is_refused(scratch: Path, capsys) -> None:
    import gzip

    records = b"16 size=9999999\n"
    body = _raw_header("././@PaxHeader", tarfile.XHDTYPE, len(records)) + records.ljust(512, b"\0")
    body += _raw_header("manifest.json", tarfile.REGTYPE, 2) + b"{}".ljust(512, b"\0")
    bundle = scratch / "size.tar.gz"
    bundle.write_bytes(gzip.compress(body + bytes(1024)))
    refused(scratch, capsys, accept_argv(scratch, bundle), "a PAX record sets 'size'")


def test_folders_count_against_the_member_limit_in_a_tarball(scratch: Path, capsys) -> None:
    with tarfile.open(scratch / "dirs.tar.gz", "w:gz") as tar:
        for i in range(20):
            info = tarfile.TarInfo(f"d{i}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    refused(
        scratch,
        capsys,
        accept_argv(scratch, scratch / "dirs.tar.gz", "--max-members", "10"),
        "more than 10 files and folders",
    )


def test_folders_count_against_the_member_limit_in_a_folder_bundle(scratch: Path, capsys) -> None:
    folder = scratch / "b"
    for i in range(20):
        (folder / f"d{i}").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    refused(
        scratch,
        capsys,
        accept_argv(scratch, folder, "--max-members", "10"),
        "more than 10 files and folders",
    )


def test_a_gnu_tar_bundle_with_long_names_still_reads(honest_folder: Path, tmp_path: Path) -> None:
    """The scan walks what tarfile and GNU tar write: PAX and GNU long names, folders, ./ prefixes."""
    import shutil

    from benchmark.submission.bundle import BundleLimits, extract
    from benchmark.submission.tarscan import scan_tar

    files = sorted(p for p in honest_folder.rglob("*") if p.is_file())
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        out = tmp_path / f"b{fmt}.tar.gz"
        with tarfile.open(out, "w:gz", format=fmt) as tar:
            tar.add(honest_folder, arcname=".")  # folders and ./ prefixes, as `tar -C b .` writes
            long = "x" * 150 + "/" + "y" * 120
            info = tarfile.TarInfo(long)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"z"))
        assert scan_tar(out, BundleLimits()) > len(files)
        dest = tmp_path / f"out{fmt}"
        dest.mkdir()
        extract(out, dest)
        assert (dest / long).read_bytes() == b"z"
        for f in files:
            assert (dest / f.relative_to(honest_folder)).read_bytes() == f.read_bytes()
        shutil.rmtree(dest)


# ---- 13-14. grid files bounded before they are parsed ----------------------------------------------
def _grid_argv(command: str, grid: Path, scratch: Path) -> list[str]:
    if command == "plan":
        return ["plan", "--grid", str(grid)]
    if command == "run":
        return ["run", "--grid", str(grid), "--root", str(scratch / "runs"), "--device", "cpu"]
    return ["verify", "--grid", str(grid), "--device", "cpu"]


@pytest.mark.parametrize("command", ["plan", "run", "verify"])
def test_a_grid_nested_50000_deep_is_refused_in_one_line(
    scratch: Path, capsys, command: str
) -> None:
    grid = scratch / "deep.yaml"
    grid.write_text("name: deep\nbase: " + "[" * 50_000 + "]" * 50_000 + "\n")
    refused(scratch, capsys, _grid_argv(command, grid, scratch), "nested more than 64 levels")


@pytest.mark.parametrize("command", ["plan", "run", "verify"])
def test_a_grid_that_links_to_a_device_is_refused_unread(
    scratch: Path, capsys, command: str
) -> None:
    grid = scratch / "zero.yaml"
    grid.symlink_to("/dev/zero")
    refused(scratch, capsys, _grid_argv(command, grid, scratch), "is not a regular file")


def test_a_grid_over_its_size_cap_is_refused_unread(scratch: Path, capsys) -> None:
    from benchmark.grids.expand import MAX_GRID_BYTES

    grid = scratch / "big.yaml"
    with grid.open("w") as f:  # a sparse file: its size, not its bytes, is what is checked
        f.write("name: big\ndescription: x\n")
        f.truncate(MAX_GRID_BYTES + 1)
    refused(scratch, capsys, ["plan", "--grid", str(grid)], "more than the 1,048,576")


# ---- 12. racing accepts; temporaries a killed accept left ----------------------------------------
def test_the_loser_of_two_racing_accepts_gets_one_line(
    honest_folder: Path, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other accept writes the same record between this one's checks and its writes."""
    from benchmark.cli import main
    from benchmark.records import files

    real = files.write_new_files

    def racing(todo):  # the winner's record lands first
        path, _ = todo[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the winner's\n")
        return real(todo)

    monkeypatch.setattr(files, "write_new_files", racing)
    capsys.readouterr()
    code = main(accept_argv(scratch, honest_folder))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "won the race" in err
    results = scratch / "deep" / "er" / "results"
    assert [p.read_text() for p in results.rglob("*") if p.is_file()] == ["the winner's\n"]


def test_a_stale_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    import os
    import time

    from benchmark.records.files import STALE_TEMPORARY_S, write_new_files

    target = tmp_path / "r" / "abc.json"
    target.parent.mkdir()
    stale = target.parent / ".abc.json.k1ll3d.tmp"
    live = target.parent / ".abc.json.wr1t1ng.tmp"
    other = target.parent / ".other.json.k1ll3d.tmp"
    for p in (stale, live, other):
        p.write_text("half")
    old = time.time() - STALE_TEMPORARY_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    assert write_new_files([(target, "{}")]) == [target]
    assert not stale.exists()
    assert live.exists() and other.exists()  # a live writer's, and another file's


# ---- 7-8. one checkpoint posing as several trainings; versions that do not exist -------------------
def _with_records(honest_folder: Path, where: Path, records: list) -> Path:
    """A copy of the genuine bundle whose first record is replaced by ``records[0]`` and which lists
    the others too, each with the genuine checkpoint; every sha256 recomputed."""
    import json
    import shutil

    from benchmark.records.schema import to_json
    from tests.hostile import _sha

    shutil.copytree(honest_folder, where)
    manifest = json.loads((where / "manifest.json").read_text())
    first = manifest["records"][0]
    entries = []
    for i, record in enumerate(records):
        rel = first["path"] if i == 0 else first["path"].replace("record.json", f"r{i}.json")
        (where / rel).write_text(to_json(record))
        manifest["files"][rel] = _sha((where / rel).read_bytes())
        entries.append(
            {**first, "path": rel, "cell_id": record.cell_id, "sha256": manifest["files"][rel]}
        )
    manifest["records"] = entries
    (where / "manifest.json").write_text(json.dumps(manifest))
    return where


def _seed(value: int):
    def edit(cell: dict) -> None:
        cell["seed"] = value

    return edit


def test_one_checkpoint_posing_as_another_seed_is_refused(
    honest_folder: Path, honest, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmark.test_hostile_records import forbid_rerunning
    from tests.hostile import reseal

    forbid_rerunning(monkeypatch)
    relabelled = reseal(honest, seed=1, edit_cell=_seed(1))
    bundle = _with_records(honest_folder, scratch / "b", [honest, relabelled])
    refused(scratch, capsys, accept_argv(scratch, bundle), "share one checkpoint", "cannot be two")


def test_a_row_never_counts_one_checkpoint_twice(honest) -> None:
    import dataclasses

    from leaderboard.loading import one_checkpoint_once
    from tests.hostile import reseal

    relabelled = reseal(honest, seed=1, edit_cell=_seed(1))
    other_run = dataclasses.replace(
        reseal(honest, seed=2, edit_cell=_seed(2)), final_state_digest="f" * 64
    )
    kept = one_checkpoint_once(
        [(Path("a"), relabelled), (Path("b"), honest), (Path("c"), other_run)]
    )
    assert [p.name for p, _ in kept] == ["b", "c"]


def test_a_task_version_that_does_not_exist_is_refused(
    honest_folder: Path, honest, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmark.test_hostile_records import forbid_rerunning
    from tests.hostile import reseal

    forbid_rerunning(monkeypatch)

    def edit(cell: dict) -> None:
        cell["tasks"][0]["version"] = "2"

    bundle = _with_records(honest_folder, scratch / "b", [reseal(honest, edit_cell=edit)])
    refused(scratch, capsys, accept_argv(scratch, bundle), "cell.tasks[0] 'knn' version '2' is not")


# ---- 9-11. plugins: where a class was loaded from; an import that exits or never ends -------------
PLUGINS = {
    "fssl_liar/__init__.py": "",
    "fssl_liar/method.py": (
        "from methods.fedavg_simclr import FedAvgSimCLR\n\n\n"
        "class Liar(FedAvgSimCLR):\n"
        "    def train_round(self, *a, **k):\n"
        "        return super().train_round(*a, **k)\n\n\n"
        "Liar.__module__ = 'methods.fedavg_simclr'\n"
        "Liar.__qualname__ = 'FedAvgSimCLR'\n"
    ),
    "fssl_exits/__init__.py": "raise SystemExit(0)\n",
    "fssl_loops/__init__.py": "while True:\n    pass\n",
}


class _Dist:
    def __init__(self, name: str) -> None:
        self.name, self.version = name, "6.6"


class _EntryPoint:
    def __init__(self, name: str, value: str, dist: str) -> None:
        self.name, self.value, self.dist = name, value, _Dist(dist)


@pytest.fixture
def hostile_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three installed distributions (entry points read afresh for this test only): one whose class
    says it is built in, one that exits at import, one that never finishes importing."""
    import sys

    import benchmark.core.registry as registry_mod
    from benchmark.contracts.registries import METHODS, load_builtins

    load_builtins()
    for rel, text in PLUGINS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [
        _EntryPoint("liar", "fssl_liar.method:Liar", "fssl-liar"),
        _EntryPoint("exits", "fssl_exits:M", "fssl-exits"),
        _EntryPoint("loops", "fssl_loops:M", "fssl-loops"),
    ]
    monkeypatch.setattr(registry_mod.metadata, "entry_points", lambda group: list(eps))
    for attr in ("_items", "_targets", "_origin", "_clashes"):
        monkeypatch.setattr(METHODS, attr, dict(getattr(METHODS, attr)))
    monkeypatch.setattr(METHODS, "_plugins_loaded", False)
    monkeypatch.setenv("FSSL_PLUGIN_IMPORT_TIMEOUT", "0.5")
    yield
    for name in [m for m in sys.modules if m.startswith(("fssl_liar", "fssl_exits", "fssl_loops"))]:
        del sys.modules[name]


def test_a_plugin_that_says_it_is_built_in_is_not(hostile_plugins: None, honest) -> None:
    from benchmark.contracts.registries import METHODS
    from benchmark.core.provenance import component_provenance
    from benchmark.submission.accept_bundle import plugin_problems
    from tests.hostile import renamed

    prov = component_provenance(METHODS.get("liar"))
    assert prov is not None and prov["module"] == "fssl_liar.method"
    (problem,) = plugin_problems(renamed(honest, "liar"))
    assert "'liar' is not built in" in problem and "carries no provenance" in problem


def _run_argv(scratch: Path, method: str) -> list[str]:
    grid = scratch / "grid.yaml"
    grid.write_text(
        "name: p\nbase: {dataset: digits, backbone: {name: resnet_micro, width: 4}, partition: iid,\n"
        "       fl: {num_clients: 2, rounds: 1}, tasks: [knn]}\n"
        f"axes: {{method: [{method}], seed: [0]}}\n"
    )
    return ["run", "--grid", str(grid), "--root", str(scratch / "runs"), "--device", "cpu"]


@pytest.mark.parametrize(
    ("method", "needles"),
    [
        ("exits", ["fssl-exits 6.6", "SystemExit"]),
        ("loops", ["fssl-loops 6.6", "did not finish within 0.5 s"]),
    ],
)
def test_a_plugin_that_exits_or_loops_at_import_is_one_line_where_it_is_needed(
    hostile_plugins: None, scratch: Path, capsys, method: str, needles: list[str]
) -> None:
    refused(scratch, capsys, _run_argv(scratch, method), f"plugin method {method!r}", *needles)


def test_listing_warns_of_a_plugin_that_exits_or_loops_and_goes_on(
    hostile_plugins: None, capsys
) -> None:
    from benchmark.cli import main

    capsys.readouterr()
    assert main(["list", "methods"]) == 0
    out, err = capsys.readouterr()
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert "fedema" in names and "liar" in names and "exits" not in names
    assert [w.split("(")[1].split(")")[0] for w in err.strip().splitlines()] == [
        "fssl-exits 6.6 ",
        "fssl-loops 6.6 ",
    ]


# ---- 5. a zero or missing budget is flagged like a different one ------------------------------------
def test_a_zero_budget_is_flagged_like_a_different_one() -> None:
    import math

    import pandas as pd

    from leaderboard.tables import pool_differences

    def row(method: str, steps: float, samples: float) -> dict:
        return {
            "status": "ok",
            "method": method,
            "partition_digest": "p",
            "uses_public_data": False,
            "fl_rounds": 5,
            "fl_local_epochs": 1,
            "client_steps": steps,
            "client_samples": samples,
        }

    rows = pd.DataFrame(
        [
            row("a", 100, 6400),
            row("b", 110, 7000),
            row("zero", 0, 0),
            row("missing", math.nan, 6400),
            row("no_pretrain", 0, 0),  # random init trains nothing: no budget to flag
        ]
    )
    why = pool_differences(rows)
    assert set(why) == {2, 3}
    assert "no client optimizer steps recorded" in why[2] and "no client samples" in why[2]
    assert "no client optimizer steps recorded" in why[3] and "samples" not in why[3]


# ---- 16. names from outside are escaped when printed ------------------------------------------------
def test_a_member_name_with_escapes_stays_on_one_uncoloured_line(scratch: Path, capsys) -> None:
    name = "records/a\nFAKE ok\x1b[31mred\x1b[0m.json"
    bundle = scratch / "esc.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    line = refused(scratch, capsys, accept_argv(scratch, bundle), "\\nFAKE ok\\x1b[31mred")
    assert "\x1b" not in line


def test_a_wandb_run_id_with_escapes_stays_on_one_uncoloured_line(
    scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmark.submission.wandb_collect as wc
    from tests.hostile import _Api, _Run

    monkeypatch.setattr(wc, "_api", lambda: _Api([_Run("ab\nc\x1b[2Jd", "{}")]))
    argv = ["collect", "--from", "wandb:me/proj", "--results", str(scratch / "results")]
    line = refused(scratch, capsys, argv, "ab\\nc\\x1b[2Jd")
    assert "\x1b" not in line


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    from benchmark.core.terminal import printable

    assert printable("a\tb\r\nc\x1b[31m\u202ed\x00é") == "a\\tb\\r\\nc\\x1b[31m\\u202ed\\x00é"
