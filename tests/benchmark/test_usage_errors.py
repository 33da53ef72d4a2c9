"""Mistakes stop at the door: one line, exit code 2, nothing written — and honest exit codes after a
run (0 all done or skipped, 1 some cell failed, now or before). One table of cases, each run through
``main``."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.cli import main

TINY = (
    "name: tiny\nbase: {dataset: {name: digits, size: 8}, backbone: {name: resnet_micro, width: 4},"
    " partition: iid, fl: {num_clients: 2, rounds: 1}, tasks: [knn]}\n"
    "method_common: {batch_size: 32}\naxes: {method: [no_pretrain], seed: [0]}\n"
)


def _grid(tmp_path: Path, text: str = TINY) -> str:
    path = tmp_path / "g.yaml"
    path.write_text(text)
    return str(path)


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


CASES = {
    "device tpu": (["--device", "tpu"], "--device 'tpu' is not one of"),
    "device cuda without a GPU": (["--device", "cuda"], "torch sees no CUDA device"),
    "only unknown value": (["--only", "method=fedsimsaim"], "no such method"),
    "only unknown key": (["--only", "methd=no_pretrain"], "did you mean 'method'"),
    "only matches nothing": (["--only", "seed=7"], "matches no cell"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_usage_errors_stop_at_the_door(case: str, tmp_path: Path, capsys, monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    extra, message = CASES[case]
    root = tmp_path / "runs"
    code, err = _run(
        [
            "run",
            "--grid",
            _grid(tmp_path),
            "--root",
            str(root),
            "--no-wandb",
            "--workers",
            "1",
            *extra,
        ],
        capsys,
    )
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not root.exists()


def test_negative_seed_in_a_grid_is_rejected_at_expansion(tmp_path: Path, capsys) -> None:
    code, err = _run(
        [
            "run",
            "--grid",
            _grid(tmp_path, TINY.replace("seed: [0]", "seed: [-3]")),
            "--root",
            str(tmp_path / "runs"),
            "--dry-run",
        ],
        capsys,
    )
    assert code == 2 and "seed must be a non-negative integer, got -3" in err


def test_malformed_yaml_names_file_line_and_column(tmp_path: Path, capsys) -> None:
    path = _grid(tmp_path, "name: x\nbase: {a: 1\naxes: b: c\n")
    code, err = _run(["run", "--grid", path, "--dry-run"], capsys)
    assert code == 2 and f"{path}:" in err and "not valid YAML" in err
    line_col = err.split(f"{path}:")[1].split(":")[:2]
    assert all(part.strip().isdigit() for part in line_col), err


def test_read_only_root_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """A root the OS refuses to write (EACCES on the write probe; permission bits do not stop root,
    so the refusal is simulated where the OS would raise it)."""
    import errno

    real = Path.write_text

    def refuse(self, *a, **k):
        if self.name.startswith(".write-probe"):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", refuse)
    root = tmp_path / "ro" / "runs"
    code, err = _run(
        ["run", "--grid", _grid(tmp_path), "--root", str(root), "--no-wandb", "--workers", "1"],
        capsys,
    )
    assert (
        code == 2
        and "not writable (Permission denied)" in err
        and str(root) in err
        and len(err.splitlines()) == 1
    )


def test_unwritable_root_is_one_line(tmp_path: Path, capsys) -> None:
    """A root whose parent is a file cannot be created (works as root too)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, err = _run(
        [
            "run",
            "--grid",
            _grid(tmp_path),
            "--root",
            str(blocker / "runs"),
            "--no-wandb",
            "--workers",
            "1",
        ],
        capsys,
    )
    assert (
        code == 2
        and "not writable" in err
        and str(blocker / "runs") in err
        and len(err.splitlines()) == 1
    )


def test_root_under_a_missing_parent_is_created_and_said_once(tmp_path: Path, capsys) -> None:
    root = tmp_path / "a" / "b" / "runs"
    code, err = _run(
        ["run", "--grid", _grid(tmp_path), "--root", str(root), "--no-wandb", "--workers", "1"],
        capsys,
    )
    assert code == 0 and err.count("created run root") == 1 and root.is_dir()


