"""``migrate(raw)``: the one chain that knows old record formats (v1 is the first; later bumps add steps here)."""

from __future__ import annotations

from typing import Any

from benchmark.records.schema import SCHEMA_VERSION, RecordError

# MIGRATIONS[v] turns a raw v-record into a raw (v+1)-record.
MIGRATIONS: dict[int, Any] = {}


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError(f"schema_version {version} is newer than this code ({SCHEMA_VERSION}); update fssl-bench")
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise RecordError(f"no migration from schema_version {version}")
        raw = MIGRATIONS[version](raw)
        version = raw["schema_version"]
    return raw
