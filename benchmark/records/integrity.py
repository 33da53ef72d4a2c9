"""A record's digest: sha256 over its canonical content (cell, scores, cards, environment, code
identity, tracking), sealed by the runner when the record is written and checked by ``collect``,
``submit`` and ``leaderboard build``.

What it proves: the record is the one the runner wrote — an accidental or careless edit (a score
typed over, a config value changed, a file merged by hand) no longer matches and the record is
refused, or shown on the site's skipped page with the reason, never in a table. What it does not
prove: anyone can recompute a digest after editing a record on purpose. Scores that do not rest on
the submitter come from re-evaluation of the submitted checkpoint (``submit`` re-evaluates by
default, the maintainers' ``accept`` repeats it and writes the acceptance the site's "re-evaluated"
badge rests on: ``benchmark.records.acceptance_files``; docs/integrity.md). Torch-free.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmark.core.canonical import digest, to_plain

DIGEST_FIELD = "digest"
# fields only a GPU cell fills: empty, they are left out of the digest, so a CPU record's digest is
# the one it had before they existed
OPTIONAL_GPU_FIELDS = (
    ("compute", "concurrency"),
    ("compute", "peak_gpu_mem_bytes"),
    ("env", "gpu"),
)


def record_digest(record: Any) -> str:
    """sha256 of the canonical JSON of the record without its own digest field."""
    body = to_plain(record)
    body.pop(DIGEST_FIELD, None)
    env = body.get("env")
    if isinstance(env, dict) and not env.get("kernels"):
        env.pop("kernels", None)  # records written before env.kernels existed keep their digest
    if isinstance(env, dict) and not env.get("cuda_precision"):
        env.pop("cuda_precision", None)  # so do records of cells that did not run on CUDA
    compute = body.get("compute")
    if isinstance(compute, dict) and not compute.get("client_samples"):
        compute.pop("client_samples", None)  # so do records written before client_samples
    if isinstance(compute, dict) and compute.get("clients_without_step") is None:
        compute.pop("clients_without_step", None)  # and before clients_without_step
    if isinstance(compute, dict) and compute.get("reused_from") is None:
        compute.pop("reused_from", None)  # and records computed by their own cell
    # and CPU records (none of these is recorded off a GPU), and records written before them
    for part, key in OPTIONAL_GPU_FIELDS:
        section = body.get(part)
        if isinstance(section, dict) and not section.get(key):
            section.pop(key, None)
    return digest(body)


def seal(record: Any) -> Any:
    """The record with its digest set (the runner's last step before writing it)."""
    return dataclasses.replace(record, **{DIGEST_FIELD: record_digest(record)})


def integrity_problems(record: Any) -> list[str]:
    """Why ``record`` is not the one the runner wrote, or [] when its digest matches its content."""
    stored = getattr(record, DIGEST_FIELD, "")
    if not stored:
        return [
            "no digest: the record was not sealed by the runner (written by an older fssl-bench, or assembled by "
            "hand); re-run the cell, or run collect on its run folder with this version"
        ]
    if stored != record_digest(record):
        return [
            f"digest mismatch: the record's content changed after the runner sealed it (stored {stored[:12]}…, "
            f"content {record_digest(record)[:12]}…)"
        ]
    return []


__all__ = ["DIGEST_FIELD", "integrity_problems", "record_digest", "seal"]
