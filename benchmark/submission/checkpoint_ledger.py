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
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.core import bounded_json
from benchmark.records.schema import ResultRecord

LEDGER_SUBDIR = "ledger"
MAX_ENTRY_BYTES = 64 * 1024
KINDS = (("checkpoint", "checkpoint"), ("state", "final state"))
# a digest the ledger files: 64 lower-case hex digits (anything else names no entry)
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
    return [(kind, words, d) for (kind, words), d in zip(KINDS, values) if _SHA256.fullmatch(d)]


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


@dataclass
class Backfill:
    """What :func:`backfill` found: the entries to write, how many the ledger already holds, and
    the digests two records claim for different trainings (left out, for a maintainer to look at)."""

    files: list[tuple[Path, str]] = field(default_factory=list)
    held: int = 0
    conflicts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def accepted_records(
    results: Path,
) -> tuple[list[tuple[Mapping[str, Any], ResultRecord]], list[str]]:
    """Every finished record the results folder holds (``records/``: the shipped runs and every
    bundle accepted before the ledger existed), each with what its acceptance says of its
    checkpoint (``{"checkpoint": {"sha256": ...}}``; ``{}`` for a record nobody submitted: only its
    final-state digest is known); and one line per record or acceptance that does not read."""
    from benchmark.records.acceptance_files import find_acceptances, read_acceptance
    from benchmark.records.store import load_records

    records, bad = load_records([Path(results) / "records"])
    skipped = [f"{s.path}: {s.reason}" for s in bad]
    checkpoints: dict[str, Mapping[str, Any]] = {}
    for path in find_acceptances([Path(results) / "acceptances"]):
        try:
            acc = read_acceptance(path)
        except ValueError as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if isinstance(acc.get("checkpoint"), Mapping):
            checkpoints[str(acc.get("record_digest"))] = {
                "checkpoint": acc["checkpoint"],
                "accepted_at": acc.get("accepted_at"),
            }
    out = []
    for _, record in records:
        if record.status != "ok" or not record.final_state_digest:
            continue
        out.append((checkpoints.get(record.digest) or {"checkpoint": {}}, record))
    return out, skipped


def backfill(results: Path) -> Backfill:
    """The ledger entries the records already in ``results`` call for (issue 52: a shipped or
        earlier-accepted checkpoint must not come back as another training), those the ledger holds
        left out: idempotent, and the same bytes wherever it runs (``accepted_at`` is the acceptance's,
    else the record's ``created_at``). Entries name ``backfilled_from`` (``acceptance`` where an acceptance gave
        the checkpoint's sha256, else ``record``). A digest two records claim for different trainings
        (or one the ledger holds for another) is a conflict: no entry for it, one line each."""
    out = Backfill()
    records, out.skipped = accepted_records(results)
    claims: dict[Path, dict[str, Any]] = {}
    for entry, record in records:
        training = training_of(record)
        for kind, words, digest in digests_of(entry, record):
            path = entry_path(results, kind, digest)
            held = read_entry(path)
            first = claims.setdefault(
                path, {"training": training, "record": record, "entry": entry}
            )
            if held is not None and held.get("training") != training:
                out.conflicts.append(
                    f"{words} {digest[:12]}…: the ledger holds it for record "
                    f"{str(held.get('cell_id'))[:40]}, record {record.cell_id} claims another training"
                )
                first["conflict"] = True
            elif first["training"] != training:
                out.conflicts.append(
                    f"{words} {digest[:12]}…: records {first['record'].cell_id} and "
                    f"{record.cell_id} claim it for different trainings"
                )
                first["conflict"] = True
            elif held is not None:
                first["held"] = True
    for path, claim in claims.items():
        if claim.get("conflict"):
            continue
        if claim.get("held"):
            out.held += 1
            continue
        record = claim["record"]
        kind = path.name.split("-", 1)[0]
        body = {
            "kind": kind,
            "digest": path.stem.split("-", 1)[1],
            "training": claim["training"],
            "cell_id": record.cell_id,
            "record_digest": record.digest,
            "accepted_at": str(claim["entry"].get("accepted_at") or record.created_at),
            "backfilled_from": "acceptance" if claim["entry"].get("checkpoint") else "record",
        }
        out.files.append((path, json.dumps(body, indent=2, sort_keys=True) + "\n"))
    return out


__all__ = [
    "LEDGER_SUBDIR",
    "Backfill",
    "backfill",
    "entry_path",
    "ledger_files",
    "ledger_problems",
    "read_entry",
    "training_of",
]
