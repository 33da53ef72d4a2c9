#!/usr/bin/env bash
# The GPU check in one go, for a GPU machine that has PyTorch and no network (issue 41;
# docs/performance.md, "On a GPU"): install the carried wheels, then
# `python -m benchmark doctor --calibrate`, with everything it writes under $OUT.
#
#   bash tools/gpu-check.sh [WHEELS]        (WHEELS: the folder tools/prepare_wheels.py wrote; default .whl)
#
# Before, on a machine with the package index (once; the wheels must match the GPU machine's Python):
#   python tools/prepare_wheels.py --python 3.12 --have TARGET_PACKAGES.txt --skip wandb --out .whl [--detectron2]
# where TARGET_PACKAGES.txt is `python3 -m pip list --format=freeze` from the GPU machine (or its
# image's documented package list): only what is missing there is carried.
#
# What it does, in about 8 minutes on one H100-class GPU (doctor's budget is 450 s; its own progress
# lines say which check runs and for how long):
#   1. WHEELS/*.whl installed with pip --no-index --no-deps into a folder of its own (/tmp/fssl-site,
#      first on PYTHONPATH), so the machine's own packages, PyTorch above all, are left as they are;
#   2. the environment the check needs: the repository on PYTHONPATH (no install of the project),
#      W&B offline, the hub offline, Python unbuffered;
#   3. $OUT/env.txt (nvidia-smi, python, pip list), then doctor --calibrate writing
#      $OUT/calibration.json and its printed table and progress to $OUT/calibrate.log.
# $OUT defaults to ./gpu-check-out. The exit code is doctor's: 0 every check passed, 1 a check failed
# (named in the log), 2 a usage error; 3 here means the wheels did not install (see $OUT/pip.log).
# Copy $OUT/calibration.json to ~/.cache/fssl-bench/calibration/<device>.json (the name the log's
# last line gives) on the machine that plans the grids, or pass it to `run --dry-run --calibration`.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
wheels=${1:-.whl}
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 \
  RAY_USAGE_STATS_ENABLED=0 PIP_DISABLE_PIP_VERSION_CHECK=1
site=/tmp/fssl-site
if compgen -G "$wheels/*.whl" >/dev/null; then
  echo "installing $(ls "$wheels"/*.whl | wc -l) carried wheels from $wheels into $site"
  if ! "$PY" -m pip install --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$wheels"/*.whl >"$OUT/pip.log" 2>&1; then
    echo "the carried wheels did not install: $OUT/pip.log" >&2
    exit 3
  fi
  export PYTHONPATH="$repo:$site${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "no wheels in $wheels: using what this machine has"
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi
{
  nvidia-smi || true
  "$PY" -VV
  "$PY" -m pip list --format=freeze 2>/dev/null
  "$PY" -c "import sys; print('sys.path:', sys.path)"
} >"$OUT/env.txt" 2>&1
# DOCTOR_ARGS: extra options, e.g. "--tiny --device cpu" to try this script on a CPU machine
# shellcheck disable=SC2086
"$PY" -m benchmark doctor --calibrate ${DOCTOR_ARGS:-} --out "$OUT/calibration.json" 2>&1 \
  | tee "$OUT/calibrate.log"
rc=${PIPESTATUS[0]}
echo "doctor --calibrate exit code $rc; report and log under $OUT"
exit "$rc"
