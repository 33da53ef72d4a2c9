"""The checkpoint ledger (issue 52, item 2): every checkpoint ``accept`` ever accepted, and the
training it was accepted for, kept in the results folder so that one checkpoint cannot pose as
several trainings across bundles and across time.

Re-evaluation proves that a checkpoint gives a record's scores, not that the record's pre-training
made it; where the pre-training is not re-run here (a GPU track), the same checkpoint sent in three
bundles, each claiming another training (the baseline, the learning rate × 10, 500 rounds), was
accepted three times and ranked 1–3 on c2ccfe5. ``shared_checkpoints`` only looked inside one
bundle. Now each accepted checkpoint leaves two entries under ``DIR/ledger/``:

* ``checkpoint-<sha256>.json``: the checkpoint file's sha256;
* ``state-<final_state_digest>.json``: the digest of the tensors its evaluation reads (the same
  trained state saved into another file, or with another round counter, has another sha256);

each naming the **training** it was accepted for: the pre-training key of the record's cell with
the partition left out (:func:`training_of`, as ``shared_checkpoints`` compares it: a method that
ignores the partition shares one checkpoint across partitions). A later bundle whose record claims
another training for a checkpoint or a state already in the ledger is refused in one line, before
anything is re-run. Entries are written with the acceptance files, all of them or none, never
replaced (``write_new_files``); the ledger is part of the maintainers' reviewed history like the
acceptances. Torch-free."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmark.core import bounded_json
from benchmark.records.schema import ResultRecord

LEDGER_SUBDIR = "ledger"
MAX_ENTRY_BYTES = 64 * 1024
KINDS = (("checkpoint", "checkpoint"), ("state", "final state"))


def training_of(record: ResultRecord) -> str:
    """The pre-training a record claims: its cell's pre-training key (tasks and export-only
    parameters left out) with the partition left out."""
    from benchmark.contracts.cell import pretrain_key_for

    cell = {**dict(record.cell), "partition": {"name": "", "version": "", "params": {}}}
    return pretrain_key_for({**cell, "partition_seed": 0})


def digests_of(entry: Mapping[str, Any], record: ResultRecord) -> list[tuple[str, str, str]]:
    """(file kind, words, digest) of the record's checkpoint sha256 and final-state digest."""
    ckpt = entry.get("checkpoint") if isinstance(entry.get("checkpoint"), Mapping) else {}
    values = (str(ckpt.get("sha256") or ""), str(record.final_state_digest or ""))
    return [(kind, words, d) for (kind, words), d in zip(KINDS, values) if d.isalnum()]


def entry_path(results: Path, kind: str, digest: str) -> Path:
    return Path(results) / LEDGER_SUBDIR / f"{kind}-{digest}.json"


def read_entry(path: Path) -> Mapping[str, Any] | None:
    """A ledger entry (bounded read), None when there is none; a damaged entry reads as a training
    nobody claims, so it refuses every bundle with that digest until a maintainer looks."""
    from benchmark.records.files import read_text_bounded

    if not path.exists() and not path.is_symlink():
        return None
    try:
        raw = bounded_json.loads(read_text_bounded(path, MAX_ENTRY_BYTES))
    except (ValueError, RecursionError):
        raw = None
    if not isinstance(raw, dict) or not isinstance(raw.get("training"), str):
        return {"training": "(a damaged ledger entry)", "cell_id": "?"}
    return raw


def ledger_problems(
    results: Path, records: Iterable[tuple[Mapping[str, Any], ResultRecord]]
) -> list[str]:
    """One line per record whose checkpoint or final state the ledger holds for another training."""
    out = []
    for entry, record in records:
        training = training_of(record)
        for kind, words, digest in digests_of(entry, record):
            held = read_entry(entry_path(results, kind, digest))
            if held is not None and held.get("training") != training:
                out.append(
                    f"record {record.cell_id}: its {words} ({digest[:12]}…) was accepted before "
                    f"for another training (record {str(held.get('cell_id'))[:40]}, ledger "
                    f"{LEDGER_SUBDIR}/{kind}-{digest[:12]}…): one checkpoint cannot be two "
                    "trainings"
                )
    return out


def ledger_files(
    results: Path,
    records: Iterable[tuple[Mapping[str, Any], ResultRecord]],
    accepted_at: str,
) -> list[tuple[Path, str]]:
    """The ledger entries this acceptance adds (those the ledger does not hold yet)."""
    out: dict[Path, str] = {}
    for entry, record in records:
        for kind, _, digest in digests_of(entry, record):
            path = entry_path(results, kind, digest)
            if path in out or read_entry(path) is not None:
                continue
            body = {
                "kind": kind,
                "digest": digest,
                "training": training_of(record),
                "cell_id": record.cell_id,
                "record_digest": record.digest,
                "accepted_at": accepted_at,
            }
            out[path] = json.dumps(body, indent=2, sort_keys=True) + "\n"
    return list(out.items())


__all__ = [
    "LEDGER_SUBDIR",
    "entry_path",
    "ledger_files",
    "ledger_problems",
    "read_entry",
    "training_of",
]
