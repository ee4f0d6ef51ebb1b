#!/usr/bin/env bash
# A queue worker for imports and reindexing: IMPORT_WORKERS at a time, until Ctrl-C / SIGTERM.
# Run it wherever the stores are reachable: REDIS_URL (the queue), MILVUS_URL (a Milvus server; a
# Milvus Lite file cannot be opened by two processes), MONGO_URL or a DATA_DIR on the same disk as the
# app's, MINIO_ENDPOINT or that same DATA_DIR. Settings come from the environment and .env.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -c "from graphs.importing import run_worker; run_worker()"
