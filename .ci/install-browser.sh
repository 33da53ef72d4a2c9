#!/usr/bin/env bash
# Installs what the `browser` tests need: Debian's chromium and its chromedriver (never a downloaded driver), and
# selenium. Called from .ci/run before `pytest -m browser`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
python -m pip install -q "selenium>=4.15"
chromium --version
chromedriver --version
