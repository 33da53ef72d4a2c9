"""Acceptances: the maintainers' mark that a record's scores were re-evaluated from its submitted
checkpoint.

``python -m benchmark accept BUNDLE --results DIR`` (``benchmark.submission.accept_bundle``) reloads each
record's encoder checkpoint, re-runs the record's tasks and, when every score is reproduced within
:data:`TOLERANCES`, copies the record into ``results/records/v1/`` and writes
``results/acceptances/<cell_id>.accept.json``: the record's digest, every score as reported and as
reproduced, the tolerance applied, the fssl-bench commit that re-ran it, and a digest over all of
it. The record itself is never touched (its own digest stays what the runner sealed).

``leaderboard build`` shows a row as *re-evaluated* only when every record behind it has an
acceptance that verifies here (:func:`reevaluated`): the acceptance's own digest matches its
content, it names the record's digest (so an edited record loses its mark), the record has scores (a
record without any is never marked), it covers every score of the record, each reproduced value lies
within the stated tolerance of the record's value, and no stated tolerance is looser than this
file's. What that proves and what it does not: like a record's digest, an acceptance's digest
catches careless edits, not a forger with write access to ``results/`` — the protection there is
that ``results/`` is the maintainers' repository (reviewed, with history).

Torch-free: the site imports it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.core import bounded_json
from benchmark.core.canonical import digest, pretty_json
from benchmark.records.integrity import DIGEST_FIELD

ACCEPTANCE_VERSION = 1
# a plugin's non-code file above this size is named for a reviewer, in accept's report and on the
# method page (docs/integrity.md: a plugin's own files are the one thing the box cannot hide; a
# packed label table for digits' 1,797 images takes a few KB, a model's weights far more)
PLUGIN_FILE_REVIEW_BYTES = 64 * 1024
ACCEPTANCE_SUBDIR = Path("acceptances")  # results/acceptances/<cell_id>.accept.json
ACCEPTANCE_SUFFIX = ".accept.json"

# Absolute tolerance per task, in the unit of the task's values (percentage points for every task
# but reconstruction, whose values are mean squared errors and a PSNR in dB). Measured on this
# project's CPU machine (docs/integrity.md): re-running the tasks from the saved final state
# reproduces every value bit for bit, with 1 and with 2 threads — knn and linear_probe of a smoke
# cell and of two quickstart cells, knn of a smoke cell of each of the 12 methods, reconstruction of
# a FedMAE smoke cell. The tolerance is not for that machine but for the maintainers' own: another
# CPU, BLAS or torch build may sum in another order and flip a prediction that sits on a tie; 0.5
# points allows one flipped image of digits' 359 test images (1 image = 0.28 points) and 50 of
# CIFAR-10's 10,000, and any raise of a score by more than that is caught.
DEFAULT_TOLERANCE = 0.5
TOLERANCES: Mapping[str, float] = {
    "knn": 0.5,
    "linear_probe": 0.5,
    "linear_native": 0.5,
    "perclient": 0.5,
    "semi_supervised": 0.5,
    "semisup_native": 0.5,
    "transfer": 0.5,
    "transfer_native": 0.5,
    "e2e_classifier": 0.5,
    "finetune": 0.5,
    "coco_detection": 0.5,  # AP points
    # MSE of normalised pixels (around 0.15 on the smoke cell) and PSNR in dB
    "reconstruction": 0.005,
}


def tolerance_for(task: str) -> float:
    """The absolute tolerance a re-evaluated value of ``task`` must fall within (unknown tasks:
    percentage points)."""
    return float(TOLERANCES.get(task, DEFAULT_TOLERANCE))


def tolerance_text() -> str:
    """One line for pages and help texts."""
    pts = sorted(t for t, v in TOLERANCES.items() if v == DEFAULT_TOLERANCE)
    other = [f"{t} ±{v:g}" for t, v in sorted(TOLERANCES.items()) if v != DEFAULT_TOLERANCE]
    return (
        f"±{DEFAULT_TOLERANCE:g} points absolute on every value of {', '.join(pts)} and any other task; "
        + "; ".join(other)
        + " (MSE, and dB of PSNR)"
    )


# ----------------------------------------------------------------------------------------------------
# comparing


@dataclass(frozen=True)
class ScoreCheck:
    """One value of one task score: as the record reports it and as re-evaluation reproduced it."""

    task: str
    card_id: str
    key: str  # the value's name (top1, top5, mse, ...)
    reported: float
    reproduced: float | None  # None: the re-run produced no such score or value
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.reproduced is not None and within(
            self.reported, self.reproduced, self.tolerance
        )

    def line(self) -> str:
        what = f"{self.task} {self.key} (card {self.card_id})"
        if self.reproduced is None:
            return f"{what}: reported {self.reported:.4f}, reproduced nothing (the re-run has no such score)"
        delta = abs(self.reported - self.reproduced)
        sign = "<=" if self.ok else ">"
        return (
            f"{what}: reported {self.reported:.4f}, reproduced {self.reproduced:.4f} "
            f"(|diff| {delta:.4f} {sign} tolerance {self.tolerance:g})"
        )


def within(reported: float, reproduced: float, tolerance: float) -> bool:
    return (
        math.isfinite(reported)
        and math.isfinite(reproduced)
        and abs(float(reported) - float(reproduced)) <= float(tolerance)
    )


def compare_scores(reported: Iterable[Any], reproduced: Iterable[Any]) -> list[ScoreCheck]:
    """Every value of every reported score (``TaskScores``) against the re-evaluated one of the same
    task and card."""
    again = {(s.task, s.card.card_id): dict(s.values) for s in reproduced}
    out = []
    for s in reported:
        values = again.get((s.task, s.card.card_id), {})
        for key, value in sorted(dict(s.values).items()):
            out.append(
                ScoreCheck(
                    s.task,
                    s.card.card_id,
                    key,
                    float(value),
                    float(values[key]) if key in values else None,
                    tolerance_for(s.task),
                )
            )
    return out


# ----------------------------------------------------------------------------------------------------
# the file


def acceptance_path(results: Path, cell_id: str) -> Path:
    return Path(results) / ACCEPTANCE_SUBDIR / f"{cell_id}{ACCEPTANCE_SUFFIX}"


def make_acceptance(
    record: Any,
    checks: Sequence[ScoreCheck],
    *,
    checkpoint: Mapping[str, Any] | None,
    git_sha: str,
    git_dirty: bool,
    accepted_at: str,
    bundle_sha256: str | None,
    training: Mapping[str, Any] | None = None,
    traffic: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The acceptance of ``record`` (every check passed), sealed with its digest. ``training``
    (when a method's code ran in accept's box): ``{"box": ..., "retrained": {...}}``, the re-run's
    numbers (docs/integrity.md). ``traffic``: ``{"derived": true}`` when the record's per-round
    traffic equals what its method declares, ``{"derived": false, "why": ...}`` when the method
    declares nothing (the site badges it; benchmark.submission.traffic)."""
    body = {
        "acceptance_version": ACCEPTANCE_VERSION,
        "cell_id": record.cell_id,
        "method": record.method,
        "record_digest": record.digest,
        "status": record.status,
        "checkpoint": dict(checkpoint) if checkpoint else None,
        "scores": [
            {
                "task": c.task,
                "card_id": c.card_id,
                "key": c.key,
                "reported": c.reported,
                "reproduced": c.reproduced,
                "tolerance": c.tolerance,
            }
            for c in checks
        ],
        "tolerance_rule": "absolute, per value, in the value's unit",
        "fssl_bench": {"git_sha": git_sha, "git_dirty": bool(git_dirty)},
        "accepted_at": accepted_at,
        "bundle_manifest_sha256": bundle_sha256,
    }
    if training is not None:
        body["training"] = dict(training)
    if traffic is not None:
        body["traffic"] = dict(traffic)
    return {**body, DIGEST_FIELD: digest(body)}


