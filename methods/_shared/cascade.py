"""FedMAE's server side as pure functions (docs/methods/fedmae.md §2.2 block pool, §2.6 cascade).

The block pool lives in ``ServerState.extra`` as ``pool.<slot>.<tensor name>`` plus 0-d integer
tensors ``pool.<slot>.round`` and ``pool.<slot>.client``; slot 0 is first in pool order (round
descending, client id ascending), one entry per client (its latest upload), at most ``pool_size``
entries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

TensorDict = Mapping[str, torch.Tensor]
_SLOT = re.compile(r"^pool\.(\d+)\.(.+)$")
# from s_1 under first_last (block 1 was trained on them)
ENCODER_SHARED = ("patch_embed.", "cls_token")
DECODER = ("decoder_embed.", "mask_token", "decoder_blocks.", "decoder_norm.", "decoder_pred.")


@dataclass(frozen=True)
class PoolEntry:
    round: int
    client: int
    tensors: TensorDict  # the one-block MAE's 36 tensors, named "mae.*"


def pool_entries(extra: TensorDict) -> list[PoolEntry]:
    """Decode the pool from ``ServerState.extra`` in slot order."""
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in extra.items():
        m = _SLOT.match(key)
        if m:
            slots.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out = []
    for slot in sorted(slots):
        d = slots[slot]
        out.append(PoolEntry(int(d.pop("round")), int(d.pop("client")), d))
    return out


def pool_to_extra(entries: Sequence[PoolEntry]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for slot, e in enumerate(entries):
        out.update({f"pool.{slot}.{k}": v for k, v in e.tensors.items()})
        out[f"pool.{slot}.round"] = torch.tensor(e.round, dtype=torch.int64)
        out[f"pool.{slot}.client"] = torch.tensor(e.client, dtype=torch.int64)
    return out


def pool_insert(
    entries: Sequence[PoolEntry], uploads: Mapping[int, TensorDict], round_: int, pool_size: int
) -> list[PoolEntry]:
    """Replace each uploading client's entry by its new upload, order by (round desc, client asc),
    keep pool_size."""
    kept = [e for e in entries if e.client not in uploads]
    new = [PoolEntry(round_, int(k), dict(t)) for k, t in uploads.items()]
    merged = sorted([*kept, *new], key=lambda e: (-e.round, e.client))
    return merged[:pool_size]


def _mean(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Unweighted mean, accumulated in float64 (bit-exact for one input)."""
    if len(tensors) == 1:
        return tensors[0].clone()
    acc = torch.zeros_like(tensors[0], dtype=torch.float64)
    for t in tensors:
        acc += t.to(torch.float64)
    return (acc / len(tensors)).to(tensors[0].dtype)


def cascade_tensors(
    sources: Sequence[TensorDict],
    fresh: TensorDict,
    depth: int,
    *,
    shared: str = "first_last",
    prefix: str = "mae.",
) -> dict[str, torch.Tensor]:
    """Tensors of the N-block cascaded MAE (docs/methods/fedmae.md §2.6 steps 2–4).

    ``sources`` are s_1..s_{N_p} (one-block MAEs, ``prefix``-named); ``fresh`` is a seeded N-block
    initialisation with the same names. Block i ← s_i's ``blocks.0`` (bitwise) for i < N_p, fresh
    block i otherwise. Shared tensors: ``first_last`` → patch embedding and cls token from s_1,
    final norm and decoder from s_{N_p}; ``mean`` → unweighted means over the sources. Without
    sources every tensor comes from ``fresh``.
    """
    if shared not in ("first_last", "mean"):
        raise ValueError(f"shared must be 'first_last' or 'mean', got {shared!r}")
    if len(sources) > depth:
        raise ValueError("more sources than blocks")
    out: dict[str, torch.Tensor] = {}
    blk = f"{prefix}blocks."
    for key, value in fresh.items():
        if key.startswith(blk):
            index, rest = key[len(blk) :].split(".", 1)
            i = int(index)
            out[key] = sources[i][f"{blk}0.{rest}"].clone() if i < len(sources) else value.clone()
            continue
        if not sources:
            out[key] = value.clone()
            continue
        name = key[len(prefix) :]
        if shared == "mean":
            out[key] = _mean([s[key] for s in sources])
        elif name.startswith(ENCODER_SHARED):
            out[key] = sources[0][key].clone()
        else:  # final norm and decoder from the last pre-trained source
            out[key] = sources[-1][key].clone()
    return out
