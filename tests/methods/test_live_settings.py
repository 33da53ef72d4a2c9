"""Every setting a method declares moves what it trains (issue 46): for every registered method and
every field of its config (nested ``augment.*`` fields included), a changed value changes the
method's first round on a tiny cell (two clients of digits 16×16, a step or two each, micro
backbone), unless the method declares the field inert there (``inert_settings``, with the reason
and, where it can, the settings under which it is live, which are checked too).

Parametrised over the registry, so a new method and a new field are covered without an edit here;
``check-method`` runs the same check on a plugin (``benchmark.tools.live_settings``).
"""

from __future__ import annotations

import functools

import pytest

from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.tools.live_settings import LiveCheck, format_outcomes, setting_paths

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
    """The check itself: FeatARC with λ ignored (the step reads a constant 1.0, as survivor 2 of
    issue 46 read 0.5) reports ``reg_scale`` dead; a declaration of it as inert without a reason
    to hold is reported stale when the field does move the round."""
    from benchmark.contracts.method import Inert
    from methods import featarc

    fresh = LiveCheck("featarc")
    assert fresh.field("reg_scale").status == "live"

    real = featarc.FeatARCConfig.__post_init__

    def ignore_lambda(self) -> None:
        real(self)
        if self.reg_scale != 0:
            object.__setattr__(self, "reg_scale", 1.0)

    monkeypatch.setattr(featarc.FeatARCConfig, "__post_init__", ignore_lambda)
    assert LiveCheck("featarc").field("reg_scale").status == "dead"
    monkeypatch.undo()

    monkeypatch.setattr(featarc.FeatARC, "inert_settings", {"tau": Inert("claimed", live_with={})})
    stale = LiveCheck("featarc").field("tau")
    assert stale.status == "stale", stale
