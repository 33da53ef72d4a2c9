"""No plugin code runs in the maintainer's process (issue 52 item 3, issue 60 item 1).

A plugin (a method and a task) that leaves a mark wherever its code runs: at import, in its
method's client update and encoder export, in its task's card and run. Each mark is a file written
to an absolute folder outside the box (a ``tmp_path`` baked into the plugin's source): inside the
bubblewrap box that folder is not there and the write fails quietly; in the accepting process it
would succeed. After ``accept`` (which re-evaluates the plugin task's scores in the box),
``collect`` and ``check-method`` the folder must be empty.

Also: the plugin's provenance computed at accept without importing it is the one a run records,
and a non-code file of the plugin moves its digest.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from tests.helpers import needs_bubblewrap

pytestmark = needs_bubblewrap

TRACK = "digits-smoke-knn"
TRACKS = f"""tracks:
  - id: {TRACK}
    title: "digits smoke, kNN"
    result: false
    dataset: digits
    task: knn
    card: knn@v1
    federation: {{num_clients: 2, participation: 1.0}}
    min_seeds: 1
"""

PLUGIN = '''"""Leaves a mark wherever its code runs."""
import os
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmark.api import ProtocolCard, TaskScores, encoder_features
from methods.fedavg_simclr import FedAvgSimCLR

MARKS = {marks!r}


def mark(what):
    try:
        with open(os.path.join(MARKS, f"{{what}}-{{os.getpid()}}"), "w") as fh:
            fh.write(what)
    except OSError:  # in the box the folder is not there
        pass


mark("import")


class Marked(FedAvgSimCLR):
    name = "marked"
    version = "1"

    def client_update(self, down, state, data, ctx):
        mark("client_update")
        return super().client_update(down, state, data, ctx)

    def encoder(self, server, clients=None):
        mark("encoder")
        return super().encoder(server, clients)


class MarkTask:
    """Nearest class centroid on the frozen features, top-1 in %."""

    name = "marktask"
    version = "1"
    main_metric = "top1"
    higher_is_better = True

    @dataclass(frozen=True)
    class Config:
        normalize: bool = True

    def __init__(self, cfg):
        self.cfg = cfg

    def card(self):
        mark("card")
        return ProtocolCard(
            task=self.name,
            version=self.version,
            settings={{"normalize": self.cfg.normalize, "selection": "final"}},
            summary="nearest class centroid",
            name=f"{{self.name}}@v{{self.version}}",
        )

    def run(self, encoder, ctx):
        mark("run")
        t0 = time.perf_counter()
        ds = ctx.dataset
        train_f, test_f = encoder_features(encoder, ctx)
        train_f, test_f = F.normalize(train_f.float(), dim=1), F.normalize(test_f.float(), dim=1)
        y = torch.as_tensor(ds.train.labels).long()
        centroids = torch.zeros(ds.num_classes, train_f.shape[1]).index_add_(0, y, train_f)
        pred = (test_f @ F.normalize(centroids, dim=1).T).argmax(dim=1)
        top1 = float((pred == torch.as_tensor(ds.test.labels).long()).float().mean() * 100.0)
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric=self.main_metric,
            higher_is_better=self.higher_is_better,
            values={{"top1": top1}},
            wall_time_s=time.perf_counter() - t0,
        )
'''


def _dist(site: Path, name: str, files: dict[str, str], groups: dict[str, dict[str, str]]) -> None:
    """An installed distribution: its files, and a dist-info with entry points and RECORD."""
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    eps = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
        for group, entries in groups.items()
    )
    (info / "entry_points.txt").write_text(eps)
    (info / "top_level.txt").write_text(name + "\n")
    rows = [*files, f"{info.name}/METADATA", f"{info.name}/entry_points.txt", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in rows))


def _copy(value):
    return value.copy() if isinstance(value, dict) else value


REGISTRY_STATE = ("_items", "_targets", "_origin", "_clashes", "_refused", "_plugins_loaded")


def _forget_the_plugin(registries) -> None:
    """As a fresh process: the plugin's modules not imported, the registries not holding it."""
    for name in [m for m in sys.modules if m.startswith("fssl_mark")]:
        del sys.modules[name]
    for registry, state in registries:
        for attr, value in state.items():
            setattr(registry, attr, _copy(value))


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory):
    """(site folder, marks folder, registries' state without the plugin loaded): fssl_mark
    installed on the import path (found through its real entry points, here and in the box)."""
    from benchmark.contracts.registries import METHODS, TASKS, load_builtins

    load_builtins()
    site = tmp_path_factory.mktemp("site")
    marks = tmp_path_factory.mktemp("marks") / "marks"  # made by each test, after the bundle
    _dist(
        site,
        "fssl_mark",
        {
            "fssl_mark/__init__.py": PLUGIN.format(marks=str(marks)),
            "fssl_mark/table.txt": "a table the plugin reads\n",
        },
        {
            "fssl_bench.methods": {"marked": "fssl_mark:Marked"},
            "fssl_bench.tasks": {"marktask": "fssl_mark:MarkTask"},
        },
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        for registry in (METHODS, TASKS):
            for attr in REGISTRY_STATE:
                mp.setattr(registry, attr, _copy(getattr(registry, attr)))
            mp.setattr(registry, "_plugins_loaded", False)
        fresh = [(r, {a: _copy(getattr(r, a)) for a in REGISTRY_STATE}) for r in (METHODS, TASKS)]
        yield site, marks, fresh
        _forget_the_plugin(fresh)


@pytest.fixture(scope="module")
def bundle(plugin, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run root, bundle) of one tiny cell of the plugin method scored by kNN and the plugin task,
    trained here (the submitter's side: the plugin's code runs, no marks folder yet)."""
    from benchmark.commands.smoke import cell_threads, smoke_cell
    from benchmark.engine.runner import run_cell
    from benchmark.submission.submit_records import submit

    where = tmp_path_factory.mktemp("submitter")
    tracks = where / "tracks.yaml"
    tracks.write_text(TRACKS)
    root = where / "runs"
    cell = smoke_cell("marked", tasks=["knn", "marktask"], dataset={"name": "digits", "size": 8})
    with cell_threads():
        run_cell(cell, root, device="cpu")
    report = submit([root], track=TRACK, out=where / "bundle", tracks_file=tracks, manifests=None)
    assert report.ok, report.format()
    return root, where / "bundle"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from benchmark.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _clean_start(plugin) -> Path:
    _, marks, fresh = plugin
    _forget_the_plugin(fresh)
    marks.mkdir(exist_ok=True)
    for old in marks.iterdir():
        old.unlink()
    return marks


def test_accept_runs_no_plugin_code_in_its_own_process(plugin, bundle, tmp_path: Path) -> None:
    """Accepted (the plugin task re-evaluated in the box), and not one mark in the parent's view:
    not the import, not the method's export, not the task's card or run."""
    from benchmark.records.acceptance_files import find_acceptances, read_acceptance

    _, path = bundle
    marks = _clean_start(plugin)
    tracks = path.parent / "tracks.yaml"
    results = tmp_path / "results"
    code, out, err = _cli(["accept", str(path), "--results", str(results), "--tracks", str(tracks)])
    assert code == 0, out + err
    assert sorted(p.name for p in marks.iterdir()) == []
    assert not [m for m in sys.modules if m.startswith("fssl_mark")]
    (acc_path,) = find_acceptances([results])
    acc = read_acceptance(acc_path)
    scores = {(s["task"], s["key"]): s for s in acc["scores"]}
    plugin_score = scores[("marktask", "top1")]
    assert plugin_score["reproduced"] == plugin_score["reported"], plugin_score
    assert acc["training"]["box"] == "bubblewrap"
    assert acc["training"]["plugin_tasks_scored_in_box"] == ["marktask"]


def test_a_plugin_task_whose_boxed_score_differs_is_a_fail_line(
    plugin, bundle, tmp_path: Path
) -> None:
    """The plugin task's score is reproduced in the box, not believed: a record whose plugin-task
    score was raised (its digest and the manifest's sha256 recomputed) fails on that value."""
    import hashlib
    import shutil

    from benchmark.records.files import read_record
    from benchmark.records.integrity import seal
    from benchmark.records.schema import to_json

    _, path = bundle
    marks = _clean_start(plugin)
    edited = Path(shutil.copytree(path, tmp_path / "edited"))
    manifest = json.loads((edited / "manifest.json").read_text())
    entry = manifest["records"][0]
    record_path = edited / entry["path"]
    raw = json.loads(record_path.read_text())
    next(s for s in raw["scores"] if s["task"] == "marktask")["values"]["top1"] += 3.0
    record_path.write_text(json.dumps(raw))
    record_path.write_text(to_json(seal(read_record(record_path))))
    for side in (record_path.parent / "scores").glob("marktask-*.json"):
        side_raw = json.loads(side.read_text())
        side_raw["values"]["top1"] += 3.0
        side.write_text(json.dumps(side_raw, indent=2, sort_keys=True) + "\n")
    for rel in manifest["files"]:
        manifest["files"][rel] = hashlib.sha256((edited / rel).read_bytes()).hexdigest()
    entry["sha256"] = manifest["files"][entry["path"]]
    (edited / "manifest.json").write_text(json.dumps(manifest))
    tracks = path.parent / "tracks.yaml"
    code, out, err = _cli(
        ["accept", str(edited), "--results", str(tmp_path / "results"), "--tracks", str(tracks)]
    )
    assert code == 1, out + err
    fails = [line for line in out.splitlines() if "FAIL" in line]
    assert len(fails) == 1 and "marktask top1" in fails[0], out
    assert sorted(p.name for p in marks.iterdir()) == []


def test_collect_and_check_method_run_no_plugin_code_in_their_own_process(
    plugin, bundle, tmp_path: Path
) -> None:
    root, _ = bundle
    marks = _clean_start(plugin)
    code, out, err = _cli(["collect", "--from", str(root), "--results", str(tmp_path / "r")])
    assert code == 0 and "1 records collected" in out, out + err
    assert sorted(p.name for p in marks.iterdir()) == []
    code, out, err = _cli(["check-method", "marked", "--rounds", "1", "--no-knn", "--no-live"])
    assert code == 0 and "marked: all checks passed" in out, out + err
    assert sorted(p.name for p in marks.iterdir()) == []
    assert not [m for m in sys.modules if m.startswith("fssl_mark")]


def test_membership_and_provenance_at_accept_import_nothing_and_equal_the_run_s(
    plugin, bundle
) -> None:
    """``name in registry``, its origin and its provenance are read without importing the plugin;
    the provenance is exactly what the run recorded (distribution, version, source digest); a
    non-code file of the plugin moves the digest."""
    from benchmark.contracts.registries import METHODS, TASKS
    from benchmark.core.provenance import component_provenance, installed_provenance
    from benchmark.records.store import load_records

    root, _ = bundle
    site, _, _ = plugin
    marks = _clean_start(plugin)
    (record,) = [r for _, r in load_records([root])[0]]
    assert "marked" in METHODS and "marktask" in TASKS
    method, task = installed_provenance(METHODS, "marked"), installed_provenance(TASKS, "marktask")
    assert not [m for m in sys.modules if m.startswith("fssl_mark")]
    assert sorted(p.name for p in marks.iterdir()) == []
    assert method == record.env.plugins["method:marked"]
    assert task == record.env.plugins["task:marktask"]
    assert method["distribution"] == "fssl_mark" and method["files"] == 2
    assert component_provenance(METHODS.get("marked")) == method  # imported: the same
    table = site / "fssl_mark" / "table.txt"
    before = table.read_text()
    try:
        table.write_text("another table\n")
        assert installed_provenance(METHODS, "marked")["source_digest"] != method["source_digest"]
    finally:
        table.write_text(before)
    assert installed_provenance(METHODS, "marked") == method
    assert installed_provenance(METHODS, "fedavg_simclr") is None  # built in


def test_the_box_s_plugin_task_answer_is_validated() -> None:
    """A child may only score the plugin tasks it was asked for, under the card they built in the
    box, with finite numbers."""
    from benchmark.submission.box import BoxRefused
    from benchmark.submission.boxed_tasks import _validated

    cards = {"marktask": {"0123456789abcdef"}}
    good = {"task": "marktask", "card_id": "0123456789abcdef", "values": {"top1": 50.0}}
    (score,) = _validated({"scores": [good]}, ["marktask"], cards, "w")
    assert (score.task, score.card.card_id, dict(score.values)) == (
        "marktask",
        "0123456789abcdef",
        {"top1": 50.0},
    )
    for bad in (
        {**good, "task": "knn"},  # a built-in task's score, from plugin code
        {**good, "card_id": "fedcba9876543210"},
        {**good, "values": {"top1": float("nan")}},
        {**good, "values": {"top1": True}},
        {**good, "extra": 1},
    ):
        with pytest.raises(BoxRefused):
            _validated({"scores": [bad]}, ["marktask"], cards, "w")


def test_a_plugin_partitioner_is_refused_unless_unboxed(
    honest, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partition is rebuilt in the accepting process, so a plugin partitioner's code would run
    there: refused in one line naming it and --unboxed, before anything is imported or re-run."""
    import benchmark.core.registry as registry_mod
    from benchmark.contracts.registries import PARTITIONERS
    from tests.hostile import accept_argv, one_record_bundle, refused, reseal

    class _Dist:
        name, version = "fssl-fancy", "0.1"

    class _EntryPoint:
        name, value, dist = "fancy", "fssl_fancy:Fancy", _Dist()

    real = registry_mod.metadata.entry_points
    monkeypatch.setattr(
        registry_mod.metadata,
        "entry_points",
        lambda group: [_EntryPoint()] if group == "fssl_bench.partitioners" else real(group=group),
    )
    for attr in ("_items", "_targets", "_origin", "_clashes", "_refused"):
        monkeypatch.setattr(PARTITIONERS, attr, dict(getattr(PARTITIONERS, attr)))
    monkeypatch.setattr(PARTITIONERS, "_plugins_loaded", False)

    def fancy(cell: dict) -> None:
        cell["partition"]["name"] = "fancy"

    record = reseal(honest, edit_cell=fancy)
    bundle = one_record_bundle(scratch / "b", record)
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bundle),
        "plugin code that accept would run in its own process (partitioner:fancy)",
        "--unboxed",
    )
    assert "fssl_fancy" not in sys.modules


def test_while_accept_runs_the_registry_loads_no_plugin(plugin) -> None:
    """The guard behind every path: ``get`` of a plugin's name is a one-line PluginError, and
    nothing is imported; a built-in still loads; a name the maintainer allowed loads."""
    from benchmark.contracts.registries import METHODS
    from benchmark.core.registry import PluginError, plugin_code_refused
    from methods.fedavg_simclr import FedAvgSimCLR

    marks = _clean_start(plugin)
    with plugin_code_refused():
        with pytest.raises(PluginError, match="accept does not run plugin code in its own process"):
            METHODS.get("marked")
        assert METHODS.get("fedavg_simclr") is FedAvgSimCLR
    assert not [m for m in sys.modules if m.startswith("fssl_mark")]
    assert sorted(p.name for p in marks.iterdir()) == []
    with plugin_code_refused(["method:marked"]):
        assert METHODS.get("marked").name == "marked"
    _forget_the_plugin(plugin[2])


def test_a_declaration_from_the_box_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the plugin's code answers in the box is someone else's data: a version, export_params,
    config answers and task cards of the wrong shape or size are a refusal, not believed."""
    from benchmark.submission import retrain
    from benchmark.submission.box import BoxRefused

    good = {
        "requires": [],
        "federation": "federated",
        "encoder_needs_clients": False,
        "version": "1",
        "export_params": ["report_model"],
        "config_problems": [None],
        "tasks": [{"version": "1", "card_id": "0123456789abcdef", "card_name": "t@v1"}],
    }
    answer: dict = {}
    monkeypatch.setattr(retrain, "run_boxed", lambda *a, **k: dict(answer))

    def declare() -> retrain.Declaration:
        return retrain.declare("m", configs=[{"lr": 0.1}], task_configs=[("t", {})])

    answer.update(good)
    got = declare()
    assert (got.version, got.export_params, got.config_problem({"lr": 0.1})) == (
        "1",
        ("report_model",),
        None,
    )
    assert got.task("t", {})["card_id"] == "0123456789abcdef"
    assert "not checked" in got.config_problem({"lr": 0.2})
    for bad in (
        {"version": "1" * 201},
        {"version": 1},
        {"export_params": "report_model"},
        {"config_problems": []},
        {"config_problems": ["x" * 501]},
        {"tasks": [{"version": "1", "card_id": "not hex", "card_name": "t@v1"}]},
        {"tasks": [{"error": "x", "card_id": "0123456789abcdef"}]},
        {"tasks": []},
    ):
        answer.clear()
        answer.update({**good, **bad})
        with pytest.raises(BoxRefused, match="not a method's declaration"):
            declare()
