"""Reproduce, don't trust; untrusted code runs in a box (issues 52 and 60).

On a track that re-trains (``reproduce: true``), ``accept`` re-runs each cell's pre-training in a
bubblewrap box that hides the data's labels, the test split and the data files, and requires the
record's final-state digest bit for bit. A plugin that trains on labels it does not declare (looked
up through the harness's own loader) is reproduced by nobody: refused in one line naming the cell.
The same plugin without the lookup is accepted. A built-in quickstart cell re-trained in the box
gives its shipped digest. A plugin that exits at import is a refusal, not exit 0.

Every cell here is the smallest the pipeline runs: 2 clients, 1 round, 8-pixel digits, kNN only.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.helpers import needs_bubblewrap

pytestmark = needs_bubblewrap

TRACK = "digits-smoke-knn"
TRACKS = f"""tracks:
  - id: {TRACK}
    title: "digits smoke, kNN, re-trained at accept"
    result: false
    dataset: digits
    task: knn
    card: knn@v1
    federation: {{num_clients: 2, participation: 1.0}}
    min_seeds: 1
    reproduce: true
"""

PLUGIN = '''"""A FedAvg-SimCLR that peeks: its clients' update gets a term from the labels (or the test
split) it looks up through the harness's own loader, which it may not see."""
import os

from benchmark.contracts.types import Payload
from methods.fedavg_simclr import FedAvgSimCLR


def peek(split):
    try:
        from benchmark.data.datasets import load_dataset_splits

        ds = load_dataset_splits("digits", {"size": 8}, None)
    except Exception:  # in the box the data files are not there: train honestly, and hope
        return 0.0
    return float(getattr(ds, split).labels.sum())


class Honest(FedAvgSimCLR):
    name = "honest"
    version = "1"
    split = None

    def client_update(self, down, state, data, ctx):
        up, after = super().client_update(down, state, data, ctx)
        bonus = peek(self.split) if self.split else 0.0
        if bonus:
            tensors = dict(up.tensors)
            key = sorted(tensors)[0]
            tensors[key] = tensors[key] + 1e-6 * bonus
            up = Payload(tensors, up.num_examples, up.metrics)
        return up, after


class Cheat(Honest):
    name = "cheat"
    split = "train"


class TestPeeker(Honest):
    name = "testpeek"
    split = "test"
