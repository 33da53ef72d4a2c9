#!/usr/bin/env bash
# Installs what the `detectron2` tests and the smoke grid's detection cell need: pycocotools and a CPU-only,
# Python-only Detectron2 built by ../shared/tools/install-detectron2-cpu.sh (read its header; it is idempotent).
# Called from .ci/run before `pytest -m detectron2`. Users with network access to GitHub should install the
# official Detectron2 instead (docs/detection.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
"$PY" -m pip install -q "pycocotools>=2.0.7"
script="$repo/../shared/tools/install-detectron2-cpu.sh"
if [ -f "$script" ]; then
  PYTHON="$PY" bash "$script"
elif "$PY" -c "import detectron2" >/dev/null 2>&1; then
  echo "detectron2 already importable"
else
  echo "install-detectron2-cpu.sh not found at $script and detectron2 is not importable;" \
       "the detectron2 tests will be skipped (see docs/detection.md)" >&2
fi
"$PY" -c "import detectron2, pycocotools; print('detectron2', detectron2.__version__, '+ pycocotools ready')" || true
