"""The records layer's error type (its own module, so that the schema and the migration chain share
it without importing each other)."""


class RecordError(ValueError):
    """A record file is malformed, truncated, or of an incompatible schema."""
