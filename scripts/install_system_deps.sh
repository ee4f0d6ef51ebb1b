#!/usr/bin/env bash
# System packages the test suite needs: Ceph's RADOS gateway serves as the real S3 server
# behind tests/test_object_store.py; Debian's Chromium (driven by Playwright, never `playwright install`)
# and CJK + emoji fonts for the browser test; Redis (the queue of the multi-process tests and of
# production, REDIS_URL). Idempotent: installs only what is missing.
set -euo pipefail

packages=(radosgw ceph-mon ceph-osd chromium chromium-driver fonts-noto-cjk fonts-noto-color-emoji redis-server)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "system deps already installed: ${packages[*]}"
    exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
