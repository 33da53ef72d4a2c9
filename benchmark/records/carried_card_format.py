"""A plugin task's protocol card, carried with its records (issue 47 item 2): the file format, read
by ``benchmark accept`` (benchmark.submission.carried_cards checks a bundle's cards against its
records) and by the site.

A built-in task's card is a file of this repository (``tasks/cards/``); a plugin task's card
exists only in the plugin's code (its ``card()``). ``submit`` writes the card of every plugin task
the bundled records score, as that task's ``card()`` produced it (the record's own score card), to
``cards/<card_id>.card.json`` in the bundle (listed in the manifest's ``files``, with its sha256,
and in ``cards``). ``accept`` reads each one bounded (:data:`MAX_CARD_BYTES`), checks it against a
closed schema (:func:`parse_carried_card`), requires its stated ``card_id`` to be the digest of its
task, version and settings and the carried cards to be exactly the cards of the records'
plugin-task scores (``benchmark.submission.carried_cards.card_problems``). Such a score is not
bounded by a card of ``tasks/cards/`` (there is none), but the installed plugin (the one the record
ran, checked by its source digest) must build that very card from the cell's task config. Accepted,
the card is kept beside the records in ``<results>/cards/<card_id>.card.json``
(:data:`RESULTS_CARDS_SUBDIR`); the leaderboard reads those files (:func:`load_carried_cards`) and
shows the scores under them on its "Submitted tasks" page, unranked until a maintainer adds a track
for the card.

Torch-free: a card is data.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmark.core import bounded_json
from benchmark.records.schema import ProtocolCard, ResultRecord

BUNDLE_CARDS_DIR = "cards"  # inside a bundle
# not <card_id>.json: a 16-hex stem is taken for a record by benchmark.records.store
CARD_SUFFIX = ".card.json"
RESULTS_CARDS_SUBDIR = "cards"  # under --results, beside records/ and acceptances/
MAX_CARD_BYTES = 64 * 1024
MAX_TEXT = 200  # name, task, version, summary
MAX_DEPTH = 8  # nesting of settings values
KEYS = frozenset({"name", "task", "version", "summary", "settings", "card_id"})
CARD_ID_RE = re.compile(r"[0-9a-f]{16}")


class CarriedCardError(ValueError):
    """A carried card that is refused (one line)."""


def card_path(card_id: str) -> str:
    """Where a card travels in a bundle (a card id is 16 hex characters: a safe name)."""
    return f"{BUNDLE_CARDS_DIR}/{card_file(card_id)}"


def card_file(card_id: str) -> str:
    return f"{card_id}{CARD_SUFFIX}"


def card_document(card: ProtocolCard) -> dict[str, Any]:
    """The carried JSON of a card, as its task's ``card()`` produced it, with its digest."""
    return {
        "name": card.name,
        "task": card.task,
        "version": card.version,
        "summary": card.summary,
        "settings": dict(card.settings),
        "card_id": card.card_id,
    }


def card_text(card: ProtocolCard) -> str:
    return json.dumps(card_document(card), indent=2, sort_keys=True) + "\n"


def plugin_cards(records: Iterable[ResultRecord]) -> dict[str, ProtocolCard]:
    """card_id → card of every score of a task the records ran from a plugin (``env.plugins`` names
    ``task:NAME``): the cards a bundle must carry."""
    out: dict[str, ProtocolCard] = {}
    for record in records:
        plugins = dict(record.env.plugins)
        for score in record.scores:
            if f"task:{score.task}" in plugins:
                out.setdefault(score.card.card_id, score.card)
    return out


def _check_value(value: Any, where: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise CarriedCardError(f"{where}: nested more than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str, int)):
        if isinstance(value, str) and len(value) > 4 * MAX_TEXT:
            raise CarriedCardError(f"{where}: a string longer than {4 * MAX_TEXT} characters")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CarriedCardError(f"{where}: non-finite number")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_value(v, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _check_value(v, f"{where}.{k[:40]}", depth + 1)
        return
    raise CarriedCardError(f"{where}: {type(value).__name__} is not a JSON value")


def parse_carried_card(raw: Any, where: str) -> ProtocolCard:
    """The card of one carried document: closed keys, strings within :data:`MAX_TEXT`, settings an
    object of JSON values with ``selection``, and ``card_id`` the digest of task, version and
    settings. CarriedCardError (one line) otherwise."""
    if not isinstance(raw, dict):
        raise CarriedCardError(f"{where}: a card must be a JSON object")
    if set(raw) != KEYS:
        extra, missing = sorted(set(raw) - KEYS), sorted(KEYS - set(raw))
        raise CarriedCardError(
            f"{where}: keys must be {sorted(KEYS)} (extra {extra}, missing {missing})"
        )
    for key in ("name", "task", "version", "summary"):
        value = raw[key]
        if not isinstance(value, str) or len(value) > MAX_TEXT or (key != "summary" and not value):
            raise CarriedCardError(f"{where}: {key} must be a string of 1..{MAX_TEXT} characters")
    settings = raw["settings"]
    if not isinstance(settings, dict) or "selection" not in settings:
        raise CarriedCardError(f"{where}: settings must be an object naming its selection")
    _check_value(settings, f"{where}: settings")
    card = ProtocolCard(
        task=raw["task"],
        version=raw["version"],
        settings=settings,
        summary=raw["summary"],
        name=raw["name"],
    )
    stated = raw["card_id"]
    if not isinstance(stated, str) or not CARD_ID_RE.fullmatch(stated):
        raise CarriedCardError(f"{where}: card_id must be 16 hex characters")
    if card.card_id != stated:
        raise CarriedCardError(
            f"{where}: states card_id {stated}, but its task, version and settings digest to "
            f"{card.card_id} (an edited card)"
        )
    return card


def read_card_file(path: Path, where: str) -> ProtocolCard:
    """One carried card file, read within :data:`MAX_CARD_BYTES` and parsed."""
    from benchmark.records.files import read_text_bounded
    from benchmark.records.record_error import RecordError

    try:
        raw = bounded_json.loads(read_text_bounded(path, MAX_CARD_BYTES))
    except RecordError as exc:
        raise CarriedCardError(f"{where}: {exc}") from None
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise CarriedCardError(f"{where}: not a JSON card ({type(exc).__name__})") from None
    return parse_carried_card(raw, where)


def load_carried_cards(
    results_dirs: Iterable[Path | str],
) -> tuple[dict[str, ProtocolCard], list[tuple[Path, str]]]:
    """card_id → card of every ``<results>/cards/*.card.json`` (accept wrote them), and the files refused
    with why (never raises: a bad file must not stop a site build)."""
    out: dict[str, ProtocolCard] = {}
    bad: list[tuple[Path, str]] = []
    for root in results_dirs:
        folder = Path(root) / RESULTS_CARDS_SUBDIR
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob(f"*{CARD_SUFFIX}")):
            try:
                card = read_card_file(path, str(path))
            except CarriedCardError as exc:
                bad.append((path, str(exc)))
                continue
            if path.name != card_file(card.card_id):
                bad.append((path, f"card {card.card_id} belongs in {card_file(card.card_id)}"))
                continue
            out[card.card_id] = card
    return out, bad


__all__ = [
    "BUNDLE_CARDS_DIR",
    "MAX_CARD_BYTES",
    "RESULTS_CARDS_SUBDIR",
    "CarriedCardError",
    "card_document",
    "card_file",
    "card_path",
    "card_text",
    "load_carried_cards",
    "parse_carried_card",
    "plugin_cards",
]
