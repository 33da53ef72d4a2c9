"""The "Submitted tasks" page's model (issue 47 item 2): the scores of plugin tasks whose protocol
card an accepted bundle carried (``<results>/cards/<card_id>.card.json``, written by ``benchmark
accept``; ``benchmark.submission.carried_cards``). No track names these cards, so nothing here is
ranked: one table per card, its runs in a fixed order (method, then seed), no rank and no leader,
until a maintainer publishes the card and adds a track for it. Pure; no HTML here."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.records.schema import ProtocolCard, ResultRecord
from leaderboard.formatting import cell_file
from leaderboard.loading import reproduced_value

UNRANKED = "unranked until a maintainer adds a track"


def submitted_tasks(
    records: Sequence[tuple[Path, ResultRecord]],
    cards: Mapping[str, ProtocolCard],
    acceptances: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """One entry per carried card with at least one score under it: the card as the track pages
    show a built-in card (name, id, summary) plus its task, version and settings, and its runs."""
    out = []
    for card_id, card in sorted(cards.items(), key=lambda kv: (kv[1].name, kv[0])):
        runs = [
            _run(record, score, acceptances.get(record.cell_id))
            for _, record in records
            for score in record.scores
            if score.card.card_id == card_id
        ]
        if not runs:
            continue
        out.append(
            {
                "card_name": card.name,
                "card_id": card_id,
                "card_summary": card.summary,
                "task": card.task,
                "version": card.version,
                "settings": json.dumps(dict(card.settings), sort_keys=True),
                "runs": sorted(runs, key=lambda r: (r["method"], r["seed"], r["cell_id"])),
            }
        )
    return out


def _run(record: ResultRecord, score: Any, acceptance: Mapping[str, Any] | None) -> dict[str, Any]:
    value = score.values[score.main_metric]
    again = reproduced_value(acceptance, score)
    return {
        "cell_id": record.cell_id,
        "file": cell_file(record.cell_id),
        "method": record.method,
        "dataset": record.dataset,
        "partition": record.partition_label,
        "seed": record.seed,
        "metric": score.main_metric,
        "value": f"{value:.2f}",
        "reproduced": f"{again:.2f}" if again is not None else "—",
    }


__all__ = ["UNRANKED", "submitted_tasks"]
