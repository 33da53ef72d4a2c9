"""What a submission bundle may hold (``BundleLimits``), in its own module so that the bundle reader
(benchmark.submission.bundle) and the tar header scan (benchmark.submission.tarscan) share it without
an import circle; ``benchmark.submission.bundle`` re-exports it."""

from __future__ import annotations

from dataclasses import dataclass

from benchmark.core.errors import UsageError

MB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class BundleLimits:
    """What a bundle may hold (uncompressed). The defaults fit a few dozen ResNet-18 encoders (about
    45 MB each)."""

    max_total_bytes: int = 1024 * MB
    max_file_bytes: int = 256 * MB
    max_members: int = 2000
    max_manifest_bytes: int = 16 * MB
    max_records: int = 500
    # the models a record's re-evaluation may build (its encoder, members and extras), sized on the
    # meta device before they are built (benchmark.submission.bounds); a ViT-B MAE is ~450 MB
    max_encoder_bytes: int = 1024 * MB
    # folders a bundle's path may go through (submit writes records/<method>/<cell_id>/_pretrain/
    # <key>/final.pt: 6 parts); a tree 1,500 folders deep made the walk raise RecursionError
    max_depth: int = 16

    def __post_init__(self) -> None:
        for name in (
            "max_total_bytes",
            "max_file_bytes",
            "max_members",
            "max_manifest_bytes",
            "max_records",
            "max_encoder_bytes",
            "max_depth",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"bundle limit {name} must be a positive integer, got {value!r}")


DEFAULT_LIMITS = BundleLimits()


__all__ = ["DEFAULT_LIMITS", "MB", "BundleLimits"]
