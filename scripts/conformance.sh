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
# shellcheck source=lib/conformance-server.sh
source "$REPO/scripts/lib/conformance-server.sh"

URL="${1:-}"
NODE22="$(ensure_node22)"
CONFORMANCE="$(ensure_conformance)"

conformance_workdir conformance
if [[ -z "$URL" ]]; then
    start_conformance_server
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
