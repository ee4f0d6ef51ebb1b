#!/usr/bin/env bash
# Set up (first run) and start the app on http://127.0.0.1:8000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# chainlit reads CI=true as its CI mode, which plants a fake OPENAI_API_KEY
unset CI
exec .venv/bin/chainlit run app.py --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --headless
