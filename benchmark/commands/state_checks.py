"""Client state that is *used*, not only saved: ``check-method``'s ``state_read`` and
``state_evolves`` checks, and :func:`drive_client`, which drives one client for two rounds (the
helper a method author's own state tests call, exported by ``benchmark.api``).

The resume check proves that what a method saves is enough to continue; it cannot see state that
is saved but ignored (a queue re-initialised every round, a pointer reset, a momentum network
reloaded from the broadcast). These checks can:

``state_read``     each piece of client state (the tensors of ``ClientState.tensors`` grouped by
                   their first dotted name: ``queue``, ``queue_ptr``, ``key.*``) is perturbed alone
                   before the client's round 2, and round 2 is re-run: the client's upload, or
                   another piece of the state it returns, must change. A piece nothing reads leaves
                   both as they were.
``state_evolves``  each piece the method declares evolving (``evolving_client_state``; undeclared:
                   every floating-point piece, what a round trains) differs between the client's state after round 1 and after round 2: a
                   piece read but never written back is caught here.

Perturbation: floating tensors get Gaussian noise of their own scale (at least 1e-2), integer
tensors move by one (down when positive, so an index stays in range), booleans flip.

What they cannot see (docs/adding-a-method.md §4): a piece read only after round 2 or under a
condition the smoke cell does not reach, one that only changes itself (a running statistic kept for
``encoder()`` alone), whether what is read is read *correctly* (that is the method's own spec
tests), and state kept outside ``ClientState`` (the resume check's job, with 2 rounds or more).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

# (round, the state the client would start that round from) -> the state it starts from instead
StateEdit = Callable[[int, Any], Any]


@dataclass(frozen=True)
class ClientTrace:
    """One client driven alone for ``len(uploads)`` rounds: ``states[0]`` is ``init_client``'s,
    ``states[r]`` the state returned by round r; ``downs[r-1]`` / ``uploads[r-1]`` round r's
    broadcast and upload; ``servers[r]`` the server after round r (``servers[0]`` the initial
    one). ``rerun(r, state)`` runs round r's ``client_update`` again from ``state`` (same
    broadcast, data and random streams) and returns ``(upload, new_state)``."""

    method: Any
    client_id: int
    data: Any
    states: tuple[Any, ...]
    downs: tuple[Any, ...]
    uploads: tuple[Any, ...]
    servers: tuple[Any, ...]
    context: Callable[[int], Any]

    def rerun(self, round_: int, state: Any) -> tuple[Any, Any]:
        return self.method.client_update(
            _copy(self.downs[round_ - 1]), _copy(state), self.data, self.context(round_)
        )


def _copy(obj: Any) -> Any:
    """A payload or client state with its tensors cloned: a hook may update what it is given in
    place (an optimizer's moments), and the trace keeps what each round started from."""
    return dataclasses.replace(obj, tensors={k: v.clone() for k, v in obj.tensors.items()})


def drive_client(
    method: str,
    *,
    rounds: int = 2,
    client_id: int = 0,
    seed: int = 0,
    method_params: Mapping[str, Any] | None = None,
    edit_state: StateEdit | None = None,
    setup: Any = None,
) -> ClientTrace:
    """Drive client ``client_id`` of the registered method ``method`` for ``rounds`` rounds on the
    smoke cell ``check-method`` uses (digits, the method's ``smoke_settings``, 3 clients), as the
    engine drives it: ``init_server``, then each round ``broadcast``, ``client_update`` with the
    client's own data and random streams, and ``server_aggregate``. Every other client of the cell
    trains in every round but the last (so the server's next broadcast is not this client's own
    upload); the last round aggregates this client's upload alone.
    ``edit_state(r, state)`` replaces the state the client starts round r from (a perturbation).

    In a method's own tests: ``trace = drive_client("fedfoo")`` and assert on ``trace.states[1]``
    and ``trace.states[2]`` (what round 2 did to the queue), or on ``trace.rerun(2, edited)``."""
    from benchmark.engine.rounds import client_context, server_context
    from benchmark.engine.stages import build_method

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if setup is None:
        setup = smoke_setup(method, rounds=rounds, seed=seed, method_params=method_params)
    if not 0 <= client_id < len(setup.clients):
        raise ValueError(f"client_id must be in [0, {len(setup.clients)}), got {client_id}")
    instance = build_method(setup.cell, setup.inputs)
    settings, public, data = setup.settings, setup.public, setup.clients[client_id]
    server = instance.init_server(server_context(settings, 0, public))
    state = instance.init_client(client_id, server)
    others: dict[int, Any] = {}  # the other clients' states
    states, downs, ups, servers = [state], [], [], [server]
    for r in range(1, rounds + 1):
        sctx = server_context(settings, r, public)
        down = _copy(instance.broadcast(server, sctx))
        if edit_state is not None:
            state = edit_state(r, state)
        up, state = instance.client_update(
            _copy(down), _copy(state), data, client_context(settings, r, client_id, public)
        )
        up, state = _copy(up), dataclasses.replace(_copy(state), last_round=r)
        round_ups = {client_id: _copy(up)}
        if r < rounds:  # the others train too, so the next broadcast is not this client's upload
            round_ups.update(_others_round(instance, setup, r, down, server, others, client_id))
        server = instance.server_aggregate(server, dict(sorted(round_ups.items())), sctx, public)
        states.append(state)
        downs.append(down)
        ups.append(up)
        servers.append(server)
    return ClientTrace(
        instance,
        client_id,
        data,
        tuple(states),
        tuple(downs),
        tuple(ups),
        tuple(servers),
        lambda r: client_context(settings, r, client_id, public),
    )


def _others_round(
    method: Any, setup: Any, r: int, down: Any, server: Any, states: dict[int, Any], skip: int
) -> dict[int, Any]:
    """Round ``r`` of every client but ``skip``: their uploads (their states updated in place)."""
    from benchmark.engine.rounds import client_context

    out = {}
    for k, data in enumerate(setup.clients):
        if k == skip:
            continue
        state = states.get(k) or method.init_client(k, server)
        ctx = client_context(setup.settings, r, k, setup.public)
        up, new = method.client_update(_copy(down), _copy(state), data, ctx)
        states[k] = dataclasses.replace(new, last_round=r)
        out[k] = up
    return out


def smoke_setup(
    method: str, *, rounds: int = 2, seed: int = 0, method_params: Mapping[str, Any] | None = None
) -> Any:
    """The prepared smoke cell (3 clients, 2 per round) ``check-method`` runs ``method`` on."""
    from benchmark.commands.smoke import smoke_cell
    from benchmark.engine.stages import prepare

    cell = smoke_cell(
        method,
        rounds=rounds,
        clients=3,
        participation=0.67,
        seed=seed,
        tasks=["knn"],
        method_params=dict(method_params or {}),
    )
    return prepare(cell)


# ------------------------------------------------------------------------------------------------
# the checks


def pieces(names: Sequence[str]) -> dict[str, list[str]]:
    """Client-state tensor names grouped by their first dotted component, in sorted order
    (``key.encoder.w`` and ``key.head.b`` are the piece ``key``)."""
    out: dict[str, list[str]] = {}
    for name in sorted(names):
        out.setdefault(name.split(".", 1)[0], []).append(name)
    return out


def perturb(tensors: Mapping[str, Any], names: Sequence[str], seed: int = 0) -> dict[str, Any]:
    """``tensors`` with ``names`` perturbed: floats get noise of their scale (at least 1e-2),
    integers move by one (down when positive), booleans flip."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = dict(tensors)
    for name in names:
        t = tensors[name]
        if t.dtype == torch.bool:
            out[name] = ~t
        elif t.is_floating_point() or t.is_complex():
            scale = max(float(t.detach().abs().float().mean()) if t.numel() else 0.0, 1e-2)
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            out[name] = (t.detach().float().cpu() + scale * noise).to(t.dtype).to(t.device)
        else:
            out[name] = torch.where(t > 0, t - 1, t + 1)
    return out


def _digest(tensors: Mapping[str, Any]) -> str:
    from benchmark.engine.client_store import state_digest

    return state_digest({k: v for k, v in tensors.items() if hasattr(v, "detach")})


def _changed_pieces(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """The pieces whose tensors differ between two client states (names, shapes or bytes)."""
    groups_a, groups_b = pieces(list(a)), pieces(list(b))
    return {
        p
        for p in set(groups_a) | set(groups_b)
        if groups_a.get(p) != groups_b.get(p)
        or _digest({k: a[k] for k in groups_a[p]}) != _digest({k: b[k] for k in groups_b[p]})
    }


class StateCheckFailed(Exception):
    """A state check failed with a named reason."""


class Outcome(NamedTuple):
    """One check's result; ``check_method`` makes its ``CheckResult`` of it."""

    name: str
    status: str  # "pass" | "fail" | "skip"
    detail: str
    seconds: float


def check_client_state(
    name: str, cls: Any, *, method_params: Mapping[str, Any] | None
) -> list[Outcome]:
    """The ``state_read`` and ``state_evolves`` outcomes of method ``name`` (class ``cls``): one
    client driven for two rounds, whatever ``--rounds`` says. Never raises for a broken method."""
    names = ("state_read", "state_evolves")
    t0 = time.perf_counter()
    try:
        setup = smoke_setup(name, rounds=2, method_params=method_params)
        # one client update first: a method without client state is done here
        if not drive_client(name, rounds=1, setup=setup).states[1].tensors:
            why = "the method keeps no client state (ClientState.tensors is empty after round 1)"
            return [Outcome(n, "skip", why, 0.0) for n in names]
        trace = drive_client(name, rounds=2, setup=setup)
    except Exception as exc:  # noqa: BLE001 - a method that cannot be driven fails both checks
        why = f"driving client 0 for 2 rounds raised {type(exc).__name__}: {exc}"
        return [Outcome(n, "fail", why, time.perf_counter() - t0) for n in names]
    state1 = dict(trace.states[1].tensors)
    groups = pieces(list(state1))
    exempt = dict(getattr(cls, "state_read_exempt", {}))
    read = _outcome("state_read", lambda: _check_read(trace, state1, groups, exempt), t0)
    evolves = _outcome("state_evolves", lambda: _check_evolves(cls, trace, groups), None)
    return [read, evolves]


def _outcome(name: str, check: Callable[[], str], t0: float | None) -> Outcome:
    """Run one check: its note on success, its reason on ``StateCheckFailed``, any other exception
    as a failure naming it."""
    start = time.perf_counter() if t0 is None else t0
    try:
        return Outcome(name, "pass", check(), time.perf_counter() - start)
    except StateCheckFailed as exc:
        return Outcome(name, "fail", str(exc), time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
        return Outcome(name, "fail", f"{type(exc).__name__}: {exc}", time.perf_counter() - start)


def _check_read(
    trace: ClientTrace,
    state1: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    exempt: Mapping[str, str],
) -> str:
    excused = {
        piece: next(
            why for pat, why in exempt.items() if all(fnmatch.fnmatch(n, pat) for n in names)
        )
        for piece, names in groups.items()
        if any(all(fnmatch.fnmatch(n, pat) for n in names) for pat in exempt)
    }
    ref_up, ref_state = trace.rerun(2, trace.states[1])
    if _digest(ref_up.tensors) != _digest(trace.uploads[1].tensors):
        raise StateCheckFailed(
            "round 2 re-run from the same state gives a different upload (state kept in the method "
            "object, or nondeterminism): the state checks cannot tell what is read"
        )
    unread, raised = [], []
    for piece, names in groups.items():
        if piece in excused:
            continue
        edited = dataclasses.replace(trace.states[1], tensors=perturb(state1, names))
        try:
            up, new_state = trace.rerun(2, edited)
        except Exception:  # noqa: BLE001 - the perturbed value reached code that depends on it: read
            raised.append(piece)
            continue
        others = _changed_pieces(dict(new_state.tensors), dict(ref_state.tensors)) - {piece}
        if _digest(up.tensors) == _digest(ref_up.tensors) and not others:
            unread.append(piece)
    if unread:
        raise StateCheckFailed(
            f"client state {unread} is saved but not read: perturbing it before round 2 changes "
            "neither the client's upload nor the rest of its state (re-initialised, reset or "
            "reloaded from the broadcast each round?)"
        )
    checked = sorted(set(groups) - set(excused))
    return (
        f"{len(checked)} piece(s) of client state {checked}: perturbing each before round 2 "
        "changes the client's upload or its other state"
        + (f" (perturbing {raised} makes round 2 raise: read)" if raised else "")
        + "".join(f"; {p!r} not checked: {why}" for p, why in sorted(excused.items()))
    )


def _check_evolves(
    cls: Any,
    trace: ClientTrace,
    groups: Mapping[str, list[str]],
) -> str:
    from benchmark.contracts.method import MethodBase

    patterns = tuple(getattr(cls, "evolving_client_state", ("*",)))
    # undeclared (MethodBase's default, all a plugin written before API 2.3 can have): the pieces a
    # round trains, its floating-point ones; an integer or boolean piece (a ring pointer back at its
    # slot, a counter, a mask) may legitimately end a round where it began (issue 57)
    declared = any("evolving_client_state" in vars(c) for c in cls.__mro__ if c is not MethodBase)
    floats = {
        p
        for p, names in groups.items()
        if all(trace.states[1].tensors[n].is_floating_point() for n in names)
    }
    evolving = [
        p
        for p, names in groups.items()
        if any(fnmatch.fnmatch(n, pat) for n in names for pat in patterns)
        and (declared or p in floats)
    ]
    changed = _changed_pieces(dict(trace.states[1].tensors), dict(trace.states[2].tensors))
    frozen = [p for p in evolving if p not in changed]
    if frozen:
        raise StateCheckFailed(
            f"client state {frozen} is the same after the client's rounds 1 and 2 although "
            f"evolving_client_state = {list(patterns)} says it changes (not written back? if it is "
            "constant by design, leave it out of evolving_client_state)"
        )
    constant = sorted(set(groups) - set(evolving))
    return f"{len(evolving)} evolving piece(s) changed between rounds 1 and 2" + (
        f"; {constant} not declared evolving" if constant else ""
    )


__all__ = [
    "ClientTrace",
    "Outcome",
    "check_client_state",
    "drive_client",
    "perturb",
    "pieces",
    "smoke_setup",
]
