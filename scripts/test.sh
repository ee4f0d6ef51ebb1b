#!/usr/bin/env bash
# Set everything up on a fresh machine, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_system_deps.sh
# The architecture contracts in pyproject.toml first: a broken layer fails in seconds.
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
