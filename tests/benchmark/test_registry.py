from __future__ import annotations

import pytest

from benchmark.core.registry import DuplicateName, Registry, UnknownName


def make() -> Registry:
    reg: Registry = Registry("widget")

    @reg.register("alpha", aliases=("a",))
    class Alpha:
        pass

    reg.register("lazy", target="collections:OrderedDict")(None)
    return reg


def test_get_alias_and_canonical() -> None:
    reg = make()
    assert reg.get("a") is reg.get("alpha")
    assert reg.canonical("a") == "alpha"
    assert reg.names() == ["alpha", "lazy"]


def test_lazy_target_is_imported_on_first_get() -> None:
    from collections import OrderedDict

    assert make().get("lazy") is OrderedDict


def test_unknown_name_suggests_and_lists() -> None:
    with pytest.raises(UnknownName) as err:
        make().get("alhpa")
    msg = str(err.value)
    assert "Did you mean 'alpha'?" in msg and "Known: alpha, lazy" in msg


def test_duplicates_raise() -> None:
    reg = make()
    with pytest.raises(DuplicateName):
        reg.register("a")(object)


def test_glob_and_freeze() -> None:
    reg = make()
    assert reg.names("al*") == ["alpha"]
    reg.freeze()
    with pytest.raises(ValueError):
        reg.register("beta")(object)


def test_project_registries_are_populated() -> None:
    from benchmark.contracts.registries import (
        BACKBONES,
        DATASETS,
        METHODS,
        PARTITIONERS,
        TASKS,
        load_builtins,
    )

    load_builtins()
    assert {"fedavg_simclr", "no_pretrain", "central_ssl", "local_ssl", "dec_sl"} <= set(
        METHODS.names()
    )
    assert {"knn", "linear_probe"} <= set(TASKS.names())
    assert {
        "iid",
        "niid_bench_labeldir",
        "orchestra_sinkhorn",
        "decssl_band",
        "easyfl_class",
    } <= set(PARTITIONERS.names())
    assert PARTITIONERS.canonical("dirichlet") == "niid_bench_labeldir"
    assert METHODS.canonical("random_init") == "no_pretrain"
    assert {"digits", "cifar10", "cifar100"} <= set(DATASETS.names())
    assert {"resnet18_cifar", "resnet18", "resnet50", "resnet_micro"} <= set(BACKBONES.names())


def test_a_registry_with_a_base_refuses_other_classes() -> None:
    """The METHODS registry only takes MethodBase subclasses: the harness reads their declared
    capabilities."""
    from benchmark.contracts.method import MethodBase
    from benchmark.contracts.registries import METHODS
    from benchmark.core.registry import Registry, RegistryError

    reg: Registry = Registry("method", base=MethodBase)
    with pytest.raises(RegistryError, match="must subclass benchmark.contracts.method.MethodBase"):
        reg.register("plain")(type("Plain", (), {}))
    reg.register("ok")(type("Ok", (MethodBase,), {}))
    reg.register("lazy", target="collections:OrderedDict")
    with pytest.raises(RegistryError, match="must subclass"):
        reg.get("lazy")  # a lazy target (or an entry point) is checked when it is first loaded
    assert METHODS.base is MethodBase
