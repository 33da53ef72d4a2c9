"""Issue 39: every accepted number is bound to what trained it, and no record, bundle or grid can
crash, exhaust or fool the tools.

Crafted as in tests/benchmark/test_hostile_bundles.py (issue 33): a real smoke record edited and
sealed again with the project's own functions. Each refusal is one line, exit 2, nothing written
anywhere (the scratch folder's whole tree, TMPDIR inside it, is the same before and after)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmark.contracts.registries import METHODS
from benchmark.records.integrity import seal
from benchmark.records.schema import ResultRecord, to_json
from methods.fedavg_simclr import FedAvgSimCLR
from tests.hostile import (
    TRACK,
    _Api,
    _Run,
    _sha,
    _tarball,
    accept_argv,
    bundle_dir,
    one_record_bundle,
    refused,
    renamed,
    reseal,
    snapshot,
)

REPO = Path(__file__).resolve().parents[2]


class OutOfTree(FedAvgSimCLR):
    """A method whose code is not this repository's (its module is tests', not methods')."""

    name = "out_of_tree"


@contextmanager
def registered(name: str, cls: type) -> Iterator[None]:
    """``cls`` in the method registry under ``name`` for the block's duration only."""
    METHODS._items[name] = cls
    try:
        yield
    finally:
        del METHODS._items[name]


