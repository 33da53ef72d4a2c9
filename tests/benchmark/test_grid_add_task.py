"""Issue 57: ``--add-task`` beside ``--add-method``: a plugin task runs on a track's own grid (every
task list of its cells, the per-method ``with: {tasks: ...}`` lists included), the cells pre-train
exactly as the grid's own, and a task the grid already runs is refused."""

from __future__ import annotations

import pytest

from benchmark.cli import main
from benchmark.core.config import ConfigError
from benchmark.grids.expand import expand_grid, load_grid, with_tasks


def test_an_added_task_reaches_every_cell_and_keeps_its_pretraining() -> None:
    spec = load_grid("quickstart")
    before = expand_grid(spec)
    after = expand_grid(with_tasks(spec, ["perclient"]))
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        assert [t.name for t in new.tasks] == [*(t.name for t in old.tasks), "perclient"]
        assert new.pretrain_key == old.pretrain_key  # a finished pre-training is reused
        assert new.cell_id != old.cell_id
    # FedMAE's cells take their own task list (with: {tasks: ...}): the task is added there too
    fedmae = [c for c in after if c.method.name == "fedmae"]
    assert fedmae and all("reconstruction" in {t.name for t in c.tasks} for c in fedmae)


def test_a_task_the_grid_runs_is_refused() -> None:
    with pytest.raises(ConfigError, match="already runs it"):
        with_tasks(load_grid("quickstart"), ["knn"])
    with pytest.raises(ConfigError, match="given twice"):
        with_tasks(load_grid("quickstart"), ["perclient", "perclient"])


@pytest.mark.parametrize("command", ["run", "plan", "status"])
def test_the_commands_that_take_add_method_take_add_task(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "--add-task" in capsys.readouterr().out


def test_run_lists_the_cells_with_the_added_task(tmp_path, capsys) -> None:
    args = ["run", "--grid", "quickstart", "--only", "method=featarc", "--root", str(tmp_path)]
    assert main([*args, "--dry-run", "--add-task", "perclient"]) == 0
    out = capsys.readouterr().out
    assert out.count("tasks=knn,linear_probe,perclient") == 6


def test_submit_takes_a_record_with_an_added_task_as_the_tracks_settings() -> None:
    """A record of ``run --grid quickstart --add-task T`` is the track's cell plus T: ``submit``'s
    settings check passes it; a changed setting of a task the grid runs still fails."""
    from pathlib import Path
    from types import SimpleNamespace

    from benchmark.submission.checks import RecordCheck, check_settings, grid_settings

    track = SimpleNamespace(grid="quickstart")
    settings = grid_settings(track)
    cell = expand_grid(with_tasks(load_grid("quickstart"), ["perclient"]))[0].to_dict()
    check = RecordCheck(Path("record.json"), None)
    check_settings(
        SimpleNamespace(cell=cell, method=cell["method"]["name"]), track, settings, check
    )
    assert check.ok, check.problems
    knn = next(t for t in cell["tasks"] if t["name"] == "knn")
    knn["params"] = {**knn["params"], "k": int(knn["params"]["k"]) + 1}
    check = RecordCheck(Path("record.json"), None)
    check_settings(
        SimpleNamespace(cell=cell, method=cell["method"]["name"]), track, settings, check
    )
    assert not check.ok and "tasks" in str(check.problems)
