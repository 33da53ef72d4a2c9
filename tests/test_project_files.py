"""The files a user, a packager or a citation manager reads first: LICENSE, CITATION.cff,
CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import benchmark

REPO = Path(__file__).resolve().parents[1]


def test_citation_cff_parses_with_the_required_keys() -> None:
    """The keys CFF 1.2.0 requires (cff-version, message, title, authors: each a person or an entity
    name), and the version and licence the project declares."""
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title"):
        assert isinstance(cff[key], str) and cff[key].strip()
    assert cff["authors"] and all(
        isinstance(a, dict) and (a.get("name") or a.get("family-names")) for a in cff["authors"]
    )
    assert str(cff["version"]) == benchmark.__version__
    assert cff["license"] == "MIT"
    assert set(cff) <= {
        "cff-version",
        "message",
        "title",
        "authors",
        "version",
        "license",
        "keywords",
        "abstract",
        "type",
        "date-released",
        "doi",
        "url",
        "repository-code",
        "preferred-citation",
        "identifiers",
        "references",
        "commit",
        "contact",
        "license-url",
        "repository",
    }


def test_licence_matches_pyproject() -> None:
    assert (REPO / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    assert 'license = { text = "MIT" }' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_changelog_follows_keep_a_changelog() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(
        r"^## \[(\d+\.\d+\.\d+)\] - (Unreleased|\d{4}-\d{2}-\d{2})$", text, re.MULTILINE
    )
    assert releases and releases[0][0] == benchmark.__version__
    sections = set(re.findall(r"^### (\w+)$", text, re.MULTILINE))
    assert sections and sections <= {
        "Added",
        "Changed",
        "Deprecated",
        "Removed",
        "Fixed",
        "Security",
    }


def test_ci_runs_the_readmes_install_and_test_commands_in_a_fresh_venv() -> None:
    """Issue 59: .ci/run reads the README's test command (.ci/readme-command) and runs its two halves
    verbatim inside a virtual environment it makes outside the clone, so a README whose command
    changes shape, or a CI that drifts back to the machine's interpreter, fails here."""
    import subprocess

    out = subprocess.run(
        ["bash", str(REPO / ".ci" / "readme-command")], capture_output=True, text=True, check=True
    ).stdout.strip()
    install, tests = out.split(" && ")
    assert install.startswith("python -m pip install -e ") and "[dev]" in install
    assert tests.startswith("python -m pytest ") and '-m "not gpu"' in tests and "-n " in tests
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'readme_command="$(bash .ci/readme-command)"' in ci
    made, entered = ci.index('-m venv "$venv"'), ci.index('source "$venv/bin/activate"')
    assert made < entered < ci.index('eval "$install_command"') < ci.index('eval "$test_command"')
    assert "-rfEs --durations=10" in ci and 'venv="${CI_VENV:-${TMPDIR:-/tmp}/fssl-ci-venv}"' in ci
