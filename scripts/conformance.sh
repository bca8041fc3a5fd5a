#!/usr/bin/env bash
# Run the MCP conformance suite (@modelcontextprotocol/conformance, --suite all).
#
#   scripts/conformance.sh          start target/debug/switchboard (tool set "conformance") on free
#                                   local ports, test it, stop it
#   scripts/conformance.sh URL      test an already running server at URL (e.g. http://host:8080/mcp)
#
# Fails when the suite fails or when any check in the results is FAILURE or WARNING.
# The last line printed on success is the suite's `Total: N passed, M failed`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/tools.sh
source "$REPO/scripts/lib/tools.sh"

URL="${1:-}"
NODE22="$(ensure_node22)"
CONFORMANCE="$(ensure_conformance)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/switchboard-conformance.XXXXXX")"
OUTDIR="$WORK/results"
SUITE_LOG="$WORK/suite.log"
SERVER_LOG="$WORK/server.log"
SERVER_PID=""
KEEP_WORK=0

cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        # Give it a moment for a graceful shutdown, then force it.
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ "$KEEP_WORK" == 0 ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

print_server_log() {
    if [[ -s "$SERVER_LOG" ]]; then
        echo "--- server log ($SERVER_LOG) ---"
        cat "$SERVER_LOG"
        echo "--- end of server log ---"
    fi
}

if [[ -z "$URL" ]]; then
    BIN="$REPO/target/debug/switchboard"
    if [[ ! -x "$BIN" ]]; then
        echo "conformance: $BIN missing; building it" >&2
        (cd "$REPO" && cargo build -p switchboard-node --bin switchboard)
    fi
    read -r PORT MPORT PEERPORT < <(python3 - <<'PY'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
PY
)
    echo "conformance: starting switchboard on 127.0.0.1:$PORT (metrics $MPORT, peer $PEERPORT; a one-node Raft cluster)"
    "$BIN" serve --tools conformance --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$MPORT" \
        --peer-listen "127.0.0.1:$PEERPORT" --data-dir "$WORK/data" \
        </dev/null >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    up=0
    for _ in $(seq 1 300); do # 30 s
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "conformance: switchboard exited before listening" >&2
            KEEP_WORK=1
            print_server_log >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then up=1; break; fi
        sleep 0.1
    done
    if [[ "$up" != 1 ]]; then
        echo "conformance: switchboard did not listen on 127.0.0.1:$PORT within 30 s" >&2
        KEEP_WORK=1
        print_server_log >&2
        exit 1
    fi
    URL="http://127.0.0.1:$PORT/mcp"
fi

echo "conformance: running suite 'all' against $URL"
suite_rc=0
"$NODE22" "$CONFORMANCE" server --url "$URL" --suite all -o "$OUTDIR" </dev/null >"$SUITE_LOG" 2>&1 || suite_rc=$?

grep -m1 '^Running .* suite (' "$SUITE_LOG" || true

# Every check that is not a clean pass (FAILURE or WARNING) fails the run.
check_rc=0
python3 - "$OUTDIR" <<'PY' || check_rc=$?
import glob, json, os, re, sys

outdir = sys.argv[1]
files = sorted(glob.glob(os.path.join(outdir, "*", "checks.json")))
if not files:
    print(f"conformance: no checks.json under {outdir}", file=sys.stderr)
    sys.exit(1)
bad = 0
for path in files:
    # Result directories are named server-<scenario>-<timestamp>.
    scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", os.path.basename(os.path.dirname(path)))
    with open(path) as f:
        checks = json.load(f)
    for check in checks:
        status = check.get("status")
        if status in ("FAILURE", "WARNING"):
            bad += 1
            print(f"{status}: {scenario}: {check.get('id')}: {check.get('errorMessage') or check.get('description', '')}")
if bad:
    print(f"conformance: {bad} check(s) failed or warned in {len(files)} scenario(s)")
    sys.exit(1)
PY

summary="$(sed -n '/^=== SUMMARY ===$/,/^Total: /p' "$SUITE_LOG")"
failed=0
if [[ "$suite_rc" != 0 || "$check_rc" != 0 || -z "$summary" ]]; then
    failed=1
    KEEP_WORK=1
    echo "conformance: FAILED (suite exit $suite_rc); results kept in $WORK"
    grep -A3 '^Failed to run scenario' "$SUITE_LOG" || true
    if [[ -z "$summary" ]]; then
        echo "--- suite output ($SUITE_LOG) ---"
        cat "$SUITE_LOG"
        echo "--- end of suite output ---"
    fi
    print_server_log
fi
if [[ -n "$summary" ]]; then
    echo
    echo "$summary"
fi
exit "$failed"