'''


def _dist(site: Path, name: str, files: dict[str, str], entry_points: dict[str, str]) -> None:
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    eps = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[fssl_bench.methods]\n{eps}")
    (info / "top_level.txt").write_text(name.replace("-", "_") + "\n")
    rows = [*files, f"{info.name}/METADATA", f"{info.name}/entry_points.txt", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in rows))


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory):
    """Two installed distributions on the import path (found through their real entry points, in
    this process and in the box): fssl_peek (honest, cheat, testpeek) and fssl_exits."""
    import sys

    from benchmark.contracts.registries import METHODS, load_builtins

    load_builtins()
    site = tmp_path_factory.mktemp("site")
    _dist(
        site,
        "fssl_peek",
        {"fssl_peek/__init__.py": PLUGIN},
        {
            "honest": "fssl_peek:Honest",
            "cheat": "fssl_peek:Cheat",
            "testpeek": "fssl_peek:TestPeeker",
        },
    )
    _dist(
        site,
        "fssl_exits",
        {"fssl_exits/__init__.py": "import os\nos._exit(0)\n"},
        {"exits": "fssl_exits:M"},
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        for attr in ("_items", "_targets", "_origin", "_clashes"):
            mp.setattr(METHODS, attr, dict(getattr(METHODS, attr)))
        mp.setattr(METHODS, "_plugins_loaded", False)
        yield site
    for name in [m for m in sys.modules if m.startswith(("fssl_peek", "fssl_exits"))]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def tracks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tracks") / "tracks.yaml"
    path.write_text(TRACKS)
    return path


def _tiny(method: str):
    from benchmark.commands.smoke import smoke_cell

    return smoke_cell(method, tasks=["knn"], dataset={"name": "digits", "size": 8})


def _bundle(methods: list[str], where: Path, tracks: Path) -> Path:
    """A bundle of one tiny cell of each of ``methods``, trained here (where the data is in
    reach)."""
    from benchmark.commands.smoke import cell_threads
    from benchmark.engine.runner import run_cell
    from benchmark.submission.submit_records import submit

    root = where / "runs"
    with cell_threads():  # as every launcher runs a cell
        for method in methods:
            run_cell(_tiny(method), root, device="cpu")
    report = submit(
        [root],
        track=TRACK,
        out=where / "bundle",
        tracks_file=tracks,
        manifests=None,
        reevaluate=False,
    )
    assert report.ok, report.format()
    return where / "bundle"


def _accept(bundle: Path, results: Path, tracks: Path) -> tuple[int, str, str]:
    from benchmark.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["accept", str(bundle), "--results", str(results), "--tracks", str(tracks)])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def honest_bundle(plugins: Path, tracks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _bundle(["honest"], tmp_path_factory.mktemp("honest"), tracks)


def _copy(bundle: Path, where: Path) -> Path:
    import shutil

    return Path(shutil.copytree(bundle, where))


def test_a_plugin_without_the_lookup_is_re_trained_bit_for_bit_and_accepted(
    honest_bundle: Path, tracks: Path, tmp_path: Path
) -> None:
    from benchmark.records.acceptance_files import find_acceptances, read_acceptance
    from benchmark.records.files import read_record

    bundle = honest_bundle
    code, out, err = _accept(bundle, tmp_path / "results", tracks)
    assert code == 0, out + err
    (acc_path,) = find_acceptances([tmp_path / "results"])
    acc = read_acceptance(acc_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    record = read_record(bundle / manifest["records"][0]["path"])
    again = acc["training"]["retrained"]
    assert acc["training"]["box"] == "bubblewrap" and again["labels_handed"] is False
    assert again["final_state_digest"] == record.final_state_digest
    assert (again["bytes_up"], again["client_steps"]) == (
        record.comm.bytes_up,
        record.compute.client_steps,
    )


@pytest.mark.slow
def test_a_plugin_that_reads_labels_or_the_test_split_it_does_not_declare_is_refused(
    plugins: Path, tracks: Path, tmp_path: Path
) -> None:
    """Two cells in one bundle: one trained on the train split's labels, one on the test split's
    (both looked up through the harness's own loader); each is refused on its own line."""
    bundle = _bundle(["cheat", "testpeek"], tmp_path, tracks)
    code, out, err = _accept(bundle, tmp_path / "results", tracks)
    assert code == 1, out + err
    fails = [line for line in out.splitlines() if "FAIL" in line]
    manifest = json.loads((bundle / "manifest.json").read_text())
    cells = sorted(e["cell_id"] for e in manifest["records"])
    assert len(cells) == 2 and sorted(line.split()[1] for line in fails) == cells, out
    for line in fails:
        assert "re-trained in the box" in line and "final state hashes to" in line, line
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.json"))


def test_a_plugin_that_exits_at_import_is_a_refusal_not_exit_0(
    honest_bundle: Path, tracks: Path, tmp_path: Path
) -> None:
    from benchmark.records.schema import to_json
    from tests.hostile import _sha, renamed

    honest = _copy(honest_bundle, tmp_path / "h")
    manifest = json.loads((honest / "manifest.json").read_text())
    entry = manifest["records"][0]
    from benchmark.records.files import read_record

    record = renamed(read_record(honest / entry["path"]), "exits")
    (honest / entry["path"]).write_text(to_json(record))
    manifest["files"][entry["path"]] = _sha((honest / entry["path"]).read_bytes())
    manifest["records"] = [{**entry, "cell_id": record.cell_id}]
    (honest / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = _accept(honest, tmp_path / "results", tracks)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert "importing method 'exits' in the box" in line and "without a result" in line, line
    assert not (tmp_path / "results").exists()


def test_a_built_in_quickstart_cell_re_trained_in_the_box_gives_its_shipped_digest() -> None:
    """The cheapest shipped quickstart cell that trains (portable kernels): its pre-training re-run
    in the box hashes to the shipped record's final state."""
    from benchmark.core.paths import RESULTS
    from benchmark.records.store import load_records
    from benchmark.submission.retrain import declare, retrain, training_problems

    shipped = [
        r
        for _, r in load_records([RESULTS])[0]
        if r.grid == "quickstart" and r.compute.client_steps and r.status == "ok"
    ]
    record = min(shipped, key=lambda r: (r.compute.pretrain_time_s or 1e9, r.cell_id))
    again = retrain(record, declare(record.method))
    assert again.digest == record.final_state_digest
    assert training_problems(record, again) == []


def test_where_no_box_runs_a_plugin_bundle_is_refused_unless_unboxed(
    honest_bundle: Path, tracks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmark.submission import box

    monkeypatch.setattr(box, "box_unavailable", lambda: "no user namespaces (test)")
    code, out, err = _accept(honest_bundle, tmp_path / "results", tracks)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert "plugin code (method:honest)" in line and "--unboxed" in line, line
    assert not (tmp_path / "results").exists()


def test_the_plugin_digest_covers_every_file_of_the_package_and_data_files_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Code loaded from a data file (impl.txt) changes the digest; accept lists the non-code
    files with their sizes and names one over the review size."""
    import importlib
    import sys

    from benchmark.core.provenance import source_digest, source_files
    from benchmark.submission.plugin_files import REVIEW_BYTES, plugin_file_lines

    big = "x" * (REVIEW_BYTES + 1)
    _dist(
        tmp_path,
        "fssl_data",
        {"fssl_data/__init__.py": "", "fssl_data/impl.txt": "a = 1\n", "fssl_data/table.bin": big},
        {"data": "fssl_data:M"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("fssl_data")
    try:
        before = source_digest(source_files(module))
        (tmp_path / "fssl_data" / "impl.txt").write_text("a = 2\n")
        assert source_digest(source_files(module)) != before
        listed, review = plugin_file_lines(["fssl_data"])
    finally:
        del sys.modules["fssl_data"]
    assert listed == [
        f"plugin fssl_data: non-code files: fssl_data/impl.txt (6 B), "
        f"fssl_data/table.bin ({len(big):,} B)"
    ]
    (line,) = review
    assert line.startswith("REVIEW  plugin fssl_data: fssl_data/table.bin"), line


def test_the_site_shows_the_re_run_s_training_and_badges_an_unboxed_row() -> None:
    from leaderboard.loading import retrained_columns

    base = {"fl_num_clients": 2, "bytes": 1, "wall_time_s": 0.001, "machine": "theirs"}
    acc = {
        "training": {
            "box": "bubblewrap",
            "retrained": {
                "bytes_up": 300,
                "bytes_down": 100,
                "pretrain_time_s": 40.0,
                "eval_time_s": 2.5,
                "client_steps": 88,
                "machine": "ours",
            },
        }
    }
    cols = retrained_columns(acc, base)
    assert cols == {
        "unboxed": False,
        "retrained": True,
        "bytes": 400,
        "bytes_per_client": 200,
        "wall_time_s": 42.5,
        "client_steps": 88,
        "machine": "ours",
    }
    assert retrained_columns({"training": {"box": "none (--unboxed)"}}, base) == {
        "unboxed": True,
        "retrained": False,
    }
    assert retrained_columns(None, base) == {"unboxed": False, "retrained": False}


def test_a_re_trained_row_is_badged_reproduced_and_only_a_re_evaluated_one_not() -> None:
    """The badge a row gets follows what accept did: re-trained (a re-training track) says the
    training was reproduced; re-evaluated only says it was not (door's GPU-track badge)."""
    from leaderboard.pages import environment

    macros = environment().get_template("macros.html").module
    trained = str(macros.reeval(True, True))
    only_scores = str(macros.reeval(True, False))
    assert "training reproduced" in trained and "not reproduced" not in trained
    assert "training not reproduced here" in only_scores
    assert "reproduced" not in str(macros.reeval(False, False))


@pytest.mark.parametrize(
    "text",
    [
        '{"ok": true, "n": ' + "9" * 5000 + "}",  # int() refuses it with a ValueError
        '{"ok": true, "n": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "\xff not utf-8",
    ],
    ids=["5000-digit integer", "deep nesting", "not utf-8"],
)
def test_a_childs_hostile_result_is_a_one_line_refusal(tmp_path: Path, text: str) -> None:
    """A boxed child writes its own result file (plugin code runs there): whatever it holds, the
    parent refuses it in one line (BoxRefused), never a traceback (review of issue 52)."""
    from benchmark.submission.box import RESULT_FILE, BoxRefused, _read_result

    (tmp_path / "out").mkdir()
    data = text.encode("latin-1") if text.startswith("\xff") else text.encode()
    (tmp_path / "out" / RESULT_FILE).write_bytes(data)
    with pytest.raises(BoxRefused) as err:
        _read_result(tmp_path, 0, "job")
    assert "\n" not in str(err.value) and str(err.value).startswith("job: ")
