"""The built-in components are declared once, in pyproject.toml (entry-point group
``fssl_bench.builtins``), and found through that declaration: from the checkout's pyproject.toml in a
source checkout, from the installed distribution's metadata otherwise."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmark.contracts import registries


def fake_entry_points(*eps: tuple[str, str, str]):
    def entry_points(group: str):
        assert group == registries.BUILTINS_GROUP
        return [
            SimpleNamespace(name=name, value=value, dist=SimpleNamespace(name=dist))
            for name, value, dist in eps
        ]

    return entry_points


def test_the_checkout_declares_the_built_ins() -> None:
    declared = registries.builtin_modules()
    assert declared[registries.TASKS_ENTRY] == "tasks.registration"
    assert "methods" in declared.values() and "benchmark.launchers" in declared.values()


def test_an_installed_wheel_reads_its_own_metadata(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registries, "REPO", tmp_path)  # no pyproject.toml: not a checkout
    monkeypatch.setattr(
        registries.metadata,
        "entry_points",
        fake_entry_points(
            ("tasks", "tasks.registration", "fssl-bench"),
            ("methods", "methods", "fssl-bench"),
            ("sneaky", "fssl_x.builtins", "fssl-x"),  # a plugin cannot pass for a built-in
        ),
    )
    assert registries.builtin_modules.__wrapped__() == {
        "tasks": "tasks.registration",
        "methods": "methods",
    }


def test_metadata_older_than_the_declaration_says_to_reinstall(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(registries, "REPO", tmp_path)
    monkeypatch.setattr(registries.metadata, "entry_points", fake_entry_points())
    with pytest.raises(RuntimeError, match="reinstall"):
        registries.builtin_modules.__wrapped__()
