"""``reuses`` (benchmark/contracts/method.py ``identity_version``): a method that runs another
method's code carries that method's version in its cell identity, so bumping the reused method's
version cannot leave a stale record."""

from __future__ import annotations

from typing import ClassVar

import pytest

from benchmark.contracts.method import MethodBase, identity_version
from benchmark.contracts.registries import METHODS, load_builtins
from methods.fedavg_simclr import FedAvgSimCLR, FedAvgSimCLRConfig
from methods.fedu import FedU
from tests.helpers import smoke_cell

load_builtins()


class Reuser(MethodBase):
    """A throwaway method that declares it runs FedAvg-SimCLR's code."""

    name: ClassVar[str] = "reuser"
    version: ClassVar[str] = "3"
    Config: ClassVar[type] = FedAvgSimCLRConfig
    reuses: ClassVar[tuple[str, ...]] = ("fedavg_simclr",)


@pytest.fixture
def registered(monkeypatch) -> None:
    monkeypatch.setitem(METHODS._items, Reuser.name, Reuser)


def cell_id(method: str) -> str:
    return smoke_cell(method, tasks=[]).cell_id


def test_reused_method_version_is_part_of_the_cell_id(registered, monkeypatch) -> None:
    current = FedAvgSimCLR.version
    before = cell_id("reuser")
    assert smoke_cell("reuser", tasks=[]).method.version == f"3+fedavg_simclr@{current}"
    monkeypatch.setattr(FedU, "version", "99")  # a method it does not reuse: nothing moves
    assert cell_id("reuser") == before
    monkeypatch.setattr(FedAvgSimCLR, "version", "98")
    assert cell_id("reuser") != before
    assert smoke_cell("reuser", tasks=[]).method.version == "3+fedavg_simclr@98"
    monkeypatch.setattr(FedAvgSimCLR, "version", current)
    assert cell_id("reuser") == before


def test_a_method_that_reuses_nothing_keeps_its_plain_version() -> None:
    for name in METHODS.names():
        cls = METHODS.get(name)
        assert cls.reuses == () and identity_version(cls, METHODS.get) == str(cls.version), name


def _method(name: str, reuses: tuple[str, ...]) -> type:
    return type(name, (MethodBase,), {"name": name, "version": "1", "reuses": reuses})


def test_a_reuse_cycle_is_refused_with_its_chain() -> None:
    direct = {"a": _method("a", ("a",))}
    with pytest.raises(ValueError, match=r"'a' reuses itself: a -> a"):
        identity_version(direct["a"], direct.__getitem__)
    loop = {"a": _method("a", ("b",)), "b": _method("b", ("c",)), "c": _method("c", ("a",))}
    with pytest.raises(ValueError, match=r"'a' reuses itself: a -> b -> c -> a"):
        identity_version(loop["a"], loop.__getitem__)
    # a diamond (two methods reusing one) is not a cycle
    diamond = {
        "a": _method("a", ("b", "c")),
        "b": _method("b", ("d",)),
        "c": _method("c", ("d",)),
        "d": _method("d", ()),
    }
    assert identity_version(diamond["a"], diamond.__getitem__) == "1+b@1+d@1+c@1+d@1"
