#!/usr/bin/env bash
# THE project test command: runs every test.
#
#   0. the gate: cargo fmt --check, clippy -D warnings on every target, rustdoc -D warnings,
#      and the node's layer rules (scripts/check-layers.py: no file-level import cycles, no
#      layer using a higher one)
#   1. installs the test tools into .tools/ (Node 22, the MCP conformance suite) if missing,
#      Debian's faketime (the clock-skew test and the campaign shift a node's clock with it)
#      and Debian's nginx (the campaign's load-balanced clients, the end-to-end tests)
#   2. cargo test --workspace (all Rust unit and integration tests, the short fault campaign
#      among them), then a smoke run of every fuzz target (scripts/fuzz.sh; installs
#      cargo-fuzz into .tools, runs on the nightly toolchain)
#   3. the Helm chart: helm lint, helm template, kubernetes-validate --strict, CRD drift
#      (scripts/chart-check.sh; installs Helm and the validator into .tools)
#   4. end-to-end tests: real nginx in front of 3 real nodes, the Python MCP SDK, and the
#      conformance suite through nginx (scripts/e2e.sh; installs nginx and a venv)
#   5. the pinned pre-release conformance suite (0.2.0-alpha.12) against one node, requirement
#      sets 2026-07-28 and 2025-11-25 (scripts/conformance-2026.sh)
#   6. the MCP conformance suite against one switchboard node (scripts/conformance.sh)
#
# Needs: Rust/cargo, python3, node + npm (any version; Node 22 is installed locally).
# Exits non-zero if any step fails. On success the last line is `Total: N passed, M failed`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=lib/tools.sh
source "$REPO/scripts/lib/tools.sh"

step() { echo; echo "==> $*"; }

step "gate: format, lints, docs, layers"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
python3 "$REPO/scripts/check-layers.py" node/src

step "test tools"
node22="$(ensure_node22)"
conformance="$(ensure_conformance)"
conformance_next="$(ensure_conformance_next)"
cargo_fuzz="$(ensure_cargo_fuzz)"
libfaketime="$(ensure_faketime)"
nginx="$(ensure_nginx)"
# The fault campaign puts some of its clients behind this nginx.
export NGINX_BIN="$nginx"
echo "node 22:     $node22 ($("$node22" --version))"
echo "conformance: $conformance"
echo "conformance (pre-release): $conformance_next"
echo "faketime:    $libfaketime"
echo "nginx:       $nginx"
echo "cargo-fuzz:  $cargo_fuzz"

step "cargo test --workspace"
cargo test --workspace

step "fuzz smoke: every target for ${FUZZ_SECONDS:-10} s from its seed corpus"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" bash "$REPO/scripts/fuzz.sh"

step "build switchboard"
# cargo test does not necessarily build the binary itself; make sure the one tested is current.
cargo build -p switchboard-node --bin switchboard

step "Helm chart and manifests (helm lint, helm template, kubernetes-validate, CRD drift)"
cargo build -p switchboard-operator --bin switchboard-operator
SWITCHBOARD_OPERATOR_BIN="$REPO/target/debug/switchboard-operator" bash "$REPO/scripts/chart-check.sh"

step "end-to-end: nginx + 3 nodes, Python MCP SDK, conformance suite through nginx"
bash "$REPO/scripts/e2e.sh"

step "MCP conformance suite 0.2.0-alpha.12, requirement sets 2026-07-28 and 2025-11-25 (one node)"
bash "$REPO/scripts/conformance-2026.sh" - 2026-07-28
bash "$REPO/scripts/conformance-2026.sh" - 2025-11-25

step "MCP conformance suite (one node)"
exec bash "$REPO/scripts/conformance.sh"
