# shellcheck shell=bash
# What both conformance scripts share: a work directory that is removed unless a run failed,
# and a local `switchboard serve --tools conformance` (a one-node Raft cluster) to test.
#
#   conformance_workdir LABEL   sets WORK, OUTDIR, SUITE_LOG, SERVER_LOG; stops the server and
#                               removes WORK on exit (kept when KEEP_WORK=1)
#   start_conformance_server    starts target/debug/switchboard on free ports; sets URL

conformance_workdir() {
    LABEL="$1"
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/switchboard-$LABEL.XXXXXX")"
    OUTDIR="$WORK/results"
    SUITE_LOG="$WORK/suite.log"
    SERVER_LOG="$WORK/server.log"
    SERVER_PID=""
    KEEP_WORK=0
    trap conformance_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

conformance_cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        # Give it a moment for a graceful shutdown, then force it.
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ "$KEEP_WORK" == 0 ]]; then rm -rf "$WORK"; fi
}

print_server_log() {
    if [[ -s "$SERVER_LOG" ]]; then
        echo "--- server log ($SERVER_LOG) ---"
        cat "$SERVER_LOG"
        echo "--- end of server log ---"
    fi
}

start_conformance_server() {
    local bin="$REPO/target/debug/switchboard"
    if [[ ! -x "$bin" ]]; then
        echo "$LABEL: $bin missing; building it" >&2
        (cd "$REPO" && cargo build -p switchboard-node --bin switchboard)
    fi
    local port mport peerport
    read -r port mport peerport < <(python3 - <<'PY'
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
    echo "$LABEL: starting switchboard on 127.0.0.1:$port (metrics $mport, peer $peerport; a one-node Raft cluster)"
    "$bin" serve --tools conformance --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" \
        --peer-listen "127.0.0.1:$peerport" --data-dir "$WORK/data" \
        </dev/null >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    local up=0
    for _ in $(seq 1 300); do # 30 s
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "$LABEL: switchboard exited before listening" >&2
            KEEP_WORK=1
            print_server_log >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
        sleep 0.1
    done
    if [[ "$up" != 1 ]]; then
        echo "$LABEL: switchboard did not listen on 127.0.0.1:$port within 30 s" >&2
        KEEP_WORK=1
        print_server_log >&2
        exit 1
    fi
    URL="http://127.0.0.1:$port/mcp"
}
