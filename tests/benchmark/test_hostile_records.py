"""Issue 39: every accepted number is bound to what trained it, and no record, bundle or grid can
crash, exhaust or fool the tools.

Crafted as in tests/benchmark/test_hostile_bundles.py (issue 33): a real smoke record edited and
sealed again with the project's own functions. Each refusal is one line, exit 2, nothing written
anywhere (the scratch folder's whole tree, TMPDIR inside it, is the same before and after)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmark.contracts.registries import METHODS
from benchmark.records.integrity import seal
from benchmark.records.schema import ResultRecord
from methods.fedavg_simclr import FedAvgSimCLR
from tests.hostile import accept_argv, one_record_bundle, refused, renamed


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
    from benchmark.submission.accept import plugin_problems

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
    for attr in ("_items", "_targets", "_origin", "_clashes"):
        monkeypatch.setattr(METHODS, attr, dict(getattr(METHODS, attr)))
    monkeypatch.setattr(METHODS, "_plugins_loaded", False)


@pytest.mark.parametrize(
    ("method", "needles"),
    [
        ("simsiam", ["fssl-a 0.1 (fssl_a.method:SimSiam)", "fssl-b 0.1 (fssl_b.method:SimSiam)"]),
        ("fedavg_simclr", ["fssl-bench (built in)", "fssl-b 0.1 (fssl_b.method:Fake)"]),
    ],
)
def test_a_name_two_distributions_register_is_refused_naming_both(
    clashing_plugins: None, scratch: Path, capsys, method: str, needles: list[str]
) -> None:
    grid = scratch / "grid.yaml"
    grid.write_text(GRID.replace("METHOD", method))
    refused(
        scratch,
        capsys,
        ["run", "--grid", str(grid), "--root", str(scratch / "runs"), "--device", "cpu"],
        f"method {method!r} is registered by both",
        *needles,
    )


def test_listing_warns_of_a_clash_and_goes_on(clashing_plugins: None, capsys) -> None:
    from benchmark.cli import main

    assert main(["list", "methods"]) == 0
    out, err = capsys.readouterr()
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert "fedema" in names and "simsiam" not in names and "fedavg_simclr" not in names
    warnings = err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: method ") for w in warnings)
