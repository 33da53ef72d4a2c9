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
  federated settings and the client's size, and the checkpoint's tensor shapes);
  :func:`benchmark.engine.traffic_sum.derived_traffic` sums it over each round's sampled clients as the
  runner counts, from the partition accept has just rebuilt; the record's per-round bytes, up and
  down, must equal it byte for byte;
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
        """The acceptance file's ``traffic`` field."""
        return {"derived": True} if self.derived else {"derived": False, "why": self.why}


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
    cell's, built) declares for the partition's ``client_sizes`` and public split."""
    from benchmark.contracts.cell import Cell
    from benchmark.engine.traffic_sum import derived_traffic, server_tensors

    out = TrafficVerdict(checkpoint_problems(record, pre))
    if out.problems:
        return out
    comm = record.comm
    rounds = len(comm.per_round_up)
    try:
        derived = derived_traffic(
            method,
            Cell.from_dict(record.cell),
            server_tensors(pre.server),
            client_sizes,
            public_size,
            rounds,
        )
    except Exception as exc:  # noqa: BLE001 - a declaration that cannot be evaluated on this checkpoint refuses
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        out.problems.append(
            f"traffic: {record.method}'s declaration cannot be evaluated on this checkpoint: "
            f"{type(exc).__name__}: {first}"
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
    "traffic_verdict",
]
