#!/usr/bin/env bash
# Install the Debian packages the pipeline's optional features need:
#   slurm-wlm, munge  -> the single-node SLURM cluster used by tests/test_slurm.py
#   chromium          -> headless browser used to render the report
# Usage: install-system-deps.sh [PACKAGE ...]   (default: slurm-wlm munge chromium)
# Idempotent: packages that are already installed are skipped, and apt-get is
# not touched at all when nothing is missing.  Does nothing unless run as root
# on a system with apt-get (e.g. a Debian/Ubuntu container); elsewhere it only
# prints what would be needed.
set -euo pipefail

PACKAGES=(slurm-wlm munge chromium)
if [[ $# -gt 0 ]]; then
    PACKAGES=("$@")
fi

log() { printf '[install-system-deps] %s\n' "$*"; }

if [[ "$(id -u)" -ne 0 ]]; then
    log "not root: skipping system packages (${PACKAGES[*]}); install them with your package manager if needed"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    log "apt-get/dpkg not found: skipping system packages (${PACKAGES[*]})"
    exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    if dpkg -s "$pkg" >/dev/null 2>&1 && [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" == "install ok installed" ]]; then
        log "$pkg: already installed"
    else
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    log "all system packages present"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
log "apt-get update"
apt-get update
log "apt-get install -y --no-install-recommends ${missing[*]}"
apt-get install -y --no-install-recommends "${missing[@]}"
log "done"
