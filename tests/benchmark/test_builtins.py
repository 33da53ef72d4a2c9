"""The built-in components are found one way for every kind: the entry points of the group
``fssl_bench.builtins`` (one package per kind; importing it registers every component of that kind).
An installed wheel reads its own metadata; a source checkout reads ``BUILTIN_MODULES``, the same
table in code, which this file holds equal to pyproject.toml's. Nothing reads pyproject.toml at run
time."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmark.contracts import registries

REPO = Path(__file__).resolve().parents[2]


def declared_in_pyproject() -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return dict(project["entry-points"][registries.BUILTINS_GROUP])


def fake_distribution(monkeypatch, *, located: Path, eps: list[tuple[str, str, str]]) -> None:
    """An installed fssl-bench whose copy of registries.py is ``located``, with entry points
    ``(group, name, value)``."""
    dist = SimpleNamespace(
        locate_file=lambda rel: located,
        entry_points=[SimpleNamespace(group=g, name=n, value=v) for g, n, v in eps],
    )

    def distribution(name: str):
        assert name == registries.DISTRIBUTION
        return dist

    monkeypatch.setattr(registries.metadata, "distribution", distribution)


def test_the_table_in_code_is_pyprojects_entry_point_group() -> None:
    assert registries.BUILTIN_MODULES == declared_in_pyproject()


def test_every_kind_is_a_package_that_registers_on_import() -> None:
    """The entries name packages (one per kind of plugin: methods, tasks, partitioners), each found
    and registered the same way."""
    for name in ("methods", "tasks", "partitioners"):
        module = registries.BUILTIN_MODULES[name]
        assert (REPO / module.replace(".", "/") / "__init__.py").is_file(), module


def test_a_checkout_without_an_installed_distribution_uses_the_table(monkeypatch) -> None:
    def missing(name: str):
        raise registries.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(registries.metadata, "distribution", missing)
    assert list(registries.builtin_modules.__wrapped__().items()) == sorted(
        registries.BUILTIN_MODULES.items()
    )


def test_an_installed_copy_elsewhere_is_not_read(monkeypatch, tmp_path: Path) -> None:
    """An editable install (its metadata as old as its last pip install) or another checkout: the
    code imported is not the installed copy, so its entry points are not this code's."""
    elsewhere = tmp_path / "registries.py"
    elsewhere.write_text("")
    fake_distribution(
        monkeypatch, located=elsewhere, eps=[(registries.BUILTINS_GROUP, "tasks", "old.tasks")]
    )
    assert list(registries.builtin_modules.__wrapped__().items()) == sorted(
        registries.BUILTIN_MODULES.items()
    )


def test_an_installed_wheel_reads_its_own_entry_points(monkeypatch) -> None:
    fake_distribution(
        monkeypatch,
        located=Path(registries.__file__),
        eps=[
            (registries.BUILTINS_GROUP, "tasks", "tasks"),
            (registries.BUILTINS_GROUP, "methods", "methods"),
            ("fssl_bench.methods", "sneaky", "fssl_x:Sneaky"),  # another group: not a built-in
        ],
    )
    assert list(registries.builtin_modules.__wrapped__().items()) == [
        ("methods", "methods"),
        ("tasks", "tasks"),
    ]


def test_a_wheel_without_the_group_says_to_reinstall(monkeypatch) -> None:
    fake_distribution(monkeypatch, located=Path(registries.__file__), eps=[])
    with pytest.raises(RuntimeError, match="reinstall"):
        registries.builtin_modules.__wrapped__()


def test_finding_the_built_ins_reads_no_pyproject(monkeypatch) -> None:
    """An installed wheel has no pyproject.toml, and a checkout's may be another version's: the
    discovery opens none."""
    real_open = Path.open

    def refuse(self: Path, *args, **kwargs):
        if self.name == "pyproject.toml":
            raise AssertionError(f"read {self} at run time")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)  # Path.read_text opens through it
    assert list(registries.builtin_modules.__wrapped__().items()) == sorted(
        registries.BUILTIN_MODULES.items()
    )