def test_exit_code_is_1_when_a_cell_failed_now_or_before(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from benchmark.engine import runner

    root = tmp_path / "runs"
    grid = _grid(tmp_path)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(runner, "prepare", boom)
    code, _ = _run(
        ["run", "--grid", grid, "--root", str(root), "--no-wandb", "--workers", "1"], capsys
    )
    assert code == 1
    monkeypatch.undo()
    code, err = _run(
        ["run", "--grid", grid, "--root", str(root), "--no-wandb", "--workers", "1"], capsys
    )
    assert code == 1 and "--retry-failed" in err  # left alone, and said so
    # status: the same policy
    assert _run(["status", "--grid", grid, "--root", str(root)], capsys)[0] == 1
    code, _ = _run(
        [
            "run",
            "--grid",
            grid,
            "--root",
            str(root),
            "--no-wandb",
            "--workers",
            "1",
            "--retry-failed",
        ],
        capsys,
    )
    assert code == 0
    assert _run(["status", "--grid", grid, "--root", str(root)], capsys)[0] == 0


def test_a_diverged_cell_is_exit_code_1() -> None:
    from benchmark.commands.run import RunSummary
    from benchmark.launchers.execute import CellOutcome

    def outcome(status: str) -> CellOutcome:
        return CellOutcome(cell_id="c", status=status)

    assert RunSummary("g", Path("."), 2, 0, (outcome("done"), outcome("done"))).exit_code == 0
    assert RunSummary("g", Path("."), 2, 0, (outcome("done"), outcome("diverged"))).exit_code == 1
    assert RunSummary("g", Path("."), 2, 1, (outcome("done"),), failed_before=1).exit_code == 1


def test_check_method_rounds_0_and_submit_without_track_are_usage_errors(
    tmp_path: Path, capsys
) -> None:
    assert _run(["check-method", "fedavg_simclr", "--rounds", "0"], capsys)[0] == 2
    code, err = _run(["submit", str(tmp_path)], capsys)
    assert code == 2 and "--track" in err


def test_prefetch_offline_is_one_fast_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, err = _run(["prefetch", "cifar10"], capsys)
    assert code == 2 and "switched off" in err and len(err.splitlines()) == 1


def test_leaderboard_build_of_a_missing_folder_is_exit_2(tmp_path: Path, capsys) -> None:
    from leaderboard.__main__ import main as lb_main

    assert (
        lb_main(["build", "--results", str(tmp_path / "nope"), "--out", str(tmp_path / "site")])
        == 2
    )
    assert "no such folder" in capsys.readouterr().err and not (tmp_path / "site").exists()


@pytest.mark.parametrize(
    "params,message",
    [
        ({"lr": 0.0}, "lr must be > 0"),
        ({"batch_size": 0}, "batch_size must be"),
        ({"distill_epochs": 0}, "distill_epochs must be >= 1"),
    ],
)
def test_common_numeric_fields_are_checked_for_every_method(params: dict, message: str) -> None:
    from benchmark.commands.check_method import smoke_cell
    from benchmark.core.config import ConfigError

    # DecSLConfig has no check of its own
    name = "flesd" if "distill_epochs" in params else "dec_sl"
    with pytest.raises(ConfigError, match=message):
        smoke_cell(name, method_params=params)


@pytest.mark.parametrize("cli", ["benchmark", "leaderboard"])
def test_every_option_of_every_command_has_help(cli: str) -> None:
    import argparse

    from benchmark.cli import _parser as benchmark_parser
    from leaderboard.__main__ import _parser as leaderboard_parser

    parser = {"benchmark": benchmark_parser, "leaderboard": leaderboard_parser}[cli]()
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [
                    f"{name} {a.option_strings or a.dest}"
                    for a in sub._actions
                    if a.help is None and not isinstance(a, argparse._HelpAction)
                ]
    assert not missing, missing


def test_leaderboard_lists_the_tracks_exactly_as_benchmark_does(tmp_path: Path, capsys) -> None:
    import yaml

    from leaderboard.__main__ import main as lb_main
    from leaderboard.site_config import DEFAULT_TRACKS

    assert lb_main(["list", "tracks"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert main(["list", "tracks"]) == 0
    assert capsys.readouterr().out.splitlines() == listed  # one formatter, two commands
    tracks = yaml.safe_load(DEFAULT_TRACKS.read_text())["tracks"]
    assert [line.split()[0] for line in listed] == [t["id"] for t in tracks]
    digits = next(line for line in listed if line.startswith("digits-smoke-knn "))
    assert "(digits, knn, knn@v1)" in digits

    mine = tmp_path / "tracks.yaml"
    mine.write_text("tracks:\n- {id: my-track, title: Mine, dataset: digits, task: knn}\n")
    assert lb_main(["list", "tracks", "--tracks", str(mine)]) == 0
    assert capsys.readouterr().out.split() == [
        "my-track",
        "Mine",
        "(digits,",
        "knn,",
        "any",
        "card)",
    ]
    assert lb_main(["list", "tracks", "--tracks", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope.yaml" in err
