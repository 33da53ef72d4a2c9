"""The repository stands on its own: no tracked file names a path outside it, and every
documentation page (and numbered section) a tracked file cites exists in it (docs/README.md lists
the pages)."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            r"\.\./" + "shared",
            "shared/" + "specs",
            "shared/" + "tools",
            r"\bspecs/\w+\.md",
            r"DESIGN\.md",
            r"\bDESIGN" + " §",
        ]
    )
)
MD_PATH = re.compile(
    r"(?<![\w./:@-])((?:\.\./|\./)?[\w@-][\w./@-]*\.md)\b"  # a path ending in .md
    r"(?:\s*(?:\)\s*)?§\s*(\d+(?:\.\d+)*[a-z]?))?"  # and the § section that follows it, if any
)
NOT_REPO = ("http", "www.", "github.com")  # a public page, not a path in this repository
# Files of other projects' repositories that pages name as sources (Detectron2, EasyFL, FedMAR-
# DecMAR), and paths
# broken across a line ("results/tuning/" + newline + the file name).
EXTERNAL = {
    "INSTALL.md",
    "applications/fedssl/README.md",
    "readme.md",
    "quickstart_finetune_tune.md",
}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    files = []
    for name in out.split("\n"):
        path = REPO / name
        if name and path.is_file() and path.suffix not in {".png", ".svg", ".ico"}:
            try:
                path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            files.append(path)
    return files


@cache
def docs_by_name() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for p in (REPO / "docs").rglob("*.md"):
        out.setdefault(p.name, []).append(p)
    return out


def resolve(cited: str, where: Path) -> Path | None:
    """A cited ``*.md``: relative to the citing file, to the repository root, or (a bare name) one
    docs/ page."""
    for base in (where.parent, REPO):
        p = (base / cited).resolve()
        if p.is_file() and p.is_relative_to(REPO):
            return p
    if "/" not in cited and len(docs_by_name().get(cited, [])) == 1:
        return docs_by_name()[cited][0]
    return None


def section_text(page: Path, number: str) -> str | None:
    """The text of section ``number`` of a page: a numbered heading (``## 3. Title``, ``### 2.1
    Title``), a bold numbered paragraph (``**4.10 Title.**``), or item M of section N (``§N.M``: a
    numbered list item or table row)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    num = re.escape(number)
    for i, line in enumerate(lines):
        m = re.match(rf"(#+)\s+{num}\.?\s", line)
        if m:
            level = len(m.group(1))
            end = next(
                (j for j in range(i + 1, len(lines)) if re.match(rf"#{{1,{level}}}\s", lines[j])),
                len(lines),
            )
            return "\n".join(lines[i:end])
        if re.match(rf"\*\*{num}\.?\s", line):
            return "\n".join(lines[i : i + 40])
    if "." in number:
        head, item = number.rsplit(".", 1)
        parent = section_text(page, head)
        if parent and re.search(
            rf"(?m)^\s*(?:{re.escape(item)}\.\s|\|\s*(?:{num}|{re.escape(item)})\s*\|)", parent
        ):
            return parent
    return None


def citations() -> list[tuple[Path, int, str, str | None]]:
    out = []
    for path in tracked_text_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in MD_PATH.finditer(line):
                before = line[max(0, m.start() - 40) : m.start()]
                if any(s in before.split()[-1] if before.split() else False for s in NOT_REPO):
                    continue
                if m.group(1) not in EXTERNAL:
                    out.append((path, n, m.group(1), m.group(2)))
    return out


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    bad = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()[:100]}"
        for p in tracked_text_files()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not bad, "\n".join(bad)


def test_every_cited_page_and_section_exists() -> None:
    bad = []
    for path, n, cited, section in citations():
        page = resolve(cited, path)
        where = f"{path.relative_to(REPO)}:{n}"
        if page is None:
            bad.append(f"{where}: {cited} is not a file in the repository")
        elif section and section_text(page, section) is None:
            bad.append(f"{where}: {cited} has no section §{section}")
    assert not bad, "\n".join(bad)


def test_the_citation_check_sees_a_missing_page_and_a_missing_section(tmp_path: Path) -> None:
    assert resolve("docs/methods/fedu.md", REPO / "README.md")
    assert resolve("docs/methods/no_such_method" + ".md", REPO / "README.md") is None
    fedu = REPO / "docs" / "methods" / "fedu.md"
    assert section_text(fedu, "6.1") and section_text(fedu, "2.4")
    assert section_text(fedu, "9.7") is None and section_text(fedu, "6.99") is None


@pytest.mark.parametrize(
    "page",
    sorted(
        p.relative_to(REPO / "docs").as_posix()
        for p in (REPO / "docs").rglob("*.md")
        if p.name != "README.md"
    ),
)
def test_every_docs_page_is_linked_from_the_index(page: str) -> None:
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    assert f"]({page})" in index, f"docs/README.md does not link {page}"


def listed_tests(page: Path) -> list[tuple[str, str]]:
    """(test file, test function) pairs a method or protocol page lists under "Tests in the
    repository": a line "`tests/....py`:" followed by "- `test_name`" items."""
    out, current = [], None
    for line in page.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"`(tests/[\w/]+\.py)`:", line.strip())
        if m:
            current = m.group(1)
        elif current and (t := re.match(r"- `(test_\w+)`", line)):
            out.append((current, t.group(1)))
    return out


@pytest.mark.parametrize(
    "page",
    sorted(
        p.relative_to(REPO).as_posix()
        for sub in ("methods", "protocols")
        for p in (REPO / "docs" / sub).glob("*.md")
    ),
)
def test_every_test_a_docs_page_names_exists(page: str) -> None:
    listed = listed_tests(REPO / page)
    assert listed, f"{page} lists no tests"
    missing = [
        f"{f}::{name}"
        for f, name in listed
        if not (REPO / f).is_file()
        or not re.search(rf"^def {name}\(", (REPO / f).read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert not missing, f"{page} names tests that do not exist: {missing}"
