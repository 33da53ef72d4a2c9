"""pyproject.toml declares exactly what the product code imports: every third-party module that
benchmark/, methods/, tasks/ or leaderboard/ imports (at the top of a file or inside a function) is a
declared dependency, or one of the extras for the optional parts (ray, slurm, detection), and every
dependency is imported somewhere. A library that arrives only through another one (pillow through
torchvision, markupsafe through jinja2) is declared where the code imports it directly."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("benchmark", "methods", "tasks", "leaderboard")  # the packages the wheel ships
# the extras that the optional parts of the product import (dev and bench are the tests' and the
# performance scripts')
PRODUCT_EXTRAS = ("ray", "slurm", "detection")

# the import name -> the distribution that provides it, where the two differ
DISTRIBUTION_OF = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "markdown_it": "markdown-it-py",
    "pytorch_metric_learning": "pytorch-metric-learning",
}
# imported, but installable by no requirement in pyproject.toml, each with why
UNDECLARED = {
    "detectron2": "not on PyPI: built from source (scripts/install-detectron2-cpu.sh, docs/detection.md)",
}


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    return {normalise(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group()) for r in requirements}


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """The core dependencies and each extra's, normalised."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    return requirement_names(project["dependencies"]), {
        k: requirement_names(v) for k, v in extras.items()
    }


def third_party_imports(source: str) -> set[str]:
    """The top-level names of the absolute imports in ``source`` that are neither the standard
    library nor the project's own packages."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - set(PRODUCT) - {"__future__"}


def product_imports() -> dict[str, list[str]]:
    """Distribution (normalised) -> the product files that import it."""
    out: dict[str, list[str]] = {}
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            for name in third_party_imports(path.read_text(encoding="utf-8")):
                dist = normalise(DISTRIBUTION_OF.get(name, name))
                out.setdefault(dist, []).append(str(path.relative_to(REPO)))
    return out


def test_every_library_the_product_imports_is_declared() -> None:
    core, extras = declared()
    allowed = core.union(*(extras[e] for e in PRODUCT_EXTRAS)) | set(UNDECLARED)
    bad = {d: files[:3] for d, files in product_imports().items() if d not in allowed}
    assert not bad, f"imported but not declared in pyproject.toml: {bad}"


def test_every_declared_dependency_is_imported() -> None:
    core, extras = declared()
    imported = set(product_imports())
    unused = {
        where: sorted(names - imported)
        for where, names in [("dependencies", core)] + [(e, extras[e]) for e in PRODUCT_EXTRAS]
        if names - imported
    }
    assert not unused, f"declared in pyproject.toml but imported nowhere in {PRODUCT}: {unused}"


def test_the_scan_sees_lazy_imports_and_maps_names() -> None:
    source = (
        "from __future__ import annotations\nimport os, numpy.linalg\nfrom . import x\n"
        "from benchmark.api import y\ndef f():\n    from PIL import Image\n    import scipy.stats\n"
    )
    assert third_party_imports(source) == {"numpy", "PIL", "scipy"}
    assert normalise(DISTRIBUTION_OF["sklearn"]) == "scikit-learn"
    assert normalise("PyYAML") == normalise("pyyaml") == "pyyaml"
