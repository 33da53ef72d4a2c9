"""Re-evaluation: rebuild a record's encoder from its saved pre-trained state and re-run the
record's tasks, every value beside its reproduction. Used by ``submit`` (by default) and by the
maintainers' ``accept``; it imports neither."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from benchmark.records.acceptance_files import ScoreCheck, compare_scores
from benchmark.records.schema import ResultRecord


def reevaluate(
    record: ResultRecord,
    pre: Any,
    *,
    data_root: str | Path | None = None,
    encoder: Any = None,
    elsewhere: Collection[str] = (),
    scored: Iterable[Any] = (),
) -> tuple[list[ScoreCheck], str]:
    """Rebuild the encoder from the pre-trained state ``pre``
    (``benchmark.engine.pretrained.Pretrained``) and re-run the record's tasks (the runner's stage
    functions, in a scratch run directory, on CPU). Returns every value of every reported score
    beside its reproduction, and the rebuilt encoder's architecture fingerprint.

    ``encoder``: the encoder already exported (``accept``: by the method's code in the box, rebuilt
    here from trusted classes, ``benchmark.submission.exported``); the method is then neither
    built nor called here. ``elsewhere``: tasks not run here (``accept``: plugin tasks, run in the
    box, ``benchmark.submission.boxed_tasks``), whose reproduced scores are ``scored``."""
    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.contracts.registries import load_builtins
    from benchmark.engine.stages import (
        build_method,
        build_partition,
        evaluate,
        export_encoder,
        input_spec,
        load_data,
    )
    from benchmark.runroot.rundir import RunDir

    load_builtins()
    cell = Cell.from_dict(record.cell)
    here = dataclasses.replace(cell, tasks=tuple(t for t in cell.tasks if t.name not in elsewhere))
    ds = load_data(cell, data_root)
    if encoder is None:
        encoder = export_encoder(
            build_method(cell, input_spec(ds)), pre.server, pre.client_states()
        )
    with tempfile.TemporaryDirectory() as tmp:
        part = build_partition(cell, ds.train.labels)  # personalised cards need the clients' split
        ev = evaluate(
            here,
            encoder,
            ds,
            part,
            RunDir.of(cell, tmp),
            device=torch.device("cpu"),
            data_root=data_root,
        )
    return compare_scores(record.scores, [*ev.scores, *scored]), encoder.fingerprint
