"""``collect --from wandb:ENTITY/PROJECT[/GROUP]``: records back from W&B, validated exactly as
local ones.

Each cell's run (id = cell id, group = grid) carries the sealed ``record.json`` and its score files
as run files (``benchmark.engine.tracking``). This lists the project's runs through the public API
(``wandb.Api().runs``, paged by the API), downloads each finished run's ``record.json``, and hands
it to the same copy step as a local collect (``copy_validated``: digest and cell id checked, each
record written once). Runs that are not finished, have no record or carry one that fails validation
are listed with the reason. Offline runs need none of this: their
``wandb/offline-run-*/files/record.json`` is found by ``collect --from PATH``. The API key stays
with wandb (its netrc or ``WANDB_API_KEY``): nothing here reads, logs or writes it.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmark.core.errors import UsageError
from benchmark.core.terminal import printable
from benchmark.records.files import read_record
from benchmark.records.names import UnsafeName
from benchmark.records.schema import RecordError, ResultRecord
from benchmark.records.store import Skipped, copy_validated, refuse_unsafe
from benchmark.runroot.rundir import RECORD_FILE

RECORD_NAME = RECORD_FILE  # the run file the tracker saved: the record under its run-directory name


def parse_source(spec: str) -> tuple[str, str, str | None]:
    """``ENTITY/PROJECT[/GROUP]`` → (entity, project, group or None)."""
    parts = [p for p in spec.strip("/").split("/") if p]
    if len(parts) not in (2, 3):
        raise UsageError(
            f"--from wandb:{spec}: expected wandb:ENTITY/PROJECT or wandb:ENTITY/PROJECT/GROUP"
        )
    return parts[0], parts[1], (parts[2] if len(parts) == 3 else None)


def _api() -> Any:
    try:
        import wandb

        return wandb.Api(timeout=30)
    except Exception as exc:  # noqa: BLE001 - no key, no network: one line, how to proceed
        raise UsageError(
            f"the W&B API is not usable here ({type(exc).__name__}: {exc}); `wandb login` first, or "
            "collect offline runs with --from PATH"
        ) from None


def _runs(api: Any, entity: str, project: str, group: str | None) -> Iterable[Any]:
    filters = {"group": group} if group else {}
    try:
        # pages fetched by the API
        return list(api.runs(f"{entity}/{project}", filters=filters, per_page=100))
    except Exception as exc:  # noqa: BLE001
        raise UsageError(
            f"cannot list the runs of {entity}/{project}: {type(exc).__name__}: {exc}"
        ) from None


# W&B run ids (the cell id here): one names a scratch folder
RUN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _record_of(run: Any, tmp: Path) -> ResultRecord | str | RecordError:
    """The run's record, or why there is none (a RecordError when the record itself was refused).
    Every call into the W&B API is guarded: whatever it raises is the run's skip reason, one line
    (issue 52: ``files()`` or ``download()`` raising was a traceback from collect)."""
    try:
        return _fetch_record(run, tmp)
    except (RecordError, UnsafeName):
        raise
    except Exception as exc:  # noqa: BLE001 - the W&B API and its objects are someone else's code
        return f"the W&B API failed on this run: {type(exc).__name__}: {printable(str(exc))[:200]}"


def _fetch_record(run: Any, tmp: Path) -> ResultRecord | str | RecordError:
    from benchmark.records.files import MAX_RECORD_BYTES

    state = getattr(run, "state", "finished")
    if state != "finished":
        return f"run state is {printable(str(state))[:40]!r}, not finished"
    if not isinstance(run.id, str) or not RUN_ID_RE.fullmatch(run.id):
        return UnsafeName(f"run id {printable(str(run.id))[:80]!r} is not a W&B run id")
    files = [f for f in run.files() if getattr(f, "name", None) == RECORD_NAME]
    if not files:
        return (
            f"no {RECORD_NAME} among the run's files (a failed cell, or a run logged before records travelled "
            "with W&B: collect its run folder instead)"
        )
    size = getattr(files[0], "size", None)
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_RECORD_BYTES:
        return (
            f"its {RECORD_NAME} announces {printable(str(size))[:40]} bytes (a record holds 1 to "
            f"{MAX_RECORD_BYTES:,}): not downloaded"
        )
    target = tmp / run.id
    files[0].download(root=str(target), replace=True)
    try:
        return read_record(target / RECORD_NAME)
    except RecordError as exc:
        return exc


def collect_wandb(
    spec: str, results: Path, *, api: Any = None, release: bool = False
) -> tuple[list[Path], list[Skipped]]:
    entity, project, group = parse_source(spec)
    api = api if api is not None else _api()
    found: list[tuple[Path, ResultRecord]] = []
    skipped: list[Skipped] = []
    with tempfile.TemporaryDirectory(prefix="fssl-wandb-") as tmp:
        for run in _runs(api, entity, project, group):
            where = Path(f"wandb:{entity}/{project}/{run.id}")
            got = _record_of(run, Path(tmp))
            if isinstance(got, (str, RecordError)):
                skipped.append(Skipped(where, str(got), unsafe=isinstance(got, UnsafeName)))
            else:
                found.append((where, got))
        refuse_unsafe(skipped)  # before anything is written: one line, exit 2
        copied, refused = copy_validated(found, Path(results), release=release)
    return copied, skipped + refused


__all__ = ["collect_wandb", "parse_source"]
