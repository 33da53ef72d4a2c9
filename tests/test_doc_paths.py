"""Every repository path a documentation page names exists: README.md, CONTRIBUTING.md and every page
under docs/, in inline code spans (each word of a command too) and in fenced code blocks. A renamed
or deleted file fails here until the page follows (tests/test_repo_standalone.py checks the cited
pages and § sections; this checks every other file and folder).

What counts as a repository path: a token whose first folder is a tracked top-level folder of the
repository (``benchmark/``, ``docs/``, ``methods/``, ``tests/``, ...), or one that starts with
``./`` or ``../`` (read from the page's folder). Paths in other projects' repositories (``src/``,
``easyfl/``, ``solo/``), in a run directory (``runs/``, ``scores/``) or in a user's own package are
not this repository's and are not checked. A placeholder (``methods/<name>.py``,
``annotations/{train,val}.json``) checks the folder before it; a glob must match at least one file;
``pkg/module.Name`` is a module and a name in it.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Paths a page names on purpose though this repository has no such file, each with why. A path of
# another project whose first folder happens to share a name with one of ours, or a file that a
# command the page shows writes on the reader's machine.
EXEMPT: dict[tuple[str, str], str] = {
    ("docs/design.md", "tests/test_models.py"): "timm's registry tests, a source the design cites",
    ("docs/design.md", "tests/losses/test_simclr.py"): "solo-learn's loss tests, a cited source",
    ("docs/design.md", "tests/historic_results/"): "MTEB's result fixtures, a cited source",
    ("docs/methods/featarc.md", "scripts/noniid_script/train_test_cifar_ssl_alg_dir_reprod.sh"): (
        "Dec-SSL's script, a cited source"
    ),
    ("docs/methods/flesd.md", "scripts/pubset.sh"): "FLESD's script, a cited source",
    ("docs/adding-a-method.md", "methods/fedfoo.py"): "what `new-method fedfoo` writes",
    ("docs/adding-a-method.md", "tests/methods/test_fedfoo.py"): "what `new-method fedfoo` writes",
    ("docs/adding-a-method.md", "tests/test_fedfoo.py"): "in the plugin package `--plugin` writes",
    # written by commands into results/, none of them committed yet
    ("docs/adding-a-method.md", "results/manifests/*.json"): "written by `benchmark expand`",
    ("docs/integrity.md", "results/acceptances/<cell_id>.accept.json"): "written by `accept`",
    ("docs/submitting.md", "results/acceptances/<cell_id>.accept.json"): "written by `accept`",
    ("docs/submitting.md", "results/cards/<card_id>.card.json"): "written by `accept`",
    ("docs/adding-a-task.md", "results/cards/<card_id>.card.json"): "written by `accept`",
    ("docs/adding-a-partitioner.md", "results/manifests/*.json"): "written by `benchmark expand`",
    ("docs/adding-a-task.md", "./fssl-NAME/"): "what `new-task NAME --plugin` writes",
    ("docs/adding-a-task.md", "tests/test_centroid_probe.py"): "in the package `--plugin` writes",
    (
        "docs/adding-a-task.md",
        "tasks/cards/centroid_probe@v1.json",
    ): "the example's card, to publish",
}

SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
# a path-like word: folders and a name, with globs, placeholders and a trailing ``.Name`` allowed
WORD = re.compile(r"(?<![\w./$~-])((?:\.\.?/)*[\w.@-]+/[\w./*?<>{}\[\],@-]*)")
PLACEHOLDER = re.compile(r"[<{]")


def pages() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


@cache
def top_level_folders() -> frozenset[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return frozenset(name.split("/")[0] for name in out.splitlines() if "/" in name)


def candidates(text: str) -> list[str]:
    """The path-like words of a page's code spans and fenced blocks, trailing punctuation and
    ``:name`` / ``(args)`` / ``#anchor`` suffixes removed."""
    blocks = FENCE.findall(text)
    inline = SPAN.findall(FENCE.sub("", text))
    out = []
    for chunk in [*blocks, *inline]:
        for word in WORD.findall(chunk):
            word = re.split(r"[:(#]", word, maxsplit=1)[0].rstrip(".,;")
            if "{" in word and "}" not in word:  # a brace list cut by a space: keep its folder
                word = word[: word.index("{")] + "{}"
            out.append(word)
    return out


def is_repo_path(word: str) -> bool:
    return word.startswith(("./", "../")) or word.split("/")[0] in top_level_folders()


def exists(word: str, page: Path) -> bool:
    base = page.parent if word.startswith(("./", "../")) else REPO
    m = PLACEHOLDER.search(word)
    if m:  # check the folder that holds the placeholder
        folder = word[: m.start()].rpartition("/")[0]
        return (base / folder).is_dir()
    if any(c in word for c in "*?["):
        return any(base.glob(word))
    path = base / word
    if path.exists():
        return True
    module, _, name = word.rpartition(".")  # methods/_shared/nets.WorkingNets
    return bool(module) and name.isidentifier() and (base / f"{module}.py").is_file()


def missing() -> dict[tuple[str, str], str]:
    out = {}
    for page in pages():
        rel = str(page.relative_to(REPO))
        for word in candidates(page.read_text(encoding="utf-8")):
            if is_repo_path(word) and not exists(word, page):
                out[(rel, word)] = rel
    return out


def test_every_repository_path_a_page_names_exists() -> None:
    bad = sorted(key for key in missing() if key not in EXEMPT)
    assert not bad, "pages name paths that do not exist:\n" + "\n".join(
        f"{page}: {word}" for page, word in bad
    )


def test_every_exemption_is_still_needed() -> None:
    """An exempt path that now exists, or that its page no longer names, leaves the list."""
    stale = sorted(set(EXEMPT) - set(missing()))
    assert not stale, f"exemptions no longer needed: {stale}"


def test_the_check_reads_spans_blocks_placeholders_and_globs(tmp_path: Path) -> None:
    text = (
        "Run `python -m benchmark run --grid benchmark/grids/nope.yaml` and see\n"
        "`methods/<name>.py`, `results/nowhere/<cell>.json`, `tasks/cards/*.json`, `docs/*.nope`,\n"
        "`methods/_shared/nets.WorkingNets`, `src/utils.py` (another project's), `runs/x/y.json`.\n"
        "```\nbenchmark/engine/gone.py   # a tree line\n```\n"
    )
    page = REPO / "docs" / "README.md"  # read as if a docs page named them
    words = [w for w in candidates(text) if is_repo_path(w)]
    assert "src/utils.py" not in words and "runs/x/y.json" not in words
    assert {w for w in words if not exists(w, page)} == {
        "benchmark/grids/nope.yaml",
        "results/nowhere/<cell>.json",
        "docs/*.nope",
        "benchmark/engine/gone.py",
    }