# ---- binding -------------------------------------------------------------------------------------
def test_a_plugin_record_without_provenance_is_refused(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    """accept checked a plugin's source digest only when the record named one: ``env.plugins: {}``
    skipped the check, where a wrong digest was refused."""
    plugin = renamed(honest, "out_of_tree")
    assert plugin.env.plugins == {}
    with registered("out_of_tree", OutOfTree):
        refused(
            scratch,
            capsys,
            accept_argv(scratch, one_record_bundle(scratch / "b", plugin)),
            "method 'out_of_tree' is not built in",
            "carries no provenance for it (env.plugins['method:out_of_tree'])",
        )


def test_a_built_in_method_needs_no_provenance(honest: ResultRecord) -> None:
    from benchmark.submission.accept_bundle import plugin_problems

    assert honest.env.plugins == {} and plugin_problems(honest) == []
    claimed = dataclasses.replace(
        honest,
        env=dataclasses.replace(
            honest.env,
            plugins={
                "method:fedavg_simclr": {
                    "module": "x.m",
                    "distribution": "x",
                    "version": "1",
                    "source_digest": "0" * 64,
                }
            },
        ),
    )
    assert "source digest" in plugin_problems(seal(claimed))[0]


class _Dist:
    def __init__(self, name: str) -> None:
        self.name, self.version = name, "0.1"


class _EntryPoint:
    def __init__(self, name: str, value: str, dist: str) -> None:
        self.name, self.value, self.dist = name, value, _Dist(dist)


CLASHING = [
    _EntryPoint("simsiam", "fssl_a.method:SimSiam", "fssl-a"),
    _EntryPoint("simsiam", "fssl_b.method:SimSiam", "fssl-b"),
    _EntryPoint("fedavg_simclr", "fssl_b.method:Fake", "fssl-b"),
]
GRID = """
name: clash
base: {dataset: digits, backbone: {name: resnet_micro, width: 4}, partition: iid,
       fl: {num_clients: 2, rounds: 1}, tasks: [knn]}
axes: {method: [METHOD], seed: [0]}
"""


@pytest.fixture
def clashing_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installed distributions registering ``simsiam``, one of them ``fedavg_simclr`` too (the
    method registry's entry points, read afresh for this test only)."""
    import benchmark.core.registry as registry_mod

    monkeypatch.setattr(registry_mod.metadata, "entry_points", lambda group: list(CLASHING))
    for attr in ("_items", "_targets", "_origin", "_clashes", "_refused"):
        monkeypatch.setattr(METHODS, attr, dict(getattr(METHODS, attr)))
    monkeypatch.setattr(METHODS, "_plugins_loaded", False)


def test_a_name_two_distributions_register_is_refused_naming_both(
    clashing_plugins: None, scratch: Path, capsys
) -> None:
    grid = scratch / "grid.yaml"
    grid.write_text(GRID.replace("METHOD", "simsiam"))
    METHODS.names()  # the plugins read (fssl-b's refused fedavg_simclr warns once, here)
    refused(
        scratch,
        capsys,
        ["run", "--grid", str(grid), "--root", str(scratch / "runs"), "--device", "cpu"],
        "method 'simsiam' is registered by both",
        "fssl-a 0.1 (fssl_a.method:SimSiam)",
        "fssl-b 0.1 (fssl_b.method:SimSiam)",
    )


def test_a_plugin_taking_a_built_in_name_leaves_the_built_in_running(
    clashing_plugins: None, scratch: Path, capsys
) -> None:
    """Issue 47: the built-in is kept and used (the smoke grid of it validates); fssl-b's
    registration is refused with one warning naming it."""
    from benchmark.cli import main

    grid = scratch / "grid.yaml"
    grid.write_text(GRID.replace("METHOD", "fedavg_simclr"))
    argv = ["run", "--grid", str(grid), "--root", str(scratch / "runs"), "--device", "cpu"]
    assert main([*argv, "--dry-run"]) == 0
    assert METHODS.get("fedavg_simclr") is FedAvgSimCLR
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning:")]
    assert len(warnings) == 1 and "fssl-b 0.1 (fssl_b.method:Fake)" in warnings[0], warnings


def test_listing_warns_of_a_clash_and_goes_on(clashing_plugins: None, capsys) -> None:
    from benchmark.cli import main

    assert main(["list", "methods"]) == 0
    out, err = capsys.readouterr()
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert "fedema" in names and "simsiam" not in names and "fedavg_simclr" in names
    warnings = err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: method ") for w in warnings)
    assert sum("fssl-b 0.1 (fssl_b.method:Fake)" in w for w in warnings) == 1


# ---- one bad record never stops the others --------------------------------------------------------
def _sealed_raw(honest: ResultRecord, edit: Callable[[dict], None], *, cell: bool) -> str:
    """``honest`` as JSON with ``edit`` applied to it (``cell``: to its cell, the cell id
    recomputed), sealed again with the project's digest, as an attacker would."""
    from benchmark.core.canonical import digest
    from benchmark.records.identity import cell_id_of

    raw = json.loads(to_json(honest))
    if cell:
        edit(raw["cell"])
        raw["cell_id"] = cell_id_of(raw["cell"])
    else:
        edit(raw)
    body = {k: v for k, v in raw.items() if k != "digest"}
    if isinstance(body.get("env"), dict) and not body["env"].get("kernels"):
        body["env"].pop("kernels", None)
    raw["digest"] = digest(body)
    return json.dumps(raw)


def _set(key: str, value: Any) -> Callable[[dict], None]:
    return lambda d: d.__setitem__(key, value)


# (edit, of the cell?, the words of the one-line refusal)
WRONG_SHAPES: dict[str, tuple[Callable[[dict], None], bool, str]] = {
    "cell.method a string": (_set("method", "fedavg_simclr"), True, "record.cell.method must be"),
    "cell null": (_set("cell", None), False, "record.cell has the wrong type"),
    "cell.dataset a string": (_set("dataset", "digits"), True, "record.cell.dataset must be"),
    "cell.fl a string": (_set("fl", "x"), True, "record.cell.fl must be an object"),
    "cell.tasks a string": (_set("tasks", "knn"), True, "record.cell.tasks must be a list"),
    "cell.seed a string": (_set("seed", "0"), True, "record.cell.seed must be an integer"),
    "cell.kernels_revision a string": (
        _set("kernels_revision", "2"),
        True,
        "record.cell.kernels_revision must be a int",
    ),
    "comm a string": (_set("comm", "abc"), False, "record.comm must be an object"),
    "scores a string": (_set("scores", "abc"), False, "record.scores must be a list"),
    "a 7 MB reason": (_set("reason", "x" * 7_000_000), False, "larger than 1,048,576 bytes"),
    "a 100 kB label": (
        _set("partition_label", "x" * 100_000),
        False,
        "record.partition_label holds",
    ),
    # issue 44: counts range-checked where a record is read
    "negative client steps": (
        lambda d: d["compute"].__setitem__("client_steps", -5),
        False,
        "record.compute.client_steps is -5",
    ),
    "traffic of 10**400 bytes": (
        lambda d: d["comm"].__setitem__("bytes_up", 10**400),
        False,
        "an integer of 401 digits",  # refused while parsing, before conversion (issue 52)
    ),
    "per-round traffic that does not add up": (
        lambda d: d["comm"].update(per_round_up=[1, 2], bytes_up=4),
        False,
        "record.comm.bytes_up is 4 but its per_round_up add up to 3",
    ),
    "nested too deep": (
        lambda c: c["method"]["params"].__setitem__("projector", json.loads("[" * 40 + "]" * 40)),
        True,
        "levels deep",
    ),
}


def test_a_portable_cell_with_its_revision_has_the_right_shape(honest: ResultRecord) -> None:
    """A portable cell carries ``kernels_revision`` (an integer): the schema reads it as a cell key."""
    from benchmark.records.field_checks import check_cell
    from benchmark.records.record_error import RecordError

    cell = json.loads(to_json(honest))["cell"]
    check_cell({**cell, "kernels": "portable", "kernels_revision": 2})
    with pytest.raises(RecordError, match="kernels_revision must be a int"):
        check_cell({**cell, "kernels": "portable", "kernels_revision": 2.0})


@pytest.fixture
def mixed(honest: ResultRecord, scratch: Path) -> Path:
    """A folder of records: every wrong shape, and the honest record after them (sorted by name)."""
    src = scratch / "src" / "records" / "v1" / "fedavg_simclr"
    src.mkdir(parents=True)
    for i, (edit, of_cell, _) in enumerate(WRONG_SHAPES.values()):
        (src / f"{i:016x}.json").write_text(_sealed_raw(honest, edit, cell=of_cell))
    (src / "ffffffffffffffff.json").write_text(to_json(honest))
    return scratch / "src"


def test_collect_skips_each_bad_record_in_one_line_and_copies_the_rest(
    mixed: Path, scratch: Path, honest: ResultRecord, capsys
) -> None:
    from benchmark.cli import main

    results = scratch / "results"
    assert main(["collect", "--from", str(mixed), "--results", str(results)]) == 0
    out, err = capsys.readouterr()
    skipped = err.strip().splitlines()
    assert len(skipped) == len(WRONG_SHAPES), err
    for line, (_, _, words) in zip(skipped, WRONG_SHAPES.values()):
        assert line.startswith("skipped ") and words in line, line
    last = out.strip().splitlines()[-1]
    assert last.endswith(f"1 records collected into {results}, {len(WRONG_SHAPES)} skipped")
    assert [p.name for p in results.rglob("*.json")] == [f"{honest.cell_id}.json"]


def test_wandb_collect_skips_each_bad_record_and_copies_the_rest(
    honest: ResultRecord, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmark.submission.wandb_collect as wc
    from benchmark.cli import main

    runs = [
        _Run(f"bad{i}", _sealed_raw(honest, edit, cell=of_cell))
        for i, (edit, of_cell, _) in enumerate(WRONG_SHAPES.values())
    ]
    monkeypatch.setattr(wc, "_api", lambda: _Api([*runs, _Run("good", to_json(honest))]))
    results = scratch / "results"
    assert main(["collect", "--from", "wandb:me/proj", "--results", str(results)]) == 0
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == len(WRONG_SHAPES), err
    assert "1 records collected" in out and f"{len(WRONG_SHAPES)} skipped" in out
    assert len(list(results.rglob("*.json"))) == 1


def test_the_site_lists_each_bad_record_as_skipped_and_builds(
    mixed: Path, scratch: Path, honest: ResultRecord
) -> None:
    from leaderboard.site import build_site

    build_site([mixed], scratch / "site")
    skipped = (scratch / "site" / "skipped.html").read_text()
    for _, _, words in WRONG_SHAPES.values():
        assert words.replace("'", "&#39;") in skipped, words
    assert honest.cell_id in (scratch / "site" / "tracks" / f"{TRACK}.html").read_text()


@pytest.mark.parametrize("name", list(WRONG_SHAPES))
def test_accept_refuses_a_record_of_the_wrong_shape_in_one_line(
    honest: ResultRecord, scratch: Path, capsys, name: str
) -> None:
    edit, of_cell, words = WRONG_SHAPES[name]
    text = _sealed_raw(honest, edit, cell=of_cell)
    bundle = bundle_dir(
        scratch / "b",
        {"records/x/0/record.json": text},
        records=[
            {"path": "records/x/0/record.json", "cell_id": honest.cell_id, "checkpoint": None}
        ],
    )
    refused(scratch, capsys, accept_argv(scratch, bundle), words)


def test_verify_record_reports_a_cell_of_the_wrong_shape_instead_of_raising(
    honest: ResultRecord,
) -> None:
    """The second guard: a record built in memory around the schema (never read) is one problem in
    verify_record, not an AttributeError in collect or the site build."""
    from benchmark.records.store import verify_record

    bad = dataclasses.replace(honest, cell={**honest.cell, "method": "fedavg_simclr"})
    assert any("method does not match the cell" in p for p in verify_record(bad))
    worse = dataclasses.replace(honest, cell=None)  # type: ignore[arg-type]
    assert verify_record(worse)[-1].startswith("cannot be checked: ")


# ---- bounded before anything is built -----------------------------------------------------------
@pytest.fixture(scope="module")
def honest_bundle(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmark.submission.submit_records import submit

    out = tmp_path_factory.mktemp("bundles") / "honest"
    assert submit([run_root], track=TRACK, out=out, manifests=None, reevaluate=False).ok
    return out


def rebundle(
    honest_bundle: Path,
    where: Path,
    record: ResultRecord | None = None,
    checkpoint: Callable[[dict], None] | None = None,
) -> Path:
    """A copy of ``honest_bundle`` with its record replaced and/or its checkpoint's payload edited,
    every sha256 of the manifest recomputed (as an attacker would)."""
    import shutil

    import torch

    shutil.copytree(honest_bundle, where)
    manifest = json.loads((where / "manifest.json").read_text())
    entry = manifest["records"][0]
    if record is not None:
        (where / entry["path"]).write_text(to_json(record))
        manifest["files"][entry["path"]] = entry["sha256"] = _sha(
            (where / entry["path"]).read_bytes()
        )
        entry["cell_id"] = record.cell_id
    if checkpoint is not None:
        ckpt = where / entry["checkpoint"]["path"]
        payload = torch.load(ckpt, map_location="cpu", weights_only=True)
        checkpoint(payload)
        torch.save(payload, ckpt)
        digest = _sha(ckpt.read_bytes())
        manifest["files"][entry["checkpoint"]["path"]] = entry["checkpoint"]["sha256"] = digest
        entry["checkpoint"]["bytes"] = ckpt.stat().st_size
    (where / "manifest.json").write_text(json.dumps(manifest))
    return where


@pytest.fixture
def nothing_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the partition is rebuilt nor a task re-run: a refusal must come before both."""
    forbid_rerunning(monkeypatch)


def forbid_rerunning(monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmark.submission.accept_bundle as acc
    from benchmark.submission.oracle import PartitionOracle

    def never(*a: Any, **k: Any) -> Any:
        raise AssertionError("built before the record was bounded")

    monkeypatch.setattr(PartitionOracle, "check", never)
    monkeypatch.setattr(acc, "reevaluate", never)


def _edit_params(section: str, **params: Any) -> Callable[[dict], None]:
    return lambda cell: cell[section]["params"].update(params)


def test_a_dataset_size_beyond_its_bound_is_refused_before_any_data_is_loaded(
    honest: ResultRecord, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch, nothing_rerun
) -> None:
    """``size: 400`` made digits take 4.3 GB before anything failed (2048: ~90 GB)."""
    from benchmark.engine import stages

    monkeypatch.setattr(stages, "load_dataset_splits", lambda *a, **k: pytest.fail("loaded"))
    big = reseal(honest, edit_cell=_edit_params("dataset", size=2048))
    refused(
        scratch,
        capsys,
        accept_argv(scratch, one_record_bundle(scratch / "b", big)),
        "dataset 'digits': digits size must be in [8, 128], got 2048",
    )


@pytest.mark.parametrize(
    ("section", "params"),
    [("method", {"proj_hidden": 1 << 16}), ("backbone", {"width": 64})],
)
def test_a_model_the_checkpoint_cannot_hold_is_refused_unbuilt(
    honest: ResultRecord,
    honest_bundle: Path,
    scratch: Path,
    capsys,
    nothing_rerun,
    section: str,
    params: dict,
) -> None:
    """A projector of 2**28 hidden units (34 GB) or a backbone of width 4096 was built before the
    checkpoint was compared with it: sized on the meta device now, its shapes refused."""
    edited = reseal(honest, edit_cell=_edit_params(section, **params))
    bundle = rebundle(honest_bundle, scratch / "b", record=edited)
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bundle),
        "its tensors do not fit the encoder the record's cell builds",
        "nothing re-run, nothing written",
    )


def test_the_encoder_a_record_builds_is_bounded(
    honest_bundle: Path, scratch: Path, nothing_rerun
) -> None:
    from benchmark.submission.accept_bundle import accept
    from benchmark.submission.bundle import BundleError, BundleLimits

    with pytest.raises(BundleError, match=r"holds [\d,]+ bytes, more than the 1,024 a re-eval"):
        accept(honest_bundle, scratch / "results", limits=BundleLimits(max_encoder_bytes=1024))
    assert not (scratch / "results").exists()


def test_a_fingerprint_that_is_not_the_checkpoints_is_refused_before_re_evaluation(
    honest: ResultRecord, honest_bundle: Path, scratch: Path, capsys, nothing_rerun
) -> None:
    lying = seal(dataclasses.replace(honest, backbone_fingerprint="0" * 16))
    refused(
        scratch,
        capsys,
        accept_argv(scratch, rebundle(honest_bundle, scratch / "b", record=lying)),
        "architecture fingerprint",
        "the record states 0000000000000000",
    )


def test_a_batch_size_that_multiplies_the_steps_is_refused(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    """``batch_size: 1`` made a linear probe take 512x the card's steps (it was no cost field)."""

    def tiny_batches(cell: dict) -> None:
        cell["tasks"].append(
            {"name": "linear_probe", "params": {"epochs": 1, "batch_size": 1}, "version": "1"}
        )

    bundle = one_record_bundle(scratch / "b", reseal(honest, edit_cell=tiny_batches))
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bundle),
        "task linear_probe: batch_size 1 is below the card linear@v1's 512",
    )


def test_a_checkpoint_view_larger_than_its_storage_is_refused_unread(
    honest_bundle: Path, scratch: Path, capsys, nothing_rerun
) -> None:
    """One stored float can describe a tensor of any size (a stride-0 view); hashing it for the
    digest would materialise it."""
    import torch

    def expand(payload: dict) -> None:
        payload["extra"] = {"pool": torch.zeros(1).expand(1 << 24)}

    bundle = rebundle(honest_bundle, scratch / "b", checkpoint=expand)
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bundle),
        "extra 'pool' (16777216,), a view larger than its storage",
    )


