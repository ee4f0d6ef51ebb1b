#!/usr/bin/env bash
# Set everything up on a fresh machine, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_system_deps.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
