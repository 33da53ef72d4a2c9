"""``migrate(raw, current)``: the one chain that knows old record formats (v1 is the first; later
bumps add steps here)."""

from __future__ import annotations

from typing import Any

from benchmark.records.record_error import RecordError

# MIGRATIONS[v] turns a raw v-record into a raw (v+1)-record.
MIGRATIONS: dict[int, Any] = {}


def migrate(raw: dict[str, Any], current: int) -> dict[str, Any]:
    """``raw`` brought to schema version ``current`` (the schema module passes its
    ``SCHEMA_VERSION``)."""
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"schema_version must be an integer, got {version!r}")
    if version > current:
        raise RecordError(
            f"schema_version {version} was written by a newer fssl-bench (this one reads {current}): "
            "upgrade fssl-bench (pip install -U fssl-bench)"
        )
    while version < current:
        if version not in MIGRATIONS:
            raise RecordError(
                f"schema_version {version} is not a version any fssl-bench wrote (the first is 1): the "
                "file is not a record this project can read, and no command can convert it"
            )
        raw = MIGRATIONS[version](raw)
        version = raw["schema_version"]
    return raw
