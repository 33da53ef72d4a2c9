"""Result records: schema, canonical JSON, migration, atomic storage. Torch-free (the leaderboard
imports it)."""

from benchmark.records.schema import (
    SCHEMA_VERSION,
    CommStats,
    ComputeStats,
    EnvInfo,
    ProtocolCard,
    RecordError,
    ResultRecord,
    TaskScores,
    TrackingRef,
    from_json,
    to_json,
)

__all__ = [
    "SCHEMA_VERSION",
    "CommStats",
    "ComputeStats",
    "EnvInfo",
    "ProtocolCard",
    "RecordError",
    "ResultRecord",
    "TaskScores",
    "TrackingRef",
    "from_json",
    "to_json",
]
