"""A record's traffic checked against what its method declares it sends (issue 52, item 2).

On c2ccfe5 a record claiming 1 byte of traffic (the genuine run sent 177,376 bytes per round) was
accepted and ranked first on communication; zero traffic passed too: accept re-ran the tasks from the
checkpoint and believed the bundle about the training. Where the training is not re-run here, the
traffic is now derived, and the record is refused (one line, before anything is re-run) when it is
not exactly that:

* the record's per-round traffic is the one its checkpoint holds (``Pretrained.comm_up/down``: the
  runner writes both from the same counter), one entry per completed round;
* every built-in method declares what one sampled client uploads and receives each round
  (``MethodBase.declared_traffic``, plugin API 2.5: a pure function of its config, the cell's
  federated settings and the client's size, and the shapes of the server's tensors);
  :func:`benchmark.engine.traffic_sum.derived_traffic` sums it over each round's sampled clients as the
  runner counts, from the partition accept has just rebuilt; the record's per-round bytes, up and
  down, must equal it byte for byte;
* the shapes the declaration reads are the cell's own: its initial server state, built from the
  record's cell configuration on PyTorch's meta device (nothing allocated, no data), never the
  bundle's checkpoint (a checkpoint whose projector was shrunk, or stored in a narrower dtype,
  would declare less and carry a forged figure to match); and the checkpoint's server model must
  be exactly that state's (names, shapes, dtypes), its extra state hold that state's tensors
  (:func:`server_difference`);
* a plugin method that declares nothing (written before API 2.5, or choosing not to) is not
  refused: its acceptance says ``traffic: {"derived": false}`` and the site badges the row
  "traffic not derived" and leaves it out of the ranking on communication (docs/integrity.md).

Compute time is never derived: it is shown as reported. Torch only through the checkpoint already
loaded and the method the cell builds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.records.schema import ResultRecord

PLUGIN_DECLARED = (
    "its method is a plugin: its declaration is the submitter's own code, which accept does not "
    "run here, so the figure is the submitter's word"
)
NOT_DECLARED = (
    "its method declares no traffic (MethodBase.declared_traffic, plugin API 2.5): the figure is "
    "the submitter's word"
)


@dataclass
class TrafficVerdict:
    """What accept found of a record's traffic: the problems (refusal lines), and whether the
    record's figure was derived from its method's declaration (the acceptance's ``traffic``)."""

    problems: list[str] = field(default_factory=list)
    derived: bool = False
    why: str = ""

    def acceptance(self) -> dict[str, Any]:
        """The acceptance file's ``traffic`` field. ``plugin``: the method is a plugin, so even a
        re-run's counter is not the maintainers' word (the plugin's code ran in the box's process,
        beside the counter), and the row stays badged."""
        if self.derived:
            return {"derived": True}
        out: dict[str, Any] = {"derived": False, "why": self.why}
        if self.why == PLUGIN_DECLARED:
            out["plugin"] = True
        return out


def checkpoint_problems(record: ResultRecord, pre: Any) -> list[str]:
    """Why the record's per-round traffic is not the one its checkpoint holds."""
    comm = record.comm
    out = []
    for direction, theirs, ckpt in (
        ("up", comm.per_round_up, pre.comm_up),
        ("down", comm.per_round_down, pre.comm_down),
    ):
        if tuple(theirs) != tuple(ckpt):
            out.append(
                f"traffic: the record's per-round {direction}load ({_short(theirs)}) is not the "
                f"one its checkpoint holds ({_short(ckpt)})"
            )
        if record.status == "ok" and len(theirs) != record.rounds_completed:
            out.append(
                f"traffic: {len(theirs)} per-round {direction}load entries for "
                f"{record.rounds_completed} completed rounds"
            )
    return out


def cell_method(record: ResultRecord, data_root: str | Path | None) -> Any:
    """The method instance the record's cell builds (as the runner builds it)."""
    from benchmark.contracts.cell import Cell
    from benchmark.contracts.registries import load_builtins
    from benchmark.engine.stages import build_method, input_spec, load_data

    load_builtins()
    cell = Cell.from_dict(record.cell)
    return build_method(cell, input_spec(load_data(cell, data_root)))


def traffic_verdict(
    record: ResultRecord,
    pre: Any,
    method: Any,
    client_sizes: Sequence[int],
    public_size: int | None,
) -> TrafficVerdict:
    """``record``'s traffic against its checkpoint ``pre`` and against what ``method`` (the
    cell's, built) declares for the partition's ``client_sizes`` and public split, on the shapes of
    the cell's own initial server state, which the checkpoint's server tensors must match."""
    from benchmark.contracts.cell import Cell
    from benchmark.engine.traffic_sum import derived_traffic, initial_server_state, server_tensors

    out = TrafficVerdict(checkpoint_problems(record, pre))
    if out.problems:
        return out
    comm = record.comm
    rounds = len(comm.per_round_up)
    cell = Cell.from_dict(record.cell)
    pooled = getattr(method, "federation", "federated") == "pooled"
    try:
        initial = initial_server_state(method, cell, 1 if pooled else len(client_sizes))
    except Exception as exc:  # noqa: BLE001 - a cell whose server state cannot be sized refuses
        out.problems.append(
            f"traffic: the initial server state of the record's cell cannot be sized on the meta "
            f"device: {_first_line(exc)}"
        )
        return out
    if record.status == "ok" or pre.server.model or pre.server.extra:  # diverged: none saved
        out.problems += server_problems(pre.server, initial)
        if out.problems:
            return out
    try:
        derived = derived_traffic(
            method, cell, server_tensors(initial), client_sizes, public_size, rounds
        )
    except Exception as exc:  # noqa: BLE001 - a declaration that cannot be evaluated refuses
        out.problems.append(
            f"traffic: {record.method}'s declaration cannot be evaluated on its cell's server "
            f"state: {_first_line(exc)}"
        )
        return out
    if derived is None:
        out.why = NOT_DECLARED
        return out
    out.derived = True
    for direction, theirs, ours in (
        ("up", comm.per_round_up, derived[0]),
        ("down", comm.per_round_down, derived[1]),
    ):
        wrong = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b]
        if wrong:
            i = wrong[0]
            out.problems.append(
                f"traffic: round {i + 1} {direction}load is {theirs[i]:,} bytes; what "
                f"{record.method} declares it sends there is {ours[i]:,} bytes ({len(wrong)} of "
                f"{rounds} round(s) differ)"
            )
    return out


