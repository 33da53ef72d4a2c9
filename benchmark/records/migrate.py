"""``migrate(raw, current)``: the one chain that knows old record formats (v1 is the first; later bumps add steps here)."""

from __future__ import annotations

from typing import Any

from benchmark.records.errors import RecordError

# MIGRATIONS[v] turns a raw v-record into a raw (v+1)-record.
MIGRATIONS: dict[int, Any] = {}


def migrate(raw: dict[str, Any], current: int) -> dict[str, Any]:
    """``raw`` brought to schema version ``current`` (the schema module passes its ``SCHEMA_VERSION``)."""
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"schema_version must be an integer, got {version!r}")
    if version > current:
        raise RecordError(f"schema_version {version} is newer than this code ({current}); update fssl-bench")
    while version < current:
        if version not in MIGRATIONS:
            raise RecordError(f"no migration from schema_version {version}")
        raw = MIGRATIONS[version](raw)
        version = raw["schema_version"]
    return raw
