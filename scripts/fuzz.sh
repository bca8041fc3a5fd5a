#!/usr/bin/env bash
# Fuzz the parsers and decoders that take outside input (fuzz/fuzz_targets/): the JSON-RPC
# parser, SSE event ids (Last-Event-ID), sealed request ids and request states, peer frames
# (forwarded writes, Raft RPCs, log entries applied to a state machine), admin API bodies, and
# McpServer validation. Each target starts from its committed seed corpus (fuzz/corpus/T).
#
#   scripts/fuzz.sh              smoke: every target for FUZZ_SECONDS (default 20) each
#   scripts/fuzz.sh long [T...]  FUZZ_SECONDS (default 3600) per target; prints exec counts
#
# Builds without a sanitizer (safe Rust; it keeps the build and the runs fast on two cores).
# A crash leaves its input under fuzz/artifacts/T/; replay it with
#   cargo +nightly fuzz run -s none T fuzz/artifacts/T/crash-...
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
source "$REPO/scripts/lib/tools.sh"
mode="${1:-smoke}"
[[ "$mode" == long || "$mode" == smoke ]] || { echo "usage: $0 [smoke|long [TARGET...]]" >&2; exit 2; }
shift || true
cargo_fuzz="$(ensure_cargo_fuzz)"
# `cargo +nightly fuzz` finds the subcommand on PATH.
export PATH="$(dirname "$cargo_fuzz"):$PATH"
default_seconds=20
[[ "$mode" == long ]] && default_seconds=3600
seconds="${FUZZ_SECONDS:-$default_seconds}"
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(jsonrpc event_ids sealed peer_frames admin_bodies mcpserver)
cd "$REPO/fuzz"
cargo +nightly fuzz build -s none --release
failed=0
for target in "${targets[@]}"; do
    work="$(mktemp -d)"
    cp -r "corpus/$target/." "$work/" 2>/dev/null || true
    log="$work.log"
    if cargo +nightly fuzz run -s none --release "$target" "$work" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        execs="$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')"
        echo "fuzz $target: ok, ${execs:-?} execs in ${seconds}s"
    else
        echo "fuzz $target: CRASH (see fuzz/artifacts/$target/)"
        tail -40 "$log"
        failed=1
    fi
    rm -rf "$work" "$log"
done
exit "$failed"
