"""The release check on the shipped records: every record under results/records/ was made from a
clean checkout of a named commit (``collect --release``'s rule, ``release_problems``), so some
commit holds the code that made it."""

from __future__ import annotations

from pathlib import Path

from benchmark.records.store import load_records, release_problems

RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_every_shipped_record_passes_the_release_check() -> None:
    records, skipped = load_records([RESULTS / "records"])
    assert records and not skipped
    refused = {
        str(path.relative_to(RESULTS)): problems
        for path, r in records
        if (problems := release_problems(r))
    }
    assert not refused, (
        f"{len(refused)} of {len(records)} shipped records may not be released; re-make them from "
        f"a clean commit and `python -m benchmark collect --release`: "
        + "; ".join(f"{p}: {v[0]}" for p, v in sorted(refused.items())[:3])
    )
