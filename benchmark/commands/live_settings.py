"""Every setting a method declares moves what it trains (issue 46): for every field of a method's
config, nested configs (``augment.*``) included, a changed value must change the method's first
round on a tiny cell, unless the method declares the field inert there with a reason
(``MethodBase.inert_settings``; ``export_params`` are inert by declaration too).

The cell is the method's smoke cell (digits 16×16, micro backbone, ``smoke_settings``, batch 16)
cut down to two clients of :data:`CLIENT_SIZES` images and one local epoch: two steps and one. "The
first round" is what a method trains in it: the two clients' uploads (tensors and weight), the states
they keep (local_ssl uploads nothing) and the server's aggregate of the uploads; a round in which no
client takes an optimizer step (Orchestra's initialisation round) is followed by the next, so the
first round that trains is covered too.

How a field is changed (:func:`changes`): a bool is negated and a ``Literal`` takes every other
choice (each must move the round); a number is changed until a change moves it (doubled, halved,
moved by one or 0.1, set to 0, 0.5, 1, 2, 8, 16 or ten times itself); a tuple of numbers has its
first element changed so; an optional field left at ``None`` takes a small value; a nested dataclass
is changed field by field. A change the config or the method rejects is skipped; a field none of
whose changes is valid fails unless declared.

A declaration is checked too: an :class:`~benchmark.contracts.method.Inert` with ``live_with`` or
``from_round`` must move the round under those settings (or by that round); any declaration must
really be inert here (a declared field that moves the round is a stale declaration, and fails).

``python -m benchmark check-method NAME`` runs it (:func:`conformance_result`; ``--no-live`` skips
it); the per-field test is ``tests/methods/test_live_settings.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# two clients of different sizes (so that a weighting shows in the server's aggregate): two steps and
# one at the smoke batch of 16 (two, so that an optimizer's momentum acts; a pooled method's one
# client is the first)
CLIENT_SIZES = (40, 16)
BATCH_SIZE = 16
# images of a public split (FLESD's D_pub): two distillation steps at the smoke sizes
PUBLIC_SIZE = 64
ROUNDS = 2  # a round that trains nobody (Orchestra's initialisation) is followed by round 2


@dataclass(frozen=True)
class FieldOutcome:
    """What changing one field did. ``status``: "live" (a change moved the round), "inert" (declared
    and checked), "dead" (no valid change moved it and nothing declares it), "stale" (declared inert
    but it moves the round), "untestable" (no valid change, undeclared)."""

    path: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("live", "inert")


# ------------------------------------------------------------------------------------------------
# the fields and their changes


def setting_paths(cfg: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, value, type hint) of every init field of the config dataclass ``cfg``, nested
    dataclasses expanded into their own fields."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        if not f.init:
            continue
        value = getattr(cfg, f.name)
        path = prefix + f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from setting_paths(value, path + ".")
        else:
            yield path, value, hints.get(f.name, Any)


def _number_changes(v: float, as_int: bool) -> list[Any]:
    if as_int:
        return [v * 2 if v else 1, v + 1, v - 1, v // 2, 16, 8, 2, 1]
    return [v * 2 if v else 0.5, v / 2, v + 0.1, v - 0.1, 0.5, 0.0, v * 10]


def changes(value: Any, hint: Any) -> list[Any]:
    """Values to try in place of ``value``, each once and none equal to it (for a number the first
    valid one counts; every other ``Literal`` choice and a bool's negation are all tried)."""
    out: list[Any] = []
    for c in _changes(value, hint):
        if c != value and c not in out:
            out.append(c)
    return out


def _changes(value: Any, hint: Any) -> list[Any]:
    if isinstance(value, list):  # a resolved cell's params spell tuples as lists
        value = tuple(value)
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None:
            out: list[Any] = []
            for a in inner:
                if a is int:
                    out += [8, 4, 2]
                elif a is float:
                    out += [0.5, 0.1]
                elif typing.get_origin(a) is Literal:
                    out += list(typing.get_args(a))
            return out
        return _changes(value, inner[0]) if len(inner) == 1 else []
    if origin is Literal:
        return [c for c in args if c != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return _number_changes(value, as_int=True)
    if isinstance(value, float):
        return _number_changes(value, as_int=False)
    if isinstance(value, tuple) and value and all(isinstance(x, (int, float)) for x in value):
        first = value[0]
        as_int = isinstance(first, int) and not isinstance(first, bool)
        return [(c, *value[1:]) for c in _number_changes(first, as_int)]
    return []


def config_declarations(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """The inertness the configs inside ``cfg`` declare for their own fields (a config dataclass's
    ``inert_settings`` class attribute, e.g. :class:`~benchmark.data.augment.AugmentConfig`'s blur
    settings, read only when ``blur_p > 0``), re-rooted under the path at which each config sits:
    ``{"augment.blur_sigma": Inert(..., live_with={"augment": {"blur_p": 0.5}})}``. A method
    inherits these; its own ``inert_settings`` win for the paths they name. The top-level config
    (a method's ``Config``) is included: a plugin may declare its config's fields there too."""
    from benchmark.contracts.method import Inert

    out: dict[str, Any] = {}
    for name, decl in dict(getattr(type(cfg), "inert_settings", None) or {}).items():
        if isinstance(decl, Inert) and decl.live_with and prefix:
            rooted: Mapping[str, Any] = dict(decl.live_with)
            for head in reversed(prefix.rstrip(".").split(".")):
                rooted = {head: rooted}
            decl = dataclasses.replace(decl, live_with=rooted)
        out[prefix + name] = decl
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.init and dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(config_declarations(value, prefix + f.name + "."))
    return out


def with_path(params: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``params`` (a method's config as a mapping) with ``path`` (dotted) set to ``value``."""
    head, _, rest = path.partition(".")
    out = dict(params)
    if rest:
        inner = out.get(head)
        out[head] = with_path(inner if isinstance(inner, Mapping) else {}, rest, value)
    else:
        out[head] = value
    return out


def merged(params: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` updated by ``extra``, nested mappings merged key by key."""
    out = dict(params)
    for k, v in extra.items():
        out[k] = (
            merged(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
        )
    return out


# ------------------------------------------------------------------------------------------------
# the round


def _digest(obj: Any, h: Any) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1)
        h.update(f"{t.dtype}|{tuple(obj.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, Mapping):
        for k in sorted(obj, key=str):
            h.update(f"{k}=".encode())
            _digest(obj[k], h)
    else:
        h.update(repr(obj).encode())


def digest(obj: Any) -> str:
    h = hashlib.sha256()
    _digest(obj, h)
    return h.hexdigest()


@dataclass(frozen=True)
class RoundDigests:
    uploads: str  # the clients' uploads (tensors and weights) and kept states, every round run
    server: str  # the server state after each round run
    steps: int  # optimizer steps the clients took


class LiveCell:
    """The method's smoke cell with two tiny clients, built once (data, partition); then
    :meth:`run` plays its first round (and the next one while no client has taken a step) for any
    method params."""

    def __init__(self, method: str, base_params: Mapping[str, Any] | None = None) -> None:
        from benchmark.commands.smoke import smoke_cell
        from benchmark.contracts.registries import METHODS
        from benchmark.engine.stages import prepare

        self.method = METHODS.canonical(method)
        fields = {f.name for f in dataclasses.fields(METHODS.get(self.method).Config)}
        # the smoke batch, so that the larger client takes two steps (a method's smoke_settings
        # may ask for a larger one, e.g. for a memory to fill)
        batch = {"batch_size": BATCH_SIZE} if "batch_size" in fields else {}
        self.base_params = {**batch, **dict(base_params or {})}
        cell = smoke_cell(
            self.method, rounds=ROUNDS, clients=2, tasks=[], method_params=self.base_params
        )
        self.setup = prepare(cell)
        self.base = self.setup.cell.method.params  # resolved: every field spelled out

    def cell_for(self, params: Mapping[str, Any]) -> Any:
        from benchmark.commands.smoke import smoke_cell

        return smoke_cell(
            self.method, rounds=ROUNDS, clients=2, tasks=[], method_params=dict(params)
        )

    def clients(self) -> list[Any]:
        from benchmark.contracts.types import ClientData
        from benchmark.contracts.unlabeled_view import UnlabeledView

        out = []
        for k, size in enumerate(CLIENT_SIZES[: len(self.setup.clients)]):
            c = self.setup.clients[k]
            n = min(size, c.num_examples)
            out.append(
                ClientData(
                    client_id=c.client_id,
                    num_examples=n,
                    train=UnlabeledView(c.train.images[:n], c.train.mean, c.train.std),
                    labels=None if c.labels is None else c.labels[:n],
                    num_classes=c.num_classes,
                )
            )
        return out

    def run(self, params: Mapping[str, Any], from_round: int = 1) -> RoundDigests:
        """The first round that trains (and every round up to ``from_round``), for the method built
        from ``params`` (the whole resolved config, as ``self.base`` is); raises what the config or
        the method raises."""
        from benchmark.contracts.unlabeled_view import UnlabeledView
        from benchmark.engine.rounds import client_context, server_context
        from benchmark.engine.stages import build_method, check_method_data

        cell = self.cell_for(params)
        check_method_data(cell, self.setup.partition)
        method = build_method(cell, self.setup.inputs)
        s, public = self.setup.settings, self.setup.public
        if public is not None:
            public = UnlabeledView(public.images[:PUBLIC_SIZE], public.mean, public.std)
        clients = self.clients()
        server = method.init_server(server_context(s, 0, public))
        states = {c.client_id: method.init_client(c.client_id, server) for c in clients}
        ups_h, server_h = hashlib.sha256(), hashlib.sha256()
        steps = 0
        for r in range(1, ROUNDS + 1):
            down = method.broadcast(server, server_context(s, r, public))
            ups = {}
            for c in clients:
                ctx = client_context(s, r, c.client_id, public)
                ups[c.client_id], states[c.client_id] = method.client_update(
                    down, states[c.client_id], c, ctx
                )
                up, kept = ups[c.client_id], states[c.client_id]
                # what a client trains: its upload (tensors, weight) and the state it keeps
                # (local_ssl uploads nothing)
                _digest(
                    {"t": dict(up.tensors), "n": up.num_examples, "s": dict(kept.tensors)}, ups_h
                )
            round_steps = sum(int(u.metrics.get("steps", 0)) for u in ups.values())
            steps += round_steps
            server = method.server_aggregate(server, ups, server_context(s, r, public), public)
            _digest({"model": dict(server.model), "extra": dict(server.extra)}, server_h)
            if steps > 0 and r >= from_round:
                break
        return RoundDigests(ups_h.hexdigest(), server_h.hexdigest(), steps)


# ------------------------------------------------------------------------------------------------
# the check


def _moved(a: RoundDigests, b: RoundDigests) -> str:
    """ "" when nothing moved, else what did."""
    what = [
        n
        for n, x, y in (("uploads", a.uploads, b.uploads), ("server", a.server, b.server))
        if x != y
    ]
    return " and ".join(what)


def _try_changes(
    cell: LiveCell,
    params: Mapping[str, Any],
    path: str,
    value: Any,
    hint: Any,
    ref: RoundDigests,
    from_round: int = 1,
) -> tuple[str, str]:
    """("moved" | "still" | "invalid", detail) for the field at ``path`` changed from ``value``
    under ``params``. Every other Literal choice / bool must move the round; a number moves it when
    any of its valid changes does (a threshold moves it only when crossed)."""
    tried: list[str] = []
    still: list[str] = []
    all_choices = typing.get_origin(hint) is Literal or isinstance(value, bool)
    moved_by: list[str] = []
    for new in changes(value, hint):
        try:
            out = cell.run(with_path(params, path, new), from_round)
        except Exception as exc:  # noqa: BLE001 - an invalid change (config or method rejects it)
            tried.append(f"{new!r}: {type(exc).__name__}")
            continue
        what = _moved(ref, out)
        if not what:
            if all_choices:  # each choice is a setting of its own: every one must move the round
                return "still", f"{value!r} -> {new!r} moved nothing"
            still.append(repr(new))
            continue
        moved_by.append(f"{value!r} -> {new!r} moved the {what}")
        if not all_choices:
            break
    if moved_by:
        return "moved", "; ".join(moved_by)
    if still:
        return "still", f"{value!r} -> {', '.join(still)}: moved nothing"
    return "invalid", "no valid change: " + ("; ".join(tried) or "no change to try for its type")


def check_field(
    cell: LiveCell,
    path: str,
    value: Any,
    hint: Any,
    ref: RoundDigests,
    declared: Any,
    export: bool,
    inherited: bool = False,
) -> FieldOutcome:
    """The outcome of one field. ``inherited``: ``declared`` comes from the config that owns the
    field (:func:`config_declarations`), not from the method; such a declaration is conditional
    ("read only when blur_p > 0"), so a field that moves the round is live here (the method's
    settings meet the condition), not a stale declaration."""
    from benchmark.contracts.method import Inert

    verdict, detail = _try_changes(cell, cell.base, path, value, hint, ref)
    if (declared is None and not export) or (inherited and verdict == "moved"):
        status = {"moved": "live", "still": "dead", "invalid": "untestable"}[verdict]
        return FieldOutcome(path, status, detail)
    reason = (
        "read only by encoder() (export_params)"
        if declared is None
        else (declared.reason if isinstance(declared, Inert) else str(declared))
    )
    if verdict == "moved":
        return FieldOutcome(path, "stale", f"declared inert ({reason}) but {detail}")
    if isinstance(declared, Inert) and (declared.live_with or declared.from_round > 1):
        where = _where(declared)
        params = merged(cell.base, declared.live_with)
        try:
            ref2 = cell.run(params, declared.from_round)
        except Exception as exc:  # noqa: BLE001 - reported as a stale declaration
            return FieldOutcome(path, "stale", f"{where} does not run: {type(exc).__name__}: {exc}")
        current = _get(params, path)
        verdict2, detail2 = _try_changes(
            cell, params, path, current, hint, ref2, declared.from_round
        )
        if verdict2 != "moved":
            return FieldOutcome(path, "stale", f"declared live {where}, but there: {detail2}")
        return FieldOutcome(path, "inert", f"{reason}; live {where}: {detail2}")
    return FieldOutcome(path, "inert", reason)


def _where(declared: Any) -> str:
    parts = [f"with {dict(declared.live_with)}"] if declared.live_with else []
    if declared.from_round > 1:
        parts.append(f"from round {declared.from_round}")
    return " ".join(parts)


def _get(params: Mapping[str, Any], path: str) -> Any:
    head, _, rest = path.partition(".")
    return _get(params[head], rest) if rest else params[head]


class LiveCheck:
    """The live-settings check of one method: its cell and reference round, built once, then one
    :meth:`field` outcome per config field (the per-field test and ``check-method`` share it)."""

    def __init__(self, method: str, method_params: Mapping[str, Any] | None = None) -> None:
        from benchmark.contracts.registries import METHODS, load_builtins
        from benchmark.core.config import from_mapping

        load_builtins()
        self.cls = METHODS.get(method)
        self.cell = LiveCell(method, method_params)
        cfg = from_mapping(self.cls.Config, self.cell.base)
        self.fields = {p: (v, h) for p, v, h in setting_paths(cfg)}
        # the configs' own declarations (AugmentConfig's blur settings), then the method's, which
        # win for the paths they name
        self.inherited = config_declarations(cfg)
        self.declared = {**self.inherited, **dict(self.cls.inert_settings)}
        self._ref: RoundDigests | None = None

    @property
    def ref(self) -> RoundDigests:
        if self._ref is None:
            self._ref = self.cell.run(self.cell.base)
        return self._ref

    def undeclared_names(self) -> list[FieldOutcome]:
        """A declaration naming no config field is stale."""
        return [
            FieldOutcome(p, "stale", "declared inert but the config has no such field")
            for p in sorted(set(self.declared) - set(self.fields))
        ]

    def field(self, path: str) -> FieldOutcome:
        if self.ref.steps == 0:
            return FieldOutcome(path, "untestable", "no client took a step in two rounds")
        value, hint = self.fields[path]
        export = path.split(".")[0] in self.cls.export_params
        declared = self.declared.get(path)
        inherited = path not in self.cls.inert_settings and path in self.inherited
        return check_field(
            self.cell, path, value, hint, self.ref, declared, export, inherited=inherited
        )


def check_live_settings(
    method: str, *, method_params: Mapping[str, Any] | None = None
) -> list[FieldOutcome]:
    """One outcome per config field of ``method``, plus one per declaration that names no
    field."""
    check = LiveCheck(method, method_params)
    return [*check.undeclared_names(), *(check.field(p) for p in check.fields)]


def conformance_result(method: str, method_params: Mapping[str, Any] | None = None) -> Any:
    """``check-method``'s ``live_settings`` line: pass when every field is live or declared inert
    (and the declaration holds), else fail naming each field that is not."""
    import time

    from benchmark.commands.check_result import CheckResult

    t0 = time.perf_counter()
    try:
        outcomes = check_live_settings(method, method_params=method_params)
    except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check, with its reason
        return CheckResult(
            "live_settings", "fail", f"{type(exc).__name__}: {exc}", time.perf_counter() - t0
        )
    bad = [o for o in outcomes if not o.ok]
    seconds = time.perf_counter() - t0
    if bad:
        detail = "; ".join(f"{o.path} {o.status}: {o.detail}" for o in bad)
        return CheckResult("live_settings", "fail", detail, seconds)
    inert = sum(o.status == "inert" for o in outcomes)
    detail = f"{len(outcomes) - inert} settings move the first round, {inert} declared inert"
    return CheckResult("live_settings", "pass", detail, seconds)


def format_outcomes(outcomes: list[FieldOutcome]) -> str:
    return "\n".join(f"{o.status:10s} {o.path}: {o.detail}" for o in outcomes)


__all__ = [
    "CLIENT_SIZES",
    "FieldOutcome",
    "LiveCell",
    "LiveCheck",
    "changes",
    "check_live_settings",
    "config_declarations",
    "conformance_result",
    "format_outcomes",
    "setting_paths",
]
