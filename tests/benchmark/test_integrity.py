"""Records nobody can quietly edit, and W&B as the transport (issue: from W&B to the leaderboard).

- a record carries a digest over its canonical content; collect, submit and the site verify it;
- a run logged to W&B offline carries its sealed record as run files; ``collect --from PATH`` finds
  them in the ``wandb/offline-run-*`` folders, and the built site shows exactly those records;
- ``collect --from wandb:ENTITY/PROJECT`` is tested at its boundary with a fake of the few
  ``wandb.Api`` calls used;
- the API key never enters a record, a run folder or a page.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmark.commands.run import run_grid
from benchmark.launchers.options import RunOptions
from benchmark.records.files import read_record
from benchmark.records.integrity import integrity_problems, record_digest
from benchmark.records.store import collect

GRID = (
    "name: sealed\nbase: {dataset: {name: digits, size: 8}, backbone: {name: resnet_micro, width: 4},"
    " partition: iid, fl: {num_clients: 2, rounds: 1}, tasks: [knn]}\n"
    "method_common: {batch_size: 32}\naxes: {method: [fedavg_simclr, no_pretrain], seed: [0]}\n"
)
SECRET = "fake-api-key-0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> Path:
    """The tiny grid run once with W&B offline and an API key in the environment."""
    tmp = tmp_path_factory.mktemp("offline")
    grid = tmp / "sealed.yaml"
    grid.write_text(GRID)
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_API_KEY", SECRET)
    mp.setenv("WANDB_SILENT", "true")
    try:
        summary = run_grid(
            str(grid),
            root=tmp / "runs",
            options=RunOptions(device="cpu", wandb=True),
            launcher_config={"workers": 1},
        )
    finally:
        mp.undo()
    assert summary.count("done") == 2 and summary.exit_code == 0
    return tmp / "runs"


def _records(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("record.json") if "wandb" not in p.parts)


def test_the_runner_seals_every_record(offline_run: Path) -> None:
    for path in _records(offline_run):
        record = read_record(path)
        assert record.digest == record_digest(record) and not integrity_problems(record)
        assert (
            record.tracking is not None
            and record.tracking.mode == "offline"
            and record.tracking.run_id
        )


def test_offline_runs_collect_from_their_wandb_folders_and_the_site_shows_exactly_them(
    offline_run: Path, tmp_path: Path
) -> None:
    only_wandb = tmp_path / "from-wandb"
    for run_folder in offline_run.rglob("offline-run-*"):
        shutil.copytree(run_folder, only_wandb / run_folder.name)
    # only W&B's copies
    assert not [p for p in only_wandb.rglob("record.json") if "files" not in p.parts]
    copied, skipped = collect(only_wandb, tmp_path / "results")
    assert len(copied) == 2 and not skipped
    want = {read_record(p).cell_id for p in _records(offline_run)}
    assert {read_record(p).cell_id for p in copied} == want
    again, _ = collect(only_wandb, tmp_path / "results")
    assert again == []  # rerunning copies nothing twice
    from leaderboard.build import build_model

    model = build_model([tmp_path / "results"])
    assert {r.cell_id for _, r in model.records} == want and not model.skipped


def test_the_api_key_never_enters_a_record_a_run_folder_or_a_page(
    offline_run: Path, tmp_path: Path
) -> None:
    from leaderboard.__main__ import main as lb_main

    assert lb_main(["build", "--results", str(offline_run), "--out", str(tmp_path / "site")]) == 0
    for folder in (offline_run, tmp_path / "site"):
        for path in folder.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def _edit(path: Path, change) -> None:
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw, indent=2))


EDITS = {
    "score": lambda raw: raw["scores"][0]["values"].__setitem__("top1", 99.5),
    "config value": lambda raw: raw["cell"]["fl"].__setitem__("rounds", 7),
    "environment": lambda raw: raw["env"].__setitem__("torch", "9.9"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_record_is_refused_by_collect_and_kept_out_of_every_table(
    edit: str, offline_run: Path, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    shutil.copytree(offline_run, root, ignore=shutil.ignore_patterns("wandb"))
    target = next(p for p in _records(root) if read_record(p).method == "fedavg_simclr")
    _edit(target, EDITS[edit])
    copied, skipped = collect(root, tmp_path / "results")
    assert len(copied) == 1 and [s.path for s in skipped] == [target]
    assert "digest mismatch" in skipped[0].reason
    from leaderboard.build import build_model

    model = build_model([root])
    assert [r.method for _, r in model.records] == ["no_pretrain"]
    assert any(s.path == target and "digest mismatch" in s.reason for s in model.skipped)


def test_an_edited_record_and_sidecar_fail_submit(offline_run: Path, tmp_path: Path) -> None:
    """Editing the score file beside the record too no longer passes: the record's own digest does
    not match."""
    from benchmark.submission.submit_records import submit

    root = tmp_path / "runs"
    shutil.copytree(offline_run, root, ignore=shutil.ignore_patterns("wandb"))
    target = next(p for p in _records(root) if read_record(p).method == "fedavg_simclr")
    _edit(target, EDITS["score"])
    for sidecar in (target.parent / "scores").glob("*.json"):
        _edit(sidecar, lambda raw: raw.get("values", {}).__setitem__("top1", 99.5))
    report = submit([target], track="digits-smoke-knn", out=tmp_path / "bundle", reevaluate=False)
    assert not report.ok and "digest mismatch" in report.format()


# ---- the online API at its boundary --------------------------------------------------------------
class FakeFile:
    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text
        self.size = len(text.encode())  # what the W&B API announces before a download

    def download(self, root: str, replace: bool = False) -> None:
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / self.name).write_text(self.text)


class FakeRun:
    def __init__(self, run_id: str, files: list[FakeFile], state: str = "finished") -> None:
        self.id, self._files, self.state = run_id, files, state

    def files(self) -> list[FakeFile]:
        return list(self._files)


class FakeRuns:
    """wandb.Api().runs: iterating fetches page after page (per_page runs each)."""

    def __init__(self, runs: list[FakeRun], per_page: int) -> None:
        self.runs, self.per_page, self.pages_fetched = runs, per_page, 0

    def __iter__(self):
        for start in range(0, len(self.runs), self.per_page):
            self.pages_fetched += 1
            yield from self.runs[start : start + self.per_page]


class FakeApi:
    def __init__(self, runs: list[FakeRun], page: int = 2) -> None:
        self._runs, self.page, self.calls = runs, page, []

    def runs(self, path: str, filters: dict | None = None, per_page: int = 50) -> FakeRuns:
        self.calls.append((path, dict(filters or {})))
        self.last = FakeRuns(self._runs, self.page)
        return self.last


def test_collect_from_the_wandb_api_pages_and_lists_what_it_leaves(
    offline_run: Path, tmp_path: Path
) -> None:
    from benchmark.submission.wandb_collect import collect_wandb

    texts = [p.read_text() for p in _records(offline_run)]
    edited = json.loads(texts[0])
    edited["scores"][0]["values"]["top1"] = 99.5
    runs = [
        FakeRun("a", [FakeFile("output.log", "x"), FakeFile("record.json", texts[0])]),
        FakeRun("b", [FakeFile("record.json", texts[1])]),
        FakeRun("c", [FakeFile("output.log", "x")]),  # a run without a record
        # a record that fails validation
        FakeRun("d", [FakeFile("record.json", json.dumps(edited))]),
        FakeRun("e", [], state="running"),
    ]
    api = FakeApi(runs, page=2)
    copied, skipped = collect_wandb("me/proj/sealed", tmp_path / "results", api=api)
    assert api.calls == [("me/proj", {"group": "sealed"})] and api.last.pages_fetched == 3
    assert len(copied) == 2
    reasons = {str(s.path).rsplit("/", 1)[-1]: s.reason for s in skipped}
    assert set(reasons) == {"c", "d", "e"}
    assert (
        "no record.json" in reasons["c"]
        and "digest mismatch" in reasons["d"]
        and "running" in reasons["e"]
    )
    again, _ = collect_wandb("me/proj", tmp_path / "results", api=FakeApi(runs))
    assert again == []


def test_bad_wandb_sources_are_usage_errors() -> None:
    from benchmark.core.errors import UsageError
    from benchmark.submission.wandb_collect import parse_source

    assert parse_source("me/proj") == ("me", "proj", None) and parse_source("me/proj/g") == (
        "me",
        "proj",
        "g",
    )
    with pytest.raises(UsageError, match="ENTITY/PROJECT"):
        parse_source("justone")


@pytest.mark.parametrize(
    "version,message", [(99, "newer fssl-bench"), (0, "not a version any fssl-bench wrote")]
)
def test_schema_messages_name_the_one_thing_that_helps(
    version: int, message: str, tmp_path: Path
) -> None:
    from benchmark.records.schema import RecordError, from_json
    from benchmark.submission.checks import schema_message

    assert message in schema_message(version)
    with pytest.raises(RecordError, match=message):
        from_json(json.dumps({"schema_version": version}))