def server_problems(checkpoint: Any, initial: Any) -> list[str]:
    """Why the checkpoint's server tensors (``ServerState``) are not those of the cell's initial
    server state ``initial`` ([] when they are; :func:`server_difference`), as one refusal line."""
    what = server_difference(checkpoint, initial)
    if what is None:
        return []
    return [
        "checkpoint: its server tensors are not those the record's cell builds (its initial "
        f"server state, sized on the meta device): {what}"
    ]


def server_difference(
    checkpoint: Any, initial: Any, *, theirs: str = "the checkpoint", ours: str = "the cell"
) -> str | None:
    """The first way the server state ``checkpoint`` is not one of the cell whose initial server
    state is ``initial``, and how many tensors differ; None when there is none. Its ``model`` must
    hold exactly the initial model's names, each with its shape and dtype. Its ``extra`` is
    training state whose shapes may grow (FeatARC's assignment history gains a row each round,
    FedMAE's block pool a slot): it must hold every tensor of the initial extra state with its
    dtype, and may hold more. No declaration reads the checkpoint's shapes (it reads
    ``initial``)."""
    from benchmark.engine.traffic_sum import server_layout

    mine, cell = server_layout(checkpoint), server_layout(initial)

    def same(key: tuple[str, str]) -> bool:
        a, b = mine.get(key), cell.get(key)
        if key[0] == "extra" and a is not None and b is not None:
            return a[1] == b[1]  # the dtype; the shape may grow
        return a == b

    names = cell.keys() | {k for k in mine if k[0] == "model"}
    differ = sorted(k for k in names if not same(k))
    if not differ:
        return None
    part, name = differ[0]
    where = f"{part} {name[:200]!r}"
    if (part, name) not in cell:
        what = f"{where} is in {theirs} ({_layout(mine[part, name])}), not in {ours}"
    elif (part, name) not in mine:
        what = f"{where} ({_layout(cell[part, name])} in {ours}) is not in {theirs}"
    else:
        what = (
            f"{where} is {_layout(mine[part, name])} in {theirs}, "
            f"{_layout(cell[part, name])} in {ours}"
        )
    return f"{what} ({len(differ)} of {len(names)} tensors differ)"


def _layout(entry: tuple[tuple[int, ...], str]) -> str:
    shape, dtype = entry
    text = "×".join(str(d) for d in shape[:8]) + ("×…" if len(shape) > 8 else "")
    return f"{text or 'scalar'} {dtype[:40]}"


def _first_line(exc: BaseException) -> str:
    first = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"


def _short(values: Any) -> str:
    values = list(values)
    text = ", ".join(f"{v:,}" for v in values[:3])
    return f"[{text}{', …' if len(values) > 3 else ''}]"


__all__ = [
    "NOT_DECLARED",
    "PLUGIN_DECLARED",
    "TrafficVerdict",
    "cell_method",
    "checkpoint_problems",
    "server_difference",
    "server_problems",
    "traffic_verdict",
]
