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
