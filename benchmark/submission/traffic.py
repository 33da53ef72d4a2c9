"""A record's traffic checked against what its method declares it sends (issue 52, item 2).

On c2ccfe5 a record claiming 1 byte of traffic (the genuine run sent 177,376 bytes per round) was
accepted and ranked first on communication; zero traffic passed too: accept re-ran the tasks from the
checkpoint and believed the bundle about the training. Where the training is not re-run here, the
traffic is now derived from the method's declaration and the checkpoint's tensors, and the record
is refused (one line, before anything is re-run) when it does not fit:

* the record's per-round traffic is the one its checkpoint holds (``Pretrained.comm_up/down``: the
  runner writes both from the same counter), one entry per completed round;
* a method that declares it sends nothing (``payload_up == payload_down == ()``: central training,
  random initialisation) has zero traffic;
* a method whose every declared pattern (``payload_up``, ``payload_down``: fnmatch patterns of
  tensor names) names tensors of the checkpoint's server state is **derivable**: each round's
  traffic in each direction lies between a quarter of the smallest pattern's bytes (at least one
  client sent at least one declared thing, perhaps in 8 bits: a class declares the traffic of all
  its configurations, so a configuration may send a subset) and twice ``num_clients`` × the bytes
  of every declared tensor.

A method whose patterns name tensors the server state does not hold (logits on public data, cluster
assignments) is not derivable: its traffic is checked against its checkpoint only and stays the submitter's word
(docs/integrity.md). Compute time is never derived: it is shown as reported. Torch only through the
checkpoint already loaded."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from benchmark.records.schema import ResultRecord


def _declared_bytes(cls: Any, tensors: Mapping[str, Any]) -> dict[str, dict[str, int]] | None:
    """direction → pattern → bytes of the checkpoint's tensors it names; None when a pattern names
    none (not derivable)."""
    out: dict[str, dict[str, int]] = {}
    for direction in ("up", "down"):
        patterns = tuple(getattr(cls, f"payload_{direction}", ()) or ())
        out[direction] = {}
        for pattern in patterns:
            names = fnmatch.filter(tensors, pattern)
            if not names:
                return None
            out[direction][pattern] = sum(
                int(tensors[n].numel()) * int(tensors[n].element_size()) for n in names
            )
    return out


def traffic_problems(record: ResultRecord, pre: Any) -> list[str]:
    """Why ``record``'s traffic is not what its method's declaration and checkpoint ``pre`` allow."""
    from benchmark.contracts.registries import METHODS, load_builtins

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
    if out:
        return out
    load_builtins()
    cls = METHODS.get(record.method)
    if not (cls.payload_up or cls.payload_down):
        if comm.bytes_up or comm.bytes_down:
            out.append(
                f"traffic: method {record.method} declares it sends nothing, the record states "
                f"{comm.bytes_up:,} bytes up and {comm.bytes_down:,} down"
            )
        return out
    tensors = {**dict(pre.server.model), **dict(pre.server.extra)}
    declared = _declared_bytes(cls, tensors)
    if declared is None:
        return out  # not derivable: shown as the submitter's word
    clients = int((record.cell.get("fl") or {}).get("num_clients") or 1)
    for direction, rounds in (("up", comm.per_round_up), ("down", comm.per_round_down)):
        sizes = declared[direction]
        if not sizes:
            continue
        # the checkpoint holds fp32 masters; a payload may travel in 8 bits, or in 64 (a margin of
        # 4 below and 2 above): a forged round of 1 byte, 0 or 10 times the genuine is still out
        low, high = min(sizes.values()) // 4, 2 * clients * sum(sizes.values())
        for i, sent in enumerate(rounds):
            if not low <= sent <= high:
                out.append(
                    f"traffic: round {i + 1} {direction}load is {sent:,} bytes; what {record.method} "
                    f"declares it sends ({', '.join(sorted(sizes))}: {sum(sizes.values()):,} bytes "
                    f"a client, {clients} client(s)) allows {low:,} to {high:,}"
                )
                break
    return out


def _short(values: Any) -> str:
    values = list(values)
    text = ", ".join(f"{v:,}" for v in values[:3])
    return f"[{text}{', …' if len(values) > 3 else ''}]"


__all__ = ["traffic_problems"]
