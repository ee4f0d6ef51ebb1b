#!/usr/bin/env bash
# Create .venv and install everything the app and its tests need. Idempotent and quick when
# nothing changed (a hash of pyproject.toml is kept in the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat .venv/.deps-hash 2>/dev/null)" != "$want" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    # The CPU build of torch first: an unpinned resolve would pull a multi-GB CUDA build.
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python - <<'PY' > /tmp/zgzk-requirements.txt
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))
PY
    .venv/bin/python -m pip install -q -r /tmp/zgzk-requirements.txt
    echo "$want" > .venv/.deps-hash
fi
