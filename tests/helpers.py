"""Shared test helpers: the smallest real cells (digits 16×16, micro backbones, 2 clients), and the
kill/resume check every stateful method's tests run.

The cell builder lives in :mod:`benchmark.commands.check_method` (``check-method`` needs it outside the
tests); re-exported here.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from benchmark.commands.check_method import SMOKE_OVERRIDES, smoke_cell, smoke_method_settings
from benchmark.submission.box import box_unavailable

__all__ = [
    "SMOKE_OVERRIDES",
    "TASK_SMOKE",
    "assert_same_numbers",
    "digits_inputs",
    "needs_bubblewrap",
    "run_straight_and_resumed",
    "smoke_cell",
    "smoke_method_settings",
]


# the box accept trains submitted methods in needs bubblewrap, an optional system package
needs_bubblewrap = pytest.mark.skipif(
    box_unavailable() is not None,
    reason=f"bubblewrap (/usr/bin/bwrap) cannot run here ({box_unavailable()}): "
    "bash .ci/install-bubblewrap.sh installs it",
)

# every registered task's smallest config, for the task registry smoke (tests/tasks/) and the device
# check (tests/benchmark/test_device_check.py): task -> (method whose encoder it evaluates, config);
# None = covered by a dedicated test
TASK_SMOKE: dict[str, tuple[str, dict] | None] = {
    "knn": ("no_pretrain", {}),
    "linear_probe": ("no_pretrain", {"epochs": 1}),
    "semi_supervised": ("no_pretrain", {"steps": 3}),
    "transfer": (
        "no_pretrain",
        {"target": "digits", "target_resolution": 16, "epochs": 1, "label_fraction": 0.1},
    ),
    "transfer_native": (
        "no_pretrain",
        {"target": "digits", "target_resolution": 16, "epochs": 1, "label_fraction": 0.1},
    ),
    "linear_native": ("no_pretrain", {"card": "orchestra", "epochs": 1}),
    # drop_last at batch 256
    "semisup_native": ("no_pretrain", {"epochs": 1, "label_fraction": 0.5}),
    "finetune": ("no_pretrain", {"epochs": 1, "warmup_epochs": 0.5, "label_fraction": 0.1}),
    "perclient": ("no_pretrain", {"epochs": 1}),
    "e2e_classifier": ("dec_sl", {}),
    "reconstruction": ("fedmae", {"max_images": 8}),
    "coco_detection": None,  # tests/tasks/test_coco_detection.py (needs Detectron2)
}


@functools.lru_cache(maxsize=1)
def digits_inputs() -> Any:
    """The ``InputSpec`` of the digits default (16x16, its own statistics), for tests that build a
    method by hand."""
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.stages import input_spec

    return input_spec(load_dataset_splits("digits", {}))


def run_straight_and_resumed(
    cell: Any, root: Path, *, stop_after_round: int = 1
) -> tuple[Any, Any]:
    """The cell run straight through (under ``root/a``) and run again killed after
    ``stop_after_round`` and resumed (under ``root/b``); returns both records."""
    from benchmark.engine.runner import run_cell

    straight = run_cell(cell, Path(root) / "a", device="cpu")
    assert run_cell(cell, Path(root) / "b", device="cpu", stop_after_round=stop_after_round) is None
    resumed = run_cell(cell, Path(root) / "b", device="cpu")
    assert straight is not None and resumed is not None
    return straight, resumed


def assert_same_numbers(a: Any, b: Any) -> None:
    """Two records of one cell carry the same final weights, scores and bytes."""
    assert a.final_state_digest == b.final_state_digest
    assert [s.values for s in a.scores] == [s.values for s in b.scores]
    assert a.comm == b.comm
