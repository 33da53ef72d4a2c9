"""Every setting a method declares moves what it trains (issue 46): for every registered method and
every field of its config (nested ``augment.*`` fields included), a changed value changes the
method's first round on a tiny cell (two clients of digits 16×16, a step or two each, micro
backbone), unless the method declares the field inert there (``inert_settings``, with the reason
and, where it can, the settings under which it is live, which are checked too).

Parametrised over the registry, so a new method and a new field are covered without an edit here;
``check-method`` runs the same check on a plugin (``benchmark.commands.live_settings``).
"""

from __future__ import annotations

import functools

import pytest

from benchmark.commands.live_settings import LiveCheck, format_outcomes, setting_paths
from benchmark.contracts.registries import METHODS, load_builtins

load_builtins()


def _fields() -> list[tuple[str, str]]:
    out = []
    for name in METHODS.names():
        cls = METHODS.get(name)
        out += [(name, path) for path, _, _ in setting_paths(cls.Config())]
    return out


@functools.cache
def check(method: str) -> LiveCheck:
    return LiveCheck(method)


@pytest.mark.parametrize(("method", "path"), _fields())
def test_a_declared_setting_moves_the_first_round_or_is_declared_inert(
    method: str, path: str
) -> None:
    outcome = check(method).field(path)
    assert outcome.ok, format_outcomes([outcome])


@pytest.mark.parametrize("method", METHODS.names())
def test_every_inert_declaration_names_a_config_field(method: str) -> None:
    stale = check(method).undeclared_names()
    assert not stale, format_outcomes(stale)


def test_a_setting_the_method_does_not_read_fails_the_check(monkeypatch) -> None:
    """The check itself: FeatARC whose λ is never read (the config holds 1.0 whatever is asked, as
    survivor 2 of issue 46 read a constant) reports ``reg_scale`` dead; declaring a field inert
    that does move the round (τ) is reported stale."""
    from benchmark.contracts.method import Inert
    from methods import featarc

    real = featarc.FeatARCConfig.__post_init__

    def ignore_lambda(self) -> None:
        real(self)
        object.__setattr__(self, "reg_scale", 1.0)

    monkeypatch.setattr(featarc.FeatARCConfig, "__post_init__", ignore_lambda)
    monkeypatch.setattr(featarc.FeatARC, "inert_settings", {"tau": Inert("claimed")})
    check = LiveCheck("featarc")
    assert check.field("reg_scale").status == "dead"
    assert check.field("tau").status == "stale"


def test_check_method_reports_the_live_settings_of_a_plugin(monkeypatch) -> None:
    """``check-method`` runs the same check on a plugin. The toy plugin (tests/plugins) declares
    nothing: its ``augment.blur_*`` settings inherit ``AugmentConfig``'s own declaration (read only
    when blur_p > 0; issue 57: before, every method had to repeat it, and a plugin that did not
    failed). A field of the plugin's own config that nothing reads still fails, by name; a
    declaration in the config itself covers it."""
    import dataclasses
    import importlib.util
    import sys
    from pathlib import Path

    from benchmark.commands.check_method import check_method
    from benchmark.contracts.method import Inert

    path = (
        Path(__file__).resolve().parents[1]
        / "plugins/fssl_toy_plugin/src/fssl_toy_plugin/method.py"
    )
    spec = importlib.util.spec_from_file_location("_toy_plugin_live", path)
    toy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, toy)
    spec.loader.exec_module(toy)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class DeadConfig(toy.ToyPluginConfig):
        unused: float = 1.0  # read by nothing

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class DeclaredConfig(DeadConfig):
        pass

    # a class attribute, as `inert_settings: ClassVar[dict] = {...}` in a plugin's module declares it
    DeclaredConfig.inert_settings = {"unused": Inert("kept for the paper's table")}

    class UndeclaredToy(toy.ToyPlugin):
        name = "_undeclared_toy"

    class DeadToy(toy.ToyPlugin):
        name = "_dead_toy"
        Config = DeadConfig

    class DeclaredToy(toy.ToyPlugin):
        name = "_declared_toy"
        Config = DeclaredConfig

    for cls in (UndeclaredToy, DeadToy, DeclaredToy):
        monkeypatch.setitem(METHODS._items, cls.name, cls)
    fast = {"max_steps": 2}
    good = check_method("_undeclared_toy", rounds=1, knn=False, method_params=fast, live=True)
    assert good.result("live_settings").status == "pass", good.format()
    assert "2 declared inert" in good.result("live_settings").detail
    bad = check_method("_dead_toy", rounds=1, knn=False, method_params=fast, live=True)
    assert bad.failed == ["live_settings"], bad.format()
    detail = bad.result("live_settings").detail
    assert "unused dead" in detail and "blur" not in detail
    fixed = check_method("_declared_toy", rounds=1, knn=False, method_params=fast, live=True)
    assert fixed.result("live_settings").status == "pass", fixed.format()


def test_augment_config_declares_its_blur_settings_for_every_method() -> None:
    """The declaration lives with the config that owns the fields, re-rooted under the method's
    field; a method's own declaration of the same path wins; under blur_p > 0 the inherited
    declaration does not make a live field stale (it is live there)."""
    from benchmark.commands.live_settings import config_declarations
    from benchmark.data.augment import AugmentConfig
    from methods.orchestra import OrchestraConfig

    own = config_declarations(AugmentConfig())
    assert set(own) == {"blur_sigma", "blur_kernel"}
    assert own["blur_sigma"].live_with == {"blur_p": 0.5}
    orchestra = config_declarations(OrchestraConfig())
    assert {k for k in orchestra if k.endswith("blur_sigma")} == {
        "augment_target.blur_sigma",
        "augment_online.blur_sigma",
    }
    assert orchestra["augment_target.blur_kernel"].live_with == {"augment_target": {"blur_p": 0.5}}
    # Orchestra's views blur (blur_p 0.5 / 0.1): there the fields are live, not stale
    orch = check("orchestra")
    assert orch.field("augment_target.blur_sigma").status == "live"