def test_a_fedmae_checkpoint_with_another_pool_is_not_the_records(
    scratch: Path, capsys, tmp_path_factory: pytest.TempPathFactory, monkeypatch
) -> None:
    """FedMAE's trained blocks live in ``server.extra``: a checkpoint whose block pool was swapped
    (the model, θ₀, untouched) used to pass the digest check."""
    from benchmark.commands.check_method import smoke_cell
    from benchmark.engine.runner import run_cell
    from benchmark.submission.submit_records import submit

    root = tmp_path_factory.mktemp("fedmae")
    run_cell(smoke_cell("fedmae", tasks=["knn"]), root, device="cpu")
    honest = tmp_path_factory.mktemp("fedmae-bundle") / "b"
    assert submit([root], track=TRACK, out=honest, manifests=None, reevaluate=False).ok
    forbid_rerunning(monkeypatch)

    def swap_a_block(payload: dict) -> None:
        key = next(k for k in sorted(payload["extra"]) if k.endswith("mlp.fc1.weight"))
        payload["extra"][key] = payload["extra"][key] * 0.5

    refused(
        scratch,
        capsys,
        accept_argv(scratch, rebundle(honest, scratch / "b", checkpoint=swap_a_block)),
        "is not the record's final state",
    )


# ---- grids ---------------------------------------------------------------------------------------
def _alias_bomb(levels: int = 8) -> str:
    """A grid of a few hundred bytes whose method parameter expands to 9**levels values."""
    parts = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return (
        "name: bomb\n"
        "base: {dataset: digits, backbone: {name: resnet_micro, width: 4}, partition: iid,\n"
        "       fl: {num_clients: 2, rounds: 1}, tasks: [knn], seed: 0}\n"
        f"axes: {{method: [{{name: fedavg_simclr, lr: [{', '.join(parts)}]}}]}}\n"
    )


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_grid_alias_bomb_is_refused_before_it_is_expanded(
    scratch: Path, capsys, command: str
) -> None:
    """697 bytes of nested YAML aliases asked for 2.2 GB (expand.py)."""
    grid = scratch / "bomb.yaml"
    grid.write_text(_alias_bomb())
    assert grid.stat().st_size < 1000
    argv = ["plan", "--grid", str(grid)]
    if command == "run":
        argv = ["run", "--grid", str(grid), "--root", str(scratch / "runs"), "--device", "cpu"]
    refused(scratch, capsys, argv, "more than 100,000 values once its YAML aliases are expanded")


