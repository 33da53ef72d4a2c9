"""The carried plugin-task cards of a received bundle (the file format and its checks are
``benchmark.records.carried_card_format``): read them, match them to the bundle's records, and say where
``accept`` keeps them under ``--results``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.records.carried_card_format import (
    RESULTS_CARDS_SUBDIR,
    CarriedCardError,
    card_document,
    card_file,
    card_path,
    card_text,
    plugin_cards,
    read_card_file,
)
from benchmark.records.schema import ProtocolCard, ResultRecord


def read_bundle_cards(root: Path, manifest: Mapping[str, Any]) -> dict[str, ProtocolCard]:
    """card_id → carried card of a received bundle (the manifest's files and their sha256s were
    checked before). CarriedCardError (one line) when a listed card is not a listed file at
    ``cards/<card_id>.card.json`` or is refused by :func:`parse_carried_card`."""
    from benchmark.submission.bundle import inside

    listed = manifest.get("cards", [])
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise CarriedCardError("manifest.json: 'cards' must be a list of paths")
    files = manifest["files"]
    out: dict[str, ProtocolCard] = {}
    for rel in listed:
        path = inside(root, rel) if rel in files else None
        if path is None:
            raise CarriedCardError(f"card {rel[:80]!r} is not a listed file inside the bundle")
        card = read_card_file(path, rel)
        if rel != card_path(card.card_id):
            raise CarriedCardError(
                f"{rel}: card {card.card_id} belongs at {card_path(card.card_id)}"
            )
        out[card.card_id] = card
    return out


def card_problems(
    carried: Mapping[str, ProtocolCard], records: Sequence[ResultRecord]
) -> list[str]:
    """Why the carried cards are not exactly the cards of the records' plugin-task scores: a carried
    card whose digest is no such score's card id (or whose name or summary differs), or such a score
    without its carried card."""
    needed = plugin_cards(records)
    out = []
    for card_id, card in sorted(carried.items()):
        mine = needed.get(card_id)
        if mine is None:
            out.append(
                f"{card_path(card_id)}: card {card_id} is the card of no plugin-task score of the "
                "bundle's records (its digest matches none of theirs)"
            )
        elif card_document(mine) != card_document(card):
            out.append(f"{card_path(card_id)}: its name or summary differs from the records' card")
    for card_id in sorted(set(needed) - set(carried)):
        c = needed[card_id]
        out.append(
            f"the records score the plugin task {c.task!r} under card {c.name} ({card_id}), which "
            f"the bundle does not carry ({card_path(card_id)}; submit writes it)"
        )
    return out


def card_targets(results: Path, carried: Mapping[str, ProtocolCard]) -> list[Path]:
    """``<results>/cards/<card_id>.card.json`` of each carried card not kept there already; refused
    (before any work) when a link is on the way or the file is there with another card."""
    out = []
    for card_id, card in sorted(carried.items()):
        path = Path(results) / RESULTS_CARDS_SUBDIR / card_file(card_id)
        here = Path(results)
        for part in (RESULTS_CARDS_SUBDIR, path.name):
            here = here / part
            if here.is_symlink():
                raise CarriedCardError(
                    f"{here} is a link: accept writes only plain files (remove it)"
                )
        if path.exists():
            if not path.is_file() or path.read_text(encoding="utf-8") != card_text(card):
                raise CarriedCardError(f"{path} exists with another card; remove it by hand first")
            continue
        out.append(path)
    return out


__all__ = ["CarriedCardError", "card_problems", "card_targets", "read_bundle_cards"]
