"""Issue 47 item 2: a plugin task's protocol card travels with its records. ``submit`` bundles it
(``cards/<card_id>.card.json``), ``accept`` checks it (schema, digest = the records' card id, size) and
keeps it in ``results/cards/``, and the site lists the plugin task's scores unranked on
``submitted.html``.

The plugin is the ``new-task --plugin`` scaffold (centroid_probe), installed in place with its entry
point; one no_pretrain smoke cell scores it beside kNN (the track's task). ``accept`` builds its card
and scores it in the box only (``benchmark.submission.boxed_tasks``)."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.commands.smoke import smoke_cell
from benchmark.contracts.registries import TASKS, load_builtins
from benchmark.engine.runner import run_cell
from benchmark.submission.submit_records import submit

TRACK = "digits-smoke-knn"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory):
    """(bundle folder, the plugin card's id) with centroid_probe registered for the module."""
    pkg = tmp_path_factory.mktemp("plugin") / "cp"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["new-task", "centroid_probe", "--plugin", "--out", str(pkg)]) == 0
    _installed(pkg / "src")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(pkg / "src"))
        load_builtins()
        for attr in ("_items", "_targets", "_origin", "_clashes", "_refused"):
            mp.setattr(TASKS, attr, dict(getattr(TASKS, attr)))
        mp.setattr(TASKS, "_plugins_loaded", False)
        module = importlib.import_module("fssl_centroid_probe.task")
        root = tmp_path_factory.mktemp("runs")
        run_cell(smoke_cell("no_pretrain", tasks=["knn", "centroid_probe"]), root, device="cpu")
        out = tmp_path_factory.mktemp("bundle") / "b"
        report = submit([root], track=TRACK, out=out, manifests=None)
        assert report.ok, report.format()
        yield out, module.CentroidProbe(module.CentroidProbeConfig()).card().card_id
    sys.modules.pop("fssl_centroid_probe.task", None)
    sys.modules.pop("fssl_centroid_probe", None)


def _installed(src: Path) -> None:
    """The scaffold as pip would install it in place: a dist-info beside the package with its
    entry point (accept finds a plugin task through its entry point, and runs it only in the box,
    where it imports it the same way)."""
    info = src / "fssl_centroid_probe-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fssl-centroid-probe\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[fssl_bench.tasks]\ncentroid_probe = fssl_centroid_probe.task:CentroidProbe\n"
    )
    (info / "top_level.txt").write_text("fssl_centroid_probe\n")


def _accept(bundle: Path, results: Path, capsys) -> tuple[int, str, str]:
    code = main(["accept", str(bundle), "--results", str(results)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_plugin_task_card_goes_from_bundle_to_an_unranked_site_page(
    bundle, tmp_path: Path, capsys
) -> None:
    path, card_id = bundle
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["cards"] == [f"cards/{card_id}.card.json"]
    assert f"cards/{card_id}.card.json" in manifest["files"]
    carried = json.loads((path / "cards" / f"{card_id}.card.json").read_text())
    assert carried["card_id"] == card_id and carried["name"] == "centroid_probe@v1"
    results = tmp_path / "results"
    code, out, err = _accept(path, results, capsys)
    assert code == 0, out + err
    assert json.loads((results / "cards" / f"{card_id}.card.json").read_text()) == carried
    site = tmp_path / "site"
    from leaderboard.__main__ import main as leaderboard_main

    assert leaderboard_main(["build", "--results", str(results), "--out", str(site)]) == 0
    page = (site / "submitted.html").read_text()
    assert "unranked until a maintainer adds a track" in page
    assert "reproduced by accept (plugin code, in the box)" in page  # not this repository's code
    assert "centroid_probe@v1" in page and card_id in page
    record = json.loads(next((results / "records").rglob("*.json")).read_text())
    top1 = next(s for s in record["scores"] if s["task"] == "centroid_probe")["values"]["top1"]
    assert f"{top1:.2f}" in page
    # no rank, no leader: neither the rank column nor the leader mark of the track tables
    assert "<th>rank</th>" not in page and 'class="leader"' not in page
    assert 'href="submitted.html"' in (site / "index.html").read_text()


def test_a_bundle_whose_card_digest_is_not_its_records_is_refused_in_one_line(
    bundle, tmp_path: Path, capsys
) -> None:
    path, card_id = bundle
    import hashlib

    edited = tmp_path / "edited"
    shutil.copytree(path, edited)
    card_file = edited / "cards" / f"{card_id}.card.json"
    card = json.loads(card_file.read_text())
    card["settings"]["normalize"] = not card["settings"]["normalize"]  # its digest moves
    card_file.write_text(json.dumps(card))
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["files"][f"cards/{card_id}.card.json"] = hashlib.sha256(
        card_file.read_bytes()
    ).hexdigest()
    (edited / "manifest.json").write_text(json.dumps(manifest))
    results = tmp_path / "results"
    code, out, err = _accept(edited, results, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "digest" in err and card_id in err
    assert not results.exists() or not any(results.rglob("*.json"))


def test_a_carried_card_consistent_in_itself_but_not_the_records_is_refused(
    bundle, tmp_path: Path, capsys
) -> None:
    """The card edited with its card_id and file name recomputed: its digest is its own, but no
    record's score is under it."""
    import hashlib

    from benchmark.records.schema import ProtocolCard

    path, card_id = bundle
    edited = tmp_path / "edited"
    shutil.copytree(path, edited)
    old = edited / "cards" / f"{card_id}.card.json"
    card = json.loads(old.read_text())
    card["settings"]["normalize"] = not card["settings"]["normalize"]
    card["card_id"] = ProtocolCard(
        task=card["task"], version=card["version"], settings=card["settings"]
    ).card_id
    new = old.with_name(f"{card['card_id']}.card.json")
    old.unlink()
    new.write_text(json.dumps(card))
    manifest = json.loads((edited / "manifest.json").read_text())
    del manifest["files"][f"cards/{card_id}.card.json"]
    rel = f"cards/{new.name}"
    manifest["files"][rel] = hashlib.sha256(new.read_bytes()).hexdigest()
    manifest["cards"] = [rel]
    (edited / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = _accept(edited, tmp_path / "results", capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the bundle does not carry its card" in err and card_id in err
    assert not (tmp_path / "results").exists()
