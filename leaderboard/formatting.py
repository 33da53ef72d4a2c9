"""Numbers and names as the site writes them: one home for each format (bytes, compute, budgets,
signed margins, α), the file names of the pages and the links the site may print. Pure functions,
no pandas, no I/O.

Record-provided names reach file names only through :func:`slug`; links taken from records are kept
only for http(s) (:func:`safe_url`); no page shows an absolute local path (:func:`display_path`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from benchmark.records.schema import ResultRecord

# --------------------------------------------------------------------------------------------------
# numbers


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "—"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_compute(gpu_hours: float | None, wall_s: float | None) -> tuple[str, str]:
    if finite(gpu_hours) and gpu_hours > 0:
        return f"{gpu_hours:.2f} GPU-h", f"{gpu_hours * 3600:.6g}"
    if finite(wall_s):
        if wall_s < 3600:
            return f"{wall_s / 60:.1f} min (CPU wall)", f"{wall_s:.6g}"
        return f"{wall_s / 3600:.2f} h (CPU wall)", f"{wall_s:.6g}"
    return "—", ""


def fmt_wall(seconds: float) -> str:
    if not finite(seconds):
        return "—"
    return (
        f"{seconds:.1f} s"
        if seconds < 120
        else (f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h")
    )


def fmt_budget(rounds: Any, epochs: Any, steps: Any = None) -> str:
    """``R=5 × E=2 · 200 steps``: rounds, local epochs per round and optimizer steps summed over
    clients."""
    parts = []
    if finite(rounds):
        parts.append(f"R={int(rounds)}")
    if finite(epochs):
        parts.append(f"E={int(epochs)}")
    text = " × ".join(parts) or "—"
    if finite(steps) and steps > 0:
        text += f" · {steps:,.0f} steps"
    return text


def steps_words(steps: Any, samples: Any) -> str:
    """``704 client steps · 11,264 samples``: the step and sample budgets (summed over clients,
    mean over seeds) beside R × E, which alone hides a batch size that multiplies the steps."""
    parts = []
    if finite(steps) and steps:
        parts.append(f"{steps:,.0f} client steps")
    if finite(samples) and samples:
        parts.append(f"{samples:,.0f} samples")
    return " · ".join(parts)


def num(x: Any, spec: str = ".2f") -> str:
    return format(x, spec) if finite(x) else ""


def signed(x: Any) -> str:
    """``+1.23`` / ``−1.23`` (a true minus sign); a value that rounds to zero is ``0.00``, never
    ``−0.00``."""
    if not finite(x):
        return ""
    return "0.00" if round(x, 2) == 0 else f"{x:+.2f}".replace("-", "−")


def ci_text(low: Any, high: Any) -> str:
    if finite(low) and finite(high):
        return f"[{signed(low)}, {signed(high)}]"
    return "no interval (one seed)"


def safe_url(url: Any) -> str | None:
    """Only absolute http(s) links from records become hrefs (a ``javascript:`` URL would run on
    click)."""
    if not isinstance(url, str):
        return None
    parsed = urlparse(url.strip())
    return url.strip() if parsed.scheme in ("http", "https") and parsed.netloc else None


def wandb_url(record: ResultRecord) -> str | None:
    t = record.tracking
    if t is None:
        return None
    if t.url:
        return safe_url(t.url)
    if t.backend == "wandb" and t.entity and t.project and t.run_id and t.mode == "online":
        return f"https://wandb.ai/{quote(t.entity, safe='')}/{quote(t.project, safe='')}/runs/{quote(t.run_id, safe='')}"
    return None


def commit_url(sha: Any, repo_url: str) -> str | None:
    """A link to a commit when the repository's URL is known (a build option) and the sha looks like
    one."""
    if (
        not repo_url
        or not safe_url(repo_url)
        or not isinstance(sha, str)
        or not re.fullmatch(r"[0-9a-f]{7,40}", sha)
    ):
        return None
    return f"{repo_url}/commit/{sha}"


def blob_base(build: Mapping[str, str]) -> str | None:
    url, sha = build.get("repo_url") or "", build.get("commit") or ""
    return f"{url}/blob/{sha}" if commit_url(sha, url) else None


def valid_alpha(a: Any) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and not math.isnan(a)


def alpha_number(a: float) -> str:
    """A heterogeneity α (or any partition parameter) as written everywhere on the site: ``0.1``,
    ``1``, ``1e-05`` (Python's ``g`` format)."""
    return f"{a:g}"


def fmt_alpha(a: float | None) -> str:
    """α for a table cell: ``IID`` for ∞, ``—`` when unknown."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return "—"
    return "IID" if math.isinf(a) else alpha_number(a)


def alpha_sort(a: Any) -> str:
    """α as a sort key of a table cell (IID last when sorting ascending)."""
    if not valid_alpha(a):
        return ""
    return "1e308" if math.isinf(a) else alpha_number(a)


def cell_file(cell_id: str) -> str:
    return f"{slug(cell_id)}.html"


def method_file(method: str) -> str:
    return f"{slug(method)}.html"


def entry_file(entry_id: str) -> str:
    return f"{slug(entry_id)}.html"


def partition_file(dataset: str, label: str) -> str:
    return f"{slug(f'{dataset}--{label}')}.html"


def dataset_file(dataset: str) -> str:
    return f"{slug(dataset)}.html"


def display_path(path: Path | str, sources: Sequence[str]) -> str:
    """A record file as ``<results folder name>/<path inside it>``: never an absolute local path."""
    path = Path(path)
    for src in sources:
        root = Path(src)
        try:
            rel = path.resolve().relative_to(root.resolve())
        except (ValueError, OSError):
            continue
        return str(Path(root.name or "results") / rel)
    return path.name


def _setting_value(v: Any) -> str:
    """A paper setting in words: ∞ for an unbounded number (``rounds: .inf``, one-shot methods),
    never ``inf``."""
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if isinstance(v, str) and v.strip().lower() in ("inf", ".inf", "infinity"):  # YAML: bare inf
        return "∞"
    return str(v)


def settings_text(settings: Any) -> str:
    """``k=v, ...``; a setting the paper does not state (None, NaN) is left out rather than printed
    as ``None``."""
    return ", ".join(
        f"{k}={_setting_value(v)}"
        for k, v in sorted(dict(settings).items())
        if v is not None and not (isinstance(v, float) and math.isnan(v))
    )


def short_source(source: str) -> str:
    """A paper's short citation: its last parenthesised part ("Lubana et al., ICML 2022"), else the
    whole title."""
    m = re.search(r"\(([^()]*(?:et al|,)[^()]*\d{4}[^()]*)\)\s*$", source)
    return m.group(1) if m else source


def federation_short(federation: Mapping[str, Any]) -> str:
    names = {"num_clients": "K", "participation": "p"}
    return (
        ", ".join(
            f"{names.get(k, k)}={v:g}" if isinstance(v, float) else f"{names.get(k, k)}={v}"
            for k, v in federation.items()
        )
        or "any"
    )


BASELINE_NAMES = {"no_pretrain": "random init", "no_pretrain_bn": "calibrated random init"}


def baseline_name(method: str) -> str:
    """A reference point's name for readers ("random init"); other methods keep their registry
    name."""
    return BASELINE_NAMES.get(method, method)


def slug(text: str) -> str:
    """A file-name-safe slug for any record-provided name (never trusted as a path)."""
    clean = re.sub(r"[^a-z0-9_.-]+", "-", str(text).lower()).strip("-.")[:40]
    if clean and clean == str(text):
        return clean
    return f"{clean or 'x'}-{hashlib.sha256(str(text).encode()).hexdigest()[:8]}"


# a grid name a record may carry that a command line can name as it is (the shipped grids': a
# registry-style name, never a path or anything a shell would read)
_GRID_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_CELL_ID = re.compile(r"[0-9a-f]{16}")


def cell_commands(
    grid: Any, cell_id: Any, seed: Any, shipped: Sequence[str] | None = None
) -> dict[str, str] | None:
    """The commands that re-make one record (``run``) and check it against the shipped one
    (``verify``), for a record of a named grid; None when the record's grid, cell id or seed is not
    one a command line can name safely (a submitted grid file, an edited record), or, given
    ``shipped`` (the grids the repository ships), when its grid is not one of them.

    >>> cell_commands("quickstart", "37df683edcf1b329", 1)["verify"]
    'python -m benchmark verify --grid quickstart --only cell=37df683edcf1b329 --seeds 1'
    """
    if not (
        isinstance(grid, str)
        and _GRID_NAME.fullmatch(grid)
        and isinstance(cell_id, str)
        and _CELL_ID.fullmatch(cell_id)
        and isinstance(seed, int)
        and not isinstance(seed, bool)
        and 0 <= seed < 2**31
    ):
        return None
    if shipped is not None and grid not in shipped:
        return None
    only = f"--grid {grid} --only cell={cell_id}"
    return {
        "run": f"python -m benchmark run {only} --seeds {seed} --no-wandb --root runs",
        "verify": f"python -m benchmark verify {only} --seeds {seed}",
    }


_ALPHA = re.compile(r"alpha=([0-9.eE+-]+)")


def partition_words(label: str) -> str:
    """A partition label in words, for the tooltip where its short form (``IID``, ``Dir(0.1)``)
    appears; the label itself closes it."""
    text = str(label)
    if text.startswith("iid"):
        return f"IID: every client's data is a uniform random share of the training set ({text})"
    m = _ALPHA.search(text)
    if "dir" in text.lower() and m:
        return (
            f"Dirichlet label skew, α = {m.group(1)}: each client's class proportions are drawn "
            "from a Dirichlet distribution with this α; the smaller α, the fewer classes a client "
            f"holds ({text})"
        )
    return text