def acceptance_digest(raw: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in raw.items() if k != DIGEST_FIELD})


def acceptance_text(raw: Mapping[str, Any]) -> str:
    return pretty_json(raw)


def read_acceptance(path: Path) -> dict[str, Any]:
    """The acceptance at ``path``; ValueError (with the reason) when unreadable or when its digest
    does not match."""
    try:
        raw = bounded_json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable acceptance: {exc}") from None
    if not isinstance(raw, dict) or raw.get("acceptance_version") != ACCEPTANCE_VERSION:
        raise ValueError(
            "not an acceptance file of version "
            f"{ACCEPTANCE_VERSION} (acceptance_version {raw.get('acceptance_version')!r})"
            if isinstance(raw, dict)
            else "not an acceptance file"
        )
    stored = raw.get(DIGEST_FIELD)
    try:
        actual = acceptance_digest(raw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"acceptance content cannot be digested: {exc}") from None
    if stored != actual:
        raise ValueError(
            f"acceptance digest mismatch: its content changed after accept wrote it (stored "
            f"{str(stored)[:12]}…, content {actual[:12]}…)"
        )
    return raw


def reevaluated(record: Any, acceptance: Mapping[str, Any]) -> str | None:
    """Why ``acceptance`` (already read, its digest verified) does not mark ``record`` as
    re-evaluated, or None."""
    if (
        acceptance.get("record_digest") != record.digest
        or acceptance.get("cell_id") != record.cell_id
    ):
        return "it names another record digest (the record changed after it was accepted)"
    # nothing was re-run, so nothing is vouched for: never badged (accept refuses these records)
    if not record.scores:
        return "the record has no scores: there is nothing an acceptance could vouch for"
    stated = {
        (s.get("task"), s.get("card_id"), s.get("key")): s
        for s in acceptance.get("scores") or []
        if isinstance(s, Mapping)
    }
    for s in record.scores:
        for key, value in dict(s.values).items():
            entry = stated.get((s.task, s.card.card_id, key))
            if entry is None:
                return f"it does not cover {s.task} {key}"
            tol, again = entry.get("tolerance"), entry.get("reproduced")
            if not isinstance(tol, (int, float)) or tol > tolerance_for(s.task):
                return f"{s.task} {key}: its tolerance {tol!r} is looser than {tolerance_for(s.task):g}"
            if not isinstance(again, (int, float)) or not within(
                float(value), float(again), float(tol)
            ):
                return f"{s.task} {key}: reproduced {again!r} is not within {tol} of the record's {value}"
    return None


def find_acceptances(roots: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        root = Path(root)
        if root.is_dir():
            out.extend(sorted(root.rglob(f"*{ACCEPTANCE_SUFFIX}")))
    return out


__all__ = [
    "ACCEPTANCE_SUBDIR",
    "ACCEPTANCE_SUFFIX",
    "DEFAULT_TOLERANCE",
    "TOLERANCES",
    "ScoreCheck",
    "acceptance_path",
    "acceptance_text",
    "compare_scores",
    "find_acceptances",
    "make_acceptance",
    "read_acceptance",
    "reevaluated",
    "tolerance_for",
    "tolerance_text",
    "within",
]
