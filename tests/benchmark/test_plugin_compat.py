"""A plugin that worked keeps working (issue 57, docs/adding-a-method.md §10): a frozen copy of a
plugin written against each earlier minor version of plugin API 2 passes ``check-method`` under the
current one, every check included (``live_settings``, the state checks, kNN), and its broken copies
still fail naming their piece.

- API 2.2: ``tests/plugins/api_2_2`` (FedMoCo without ``Inert``, ``inert_settings`` or
  ``evolving_client_state``; under 2.3 it failed ``live_settings`` on ``AugmentConfig``'s blur
  settings and ``state_evolves`` on its ring pointer).
- API 2.3: ``tests/plugins/fssl_moco_plugin`` (FedMoCo declaring ``evolving_client_state``, no
  ``inert_settings``).
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmark.contracts.registries import METHODS, load_builtins

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
# (API version, src folder, module, the passing class's registered name)
FROZEN = [
    ("2.2", PLUGINS / "api_2_2" / "src", "fssl_moco_api22.method", "fedmoco_api22"),
    ("2.3", PLUGINS / "fssl_moco_plugin" / "src", "fssl_moco_plugin.method", "fedmoco"),
]
# the 2.2 copy is frozen: editing it to pass a check would hide the broken promise it guards
API22_SHA256 = "fc2830ce758941a258aef96e3e196765bf6fdfdf8ac7d0999d0f126fc5d1e4ba"
# names plugin API 2.3 added that a 2.2 plugin cannot have used
ADDED_IN_23 = ("Inert", "inert_settings", "evolving_client_state", "state_read_exempt")


@pytest.fixture(scope="module")
def frozen() -> Iterator[dict[str, Any]]:
    """Each frozen plugin's module, its classes registered as an installed plugin's would be."""
    load_builtins()
    modules, added = {}, []
    for version, src, module, _ in FROZEN:
        sys.path.insert(0, str(src))
        modules[version] = mod = importlib.import_module(module)
        for cls in (mod.FedMoCo, mod.QueueReinitialised, mod.PointerReset, mod.KeyFromBroadcast):
            METHODS._items[cls.name] = cls
            added.append(cls.name)
    try:
        yield modules
    finally:
        for name in added:
            METHODS._items.pop(name, None)
        for _, src, _, _ in FROZEN:
            sys.path.remove(str(src))


def test_the_api_22_plugin_is_frozen_and_names_nothing_added_later() -> None:
    path = PLUGINS / "api_2_2" / "src" / "fssl_moco_api22" / "method.py"
    text = path.read_text(encoding="utf-8")
    assert hashlib.sha256(text.encode()).hexdigest() == API22_SHA256, f"{path} was edited"
    code = text.split('"""', 2)[2]  # past the module docstring, which names them
    assert not [n for n in ADDED_IN_23 if n in code]


@pytest.mark.parametrize(("version", "name"), [(v, n) for v, _, _, n in FROZEN])
def test_a_plugin_of_an_earlier_minor_version_passes_check_method(
    frozen: dict[str, Any], version: str, name: str
) -> None:
    from benchmark.commands.check_method import check_method

    report = check_method(name, rounds=2, knn=True, live=True)
    assert report.failed == [], f"plugin API {version}: " + report.format()
    assert "declared inert" in report.result("live_settings").detail


@pytest.mark.parametrize(
    ("name", "piece"),
    [
        ("fedmoco_api22_queue_reset", "['queue']"),
        ("fedmoco_api22_ptr_reset", "['queue_ptr']"),
        ("fedmoco_api22_key_from_broadcast", "['key']"),
    ],
)
def test_its_broken_copies_still_fail_naming_their_piece(
    frozen: dict[str, Any], name: str, piece: str
) -> None:
    from benchmark.commands.check_method import check_method

    report = check_method(name, rounds=1, knn=False)
    assert report.failed == ["state_read"], report.format()
    assert f"client state {piece} is saved but not read" in report.result("state_read").detail
