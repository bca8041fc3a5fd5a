#!/usr/bin/env bash
# End-to-end suite: a real nginx (round-robin, no session affinity) in front of three real
# `switchboard serve` processes forming a Raft cluster, driven by the official Python MCP SDK.
#
#   1. installs Debian's nginx if it is missing (the system service is never started)
#   2. creates/reuses the venv .tools/e2e-venv with tests/e2e/requirements.txt (rebuilt when
#      the requirements or the Python version change)
#   3. needs target/debug/switchboard (builds it only if it is missing; SWITCHBOARD_BIN overrides)
#   4. runs pytest on tests/e2e (extra arguments go to pytest, e.g. `-k leader -x`)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

VENV="$REPO/.tools/e2e-venv"
REQUIREMENTS="$REPO/tests/e2e/requirements.txt"

log() { echo "e2e: $*" >&2; }

# shellcheck source=lib/tools.sh
source "$REPO/scripts/lib/tools.sh"

ensure_venv() {
    local stamp="$VENV/.requirements.sha256"
    local want
    want="$( (cat "$REQUIREMENTS"; python3 --version) | sha256sum | cut -d' ' -f1)"
    if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    log "creating $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS" </dev/null >&2
    echo "$want" >"$stamp"
}

ensure_binary() {
    if [[ -n "${SWITCHBOARD_BIN:-}" ]]; then
        [[ -x "$SWITCHBOARD_BIN" ]] || { log "SWITCHBOARD_BIN=$SWITCHBOARD_BIN is not executable"; return 1; }
        return 0
    fi
    if [[ ! -x "$REPO/target/debug/switchboard" ]]; then
        log "building target/debug/switchboard"
        flock /tmp/cargo-build.lock cargo build -p switchboard-node --bin switchboard
    fi
}

ensure_nginx >/dev/null
ensure_venv
ensure_binary

export PYTHONDONTWRITEBYTECODE=1
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$REPO/tests/e2e" "$@"
