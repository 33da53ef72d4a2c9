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


class _Dist:
    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version


class _EntryPoint:
    def __init__(self, name: str, value: str, dist: str, version: str = "0.1") -> None:
        self.name, self.value, self.dist = name, value, _Dist(dist, version)


def _with_plugins(monkeypatch: pytest.MonkeyPatch, *eps: _EntryPoint) -> Registry:
    import benchmark.core.registry as registry_mod

    monkeypatch.setattr(registry_mod.metadata, "entry_points", lambda group: list(eps))
    reg: Registry = Registry("method", entry_point_group="fssl_bench.methods")

    @reg.register("fedavg_simclr")
    class BuiltIn:
        pass

    return reg


def test_two_distributions_registering_one_name_are_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: the first one found used to win, silently."""
    reg = _with_plugins(
        monkeypatch,
        _EntryPoint("simsiam", "fssl_a.m:SimSiam", "fssl-a", "1.0"),
        _EntryPoint("simsiam", "fssl_b.m:SimSiam", "fssl-b", "2.0"),
        _EntryPoint("byol", "fssl_a.m:BYOL", "fssl-a", "1.0"),
    )
    for use in (reg.get, reg.canonical):
        with pytest.raises(DuplicateName) as err:
            use("simsiam")
        msg = str(err.value)
        assert "\n" not in msg
        assert "fssl-a 1.0 (fssl_a.m:SimSiam)" in msg and "fssl-b 2.0 (fssl_b.m:SimSiam)" in msg
    assert reg.clash("byol") is None  # the other names of those distributions are untouched
    assert reg.canonical("byol") == "byol"


def test_a_plugin_cannot_take_a_built_in_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Issue 47: a plugin registering a built-in's name disabled the built-in (issue 39 made it
    refuse both). The built-in is kept and used; the plugin is refused with one warning naming its
    distribution."""
    reg = _with_plugins(monkeypatch, _EntryPoint("fedavg_simclr", "evil.m:Fake", "fssl-evil"))
    builtin = reg.get("fedavg_simclr")
    assert builtin.__name__ == "BuiltIn" and reg.canonical("fedavg_simclr") == "fedavg_simclr"
    assert reg.clash("fedavg_simclr") is None
    reg.get("fedavg_simclr"), reg.names()  # used again: no second warning
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1, warnings
    assert "fssl-evil 0.1 (evil.m:Fake)" in warnings[0] and "refused" in warnings[0]
    assert reg.refused() == {"fedavg_simclr": ["fssl-evil 0.1 (evil.m:Fake)"]}


def test_a_plugin_loaded_before_the_built_ins_is_refused_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Entry points read first (a name looked up before the built-ins were imported): the built-in's
    registration takes the name back, and the plugin is refused all the same."""
    import benchmark.core.registry as registry_mod

    monkeypatch.setattr(
        registry_mod.metadata,
        "entry_points",
        lambda group: [_EntryPoint("fedema", "evil.m:Fake", "fssl-evil")],
    )
    reg: Registry = Registry("method", entry_point_group="fssl_bench.methods")
    assert reg.names() == ["fedema"]
    builtin = reg.register("fedema")(type("FedEMA", (), {}))
    assert reg.get("fedema") is builtin and reg.names() == ["fedema"]
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1 and "fssl-evil 0.1 (evil.m:Fake)" in warnings[0], warnings


def test_one_distribution_found_twice_is_no_clash(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = _EntryPoint("simsiam", "fssl_a.m:SimSiam", "fssl-a")
    reg = _with_plugins(monkeypatch, ep, ep)
    assert reg.clash("simsiam") is None