def test_a_grid_whose_axes_multiply_past_the_cap_is_refused_before_a_cell_is_built(
    scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmark.grids import expand

    monkeypatch.setattr(expand, "resolve_cell", lambda *a, **k: pytest.fail("a cell was built"))
    seeds = ", ".join(str(i) for i in range(1000))
    grid = scratch / "wide.yaml"
    grid.write_text(
        "name: wide\n"
        "base: {dataset: digits, backbone: {name: resnet_micro, width: 4},\n"
        "       fl: {num_clients: 2, rounds: 1}, tasks: [knn]}\n"
        "axes: {method: [fedavg_simclr, fedu, fedema], partition: [iid, {name: dirichlet,\n"
        f"       alpha: 0.1}}, {{name: dirichlet, alpha: 1.0}}], seed: [{seeds}],\n"
        "       partition_seed: [0, 1, 2]}\n"
    )
    refused(
        scratch,
        capsys,
        ["plan", "--grid", str(grid)],
        "its axes make 27,000 combinations, more than the 20,000 a grid may have",
    )


# ---- bundles -------------------------------------------------------------------------------------
DEEP = 1500


def _deep_folder(root: Path) -> Path:
    """``root``/a/a/.../a (DEEP folders, made one by one: ``mkdir(parents=True)`` recurses) holding
    a manifest at the bottom."""
    path = root
    for _ in range(DEEP):
        path = path / "a"
        path.mkdir()
    (path / "manifest.json").write_text("{}")
    return root


def _remove_deep(root: Path) -> None:
    """Remove the DEEP chain bottom-up without recursion (shutil.rmtree recurses)."""
    path = root / Path(*["a"] * DEEP)
    (path / "manifest.json").unlink()
    while path != root:
        path.rmdir()
        path = path.parent


def test_a_folder_bundle_1500_folders_deep_is_refused_in_one_line(
    scratch: Path, capsys, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The walk used to raise RecursionError (bundle.py, os.walk)."""
    deep = tmp_path_factory.mktemp("deep")
    (deep / "manifest.json").write_text("{}")
    _deep_folder(deep)
    try:
        refused(scratch, capsys, accept_argv(scratch, deep), "is more than 16 folders deep")
    finally:
        _remove_deep(deep)


def test_a_tarball_1500_folders_deep_is_refused_from_its_headers(scratch: Path, capsys) -> None:
    """Extracting it used to raise RecursionError (``mkdir(parents=True)``)."""
    tar = _tarball(
        scratch / "deep.tar.gz",
        [("manifest.json", b"{}", b""), ("/".join(["a"] * DEEP) + "/f", b"x", b"")],
    )
    # the one header walker refuses its 3,001-byte name before a folder is made (issue 52)
    refused(scratch, capsys, accept_argv(scratch, tar), "a PAX path of 3,001 bytes")


# ---- signals and atomic writes in accept ---------------------------------------------------------
SIGNALLED = """
import os, signal, sys, time

import benchmark.records.files as files
import benchmark.submission.accept_bundle as acc
from benchmark.cli import main

when, name = sys.argv[1], sys.argv[2]
signum = getattr(signal, name)
# Ctrl-C as a terminal delivers it, whatever this process inherited (a job started with & in a
# non-interactive shell inherits SIGINT ignored, and Python then keeps it ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)


def kill_self(*args, **kwargs):
    os.kill(os.getpid(), signum)
    time.sleep(10)  # the handler runs before this returns


if when == "reevaluating":
    acc.reevaluate = kill_self
else:  # once the first file accept writes is in place (by a link, or by a rename)
    real = {"link": os.link, "replace": os.replace}

    def then_kill(how):
        def put(src, dst):
            real[how](src, dst)
            if str(dst).endswith(".json"):
                kill_self()

        return put

    files.os.link, files.os.replace = then_kill("link"), then_kill("replace")
sys.exit(main(sys.argv[3:]))
"""


def _accept_signalled(
    scratch: Path, bundle: Path, when: str, name: str
) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(scratch / "tmp"), "PYTHONPATH": str(REPO)}
    argv = ["accept", str(bundle), "--results", str(scratch / "results")]
    return subprocess.run(
        [sys.executable, "-c", SIGNALLED, when, name, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("name", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_while_accept_re_evaluates_leaves_nothing_and_says_so(
    run_root: Path, scratch: Path, name: str
) -> None:
    """SIGHUP used to leave the extracted bundle in TMPDIR (only SIGTERM was handled), and Ctrl-C
    printed ``run``'s message."""
    from benchmark.submission.submit_records import submit

    tarball = scratch / "bundle.tar.gz"
    assert submit([run_root], track=TRACK, out=tarball, manifests=None, reevaluate=False).ok
    before = snapshot(scratch)
    proc = _accept_signalled(scratch, tarball, "reevaluating", name)
    signum = getattr(signal, name)
    assert proc.returncode == 128 + signum, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "accept interrupted: nothing written under --results, the extracted bundle removed "
        f"({name})"
    ]
    assert snapshot(scratch) == before  # no extracted bundle left in TMPDIR, no results


def test_sigterm_after_the_first_file_is_written_undoes_it(run_root: Path, scratch: Path) -> None:
    """SIGTERM after the record was written used to leave it without its acceptance."""
    from benchmark.submission.submit_records import submit

    bundle = scratch / "bundle"
    assert submit([run_root], track=TRACK, out=bundle, manifests=None, reevaluate=False).ok
    before = snapshot(scratch)
    proc = _accept_signalled(scratch, bundle, "writing", "SIGTERM")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.strip().endswith("the extracted bundle removed (SIGTERM)"), proc.stderr
    assert snapshot(scratch) == before  # neither the record nor its acceptance, no folder


def test_write_new_files_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.core.errors import Interrupted
    from benchmark.records import files
    from benchmark.records.files import RecordExists, write_new_files

    real_link, calls = os.link, []

    def link_twice_then_stop(src: str, dst: str) -> None:
        if len(calls) == 2:
            raise Interrupted(signal.SIGTERM)
        calls.append(dst)
        real_link(src, dst)

    monkeypatch.setattr(files.os, "link", link_twice_then_stop)
    targets = [(tmp_path / "r" / "a" / f"{i}.json", f"text {i}") for i in range(3)]
    with pytest.raises(Interrupted):
        write_new_files(targets)
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []  # files, temporaries and folders
    monkeypatch.undo()
    (tmp_path / "taken.json").write_text("mine")
    with pytest.raises(RecordExists):
        write_new_files([(tmp_path / "new.json", "x"), (tmp_path / "taken.json", "theirs")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.json"]
    assert (tmp_path / "taken.json").read_text() == "mine"


@pytest.mark.parametrize("planted", ["acceptance", "records folder"])
def test_a_link_planted_under_results_is_refused_before_re_evaluation(
    honest: ResultRecord, honest_bundle: Path, scratch: Path, capsys, nothing_rerun, planted: str
) -> None:
    """A planted acceptance link raised UnsafeName (a traceback) after a full re-evaluation."""
    from benchmark.records.acceptance_files import acceptance_path

    results = scratch / "deep" / "er" / "results"
    outside = scratch / "outside"
    outside.mkdir()
    if planted == "acceptance":
        link = acceptance_path(results, honest.cell_id)
        target = outside / "x.json"
    else:
        link = results / "records" / "v1" / honest.method
        target = outside
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    refused(scratch, capsys, accept_argv(scratch, honest_bundle), f"{link} is a link")
    assert list(outside.iterdir()) == []
