"""A plugin task's code runs in the box, never in the accepting process (issue 52 item 3).

``accept`` re-evaluates a record's built-in tasks in its own process, on the encoder exported in
the box and rebuilt from trusted classes (``benchmark.submission.exported``). A plugin task is a
stranger's code that reads the test split's labels by design, so it runs in a boxed child
(``benchmark.submission.box_child``, job ``evaluate``): handed the checkpoint's state, the cell and
the dataset's train and test splits (the data it scores on; no data root, no other data set), it
exports the encoder with the method's own code, runs the plugin tasks through the runner's own
``evaluate`` stage and writes their scores as plain numbers. This process reads them bounded,
checks each is a requested task under the card the task declared in the box, and compares them
with the record's like any other score. A plugin task's scores stay unranked (their card travels in
the bundle, ``benchmark.submission.carried_cards``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.submission.box import BoxRefused, run_boxed

MAX_SCORES = 64
MAX_VALUES = 64


@dataclass(frozen=True)
class CardId:
    card_id: str


@dataclass(frozen=True)
class BoxedScore:
    """A plugin task's score as the boxed child reported it (what ``compare_scores`` reads)."""

    task: str
    card: CardId
    values: Mapping[str, float]


def plugin_tasks(record: Any) -> list[str]:
    """The record's tasks registered by an installed plugin here (entry points' metadata, nothing
    imported)."""
    from benchmark.contracts.registries import TASKS, load_builtins
    from benchmark.core.registry import BUILT_IN

    load_builtins()
    names = [t.get("name") for t in record.cell.get("tasks") or [] if isinstance(t, Mapping)]
    return sorted(
        {n for n in names if isinstance(n, str) and TASKS.origin(n) not in (BUILT_IN, None)}
    )


def scores_in_box(
    record: Any,
    pre: Any,
    tasks: Sequence[str],
    cards: Mapping[str, set[str]],
    *,
    data_root: str | Path | None,
    hidden: Iterable[Any] = (),
    unboxed: bool = False,
) -> list[BoxedScore]:
    """The scores of ``record``'s plugin ``tasks`` on its checkpoint ``pre``, computed in the box
    (``cards``: task → the card ids it built in the box; a score under another card is refused).
    BoxRefused (one line) when the child gives no valid answer."""
    import torch

    from benchmark.contracts.cell import Cell
    from benchmark.engine.stages import load_data

    ds = load_data(Cell.from_dict(record.cell), data_root)
    payload = {
        "state": {
            "model": dict(pre.server.model),
            "extra": dict(pre.server.extra),
            "clients": {int(k): dict(v) for k, v in pre.client_tensors.items()},
        },
        "train_images": ds.train.images,
        "train_labels": torch.as_tensor(ds.train.labels),
        "test_images": ds.test.images,
        "test_labels": torch.as_tensor(ds.test.labels),
    }
    job = {
        "kind": "evaluate",
        "cell": dict(record.cell),
        "tasks": list(tasks),
        "dataset": ds.name,
        "revision": ds.revision,
        "mean": list(ds.mean),
        "std": list(ds.std),
        "num_classes": ds.num_classes,
    }
    what = f"running the plugin task(s) {', '.join(tasks)} in the box"
    raw = run_boxed(job, payload, what=what, hidden=hidden, unboxed=unboxed)
    return _validated(raw, tasks, cards, what)


def _validated(
    raw: Mapping[str, Any], tasks: Sequence[str], cards: Mapping[str, set[str]], what: str
) -> list[BoxedScore]:
    scores = raw.get("scores")
    if not isinstance(scores, list) or len(scores) > MAX_SCORES:
        raise BoxRefused(f"{what}: the child's answer is not a list of scores")
    out = []
    for s in scores:
        if not isinstance(s, dict) or set(s) != {"task", "card_id", "values"}:
            raise BoxRefused(f"{what}: the child's answer holds something that is not a score")
        task, card_id, values = s["task"], s["card_id"], s["values"]
        if task not in tasks or not isinstance(card_id, str) or card_id not in cards.get(task, ()):
            raise BoxRefused(
                f"{what}: the child scored a task or card it was not asked for (only "
                f"{', '.join(tasks)}, under the cards they built in the box)"
            )
        if (
            not isinstance(values, dict)
            or len(values) > MAX_VALUES
            or not all(isinstance(k, str) and re.fullmatch(r"[\w.@-]{1,64}", k) for k in values)
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in values.values()
            )
        ):
            raise BoxRefused(f"{what}: the child's score of {task} is not a set of numbers")
        out.append(BoxedScore(task, CardId(card_id), {k: float(v) for k, v in values.items()}))
    return out


__all__ = ["BoxedScore", "plugin_tasks", "scores_in_box"]
