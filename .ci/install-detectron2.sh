#!/usr/bin/env bash
# Installs what the `detectron2` tests and the smoke grid's detection cell need: pycocotools and a
# CPU-only, Python-only Detectron2 built by scripts/install-detectron2-cpu.sh (read its header; it is
# idempotent). Called from .ci/run before the test run. Users with network access to GitHub should
# install the official Detectron2 instead (docs/detection.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
"$PY" -m pip install -q "pycocotools>=2.0.7"
PYTHON="$PY" bash "$repo/scripts/install-detectron2-cpu.sh"
"$PY" -c "import detectron2, pycocotools
print('detectron2', detectron2.__version__, '+ pycocotools ready')"
