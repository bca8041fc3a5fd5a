#!/usr/bin/env bash
# Run a frozen requirement set of the pre-release MCP conformance suite
# (@modelcontextprotocol/conformance 0.2.0-alpha.12, `server --requirements REQS`).
#
#   scripts/conformance-2026.sh [URL] [REQS] [SCENARIO]
#
#   URL       test an already running server (e.g. http://host:8080/mcp); without it (or with
#             "-" or "") start target/debug/switchboard (tool set "conformance") on free local
#             ports, test it, stop it
#   REQS      2026-07-28 (default; stateless wire, per-request _meta) or 2025-11-25 (initialize
#             handshake)
#   SCENARIO  run only this scenario, at the REQS wire (`--scenario S --spec-version REQS`: the
#             CLI refuses --requirements together with --scenario), e.g. server-stateless
#
# Fails when any check of any scenario that was run is FAILURE or WARNING, not only the checks
# the requirement set scores (the CLI's own exit code counts scored FAILUREs only): the pending
# scenarios it runs beside the scored ones count too, and so do the Tasks extension's (tasks-*),
# which the CLI runs but does not score. One exception:
#   sep-2640-skills-*  the Skills extension, out of scope: ignored
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/tools.sh
source "$REPO/scripts/lib/tools.sh"
# shellcheck source=lib/conformance-server.sh
source "$REPO/scripts/lib/conformance-server.sh"

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

URL=""
case "${1:-}" in
    http://* | https://*) URL="$1"; shift ;;
    - | "") [[ $# -gt 0 ]] && shift ;;
    -h | --help) usage ;;
esac
REQS="${1:-2026-07-28}"
SCENARIO="${2:-}"
case "$REQS" in
    2026-07-28 | 2025-11-25) ;;
    *) echo "conformance-2026: unknown requirement set '$REQS' (2026-07-28 or 2025-11-25)" >&2; usage ;;
esac
[[ $# -le 2 ]] || usage

NODE22="$(ensure_node22)"
CONFORMANCE="$(ensure_conformance_next)"

conformance_workdir conformance-2026
if [[ -z "$URL" ]]; then
    start_conformance_server
fi

if [[ -n "$SCENARIO" ]]; then
    echo "conformance-2026: running scenario '$SCENARIO' at the $REQS wire against $URL"
    SELECT=(--scenario "$SCENARIO" --spec-version "$REQS")
else
    echo "conformance-2026: running requirement set $REQS against $URL"
    SELECT=(--requirements "$REQS")
fi
suite_rc=0
"$NODE22" "$CONFORMANCE" server --url "$URL" "${SELECT[@]}" -o "$OUTDIR" </dev/null >"$SUITE_LOG" 2>&1 || suite_rc=$?

# The CLI prints "Running requirements R (N scenarios) against URL"; every scenario that ran
# leaves OUTDIR/server-<scenario>-<ISO time, ':' and '.' as '-'>/checks.json.
expected=""
if [[ -z "$SCENARIO" ]]; then
    expected="$(sed -n 's/^Running requirements [^ ]* (\([0-9]*\) scenarios).*/\1/p' "$SUITE_LOG" | head -n1)"
    grep -m1 '^Running requirements ' "$SUITE_LOG" || true
fi

check_rc=0
python3 - "$OUTDIR" "$expected" "$SUITE_LOG" <<'PY' || check_rc=$?
import glob, json, os, re, sys

outdir, expected, suite_log = sys.argv[1], sys.argv[2], sys.argv[3]
files = sorted(glob.glob(os.path.join(outdir, "*", "checks.json")))
if not files:
    with open(suite_log, errors="replace") as f:
        skipped = [l.rstrip() for l in f if l.startswith("SKIPPED: scenario")]
    if skipped:
        sys.exit(0)  # the scenario does not apply at this wire; the summary below says so
    print(f"conformance-2026: no checks.json under {outdir}", file=sys.stderr)
    sys.exit(1)

bad = 0
for path in files:
    scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", os.path.basename(os.path.dirname(path)))
    if scenario.startswith("sep-2640-skills-"):
        continue  # the Skills extension: out of scope
    with open(path) as f:
        checks = json.load(f)
    for check in checks:
        status = check.get("status")
        if status not in ("FAILURE", "WARNING"):
            continue
        message = (check.get("errorMessage") or check.get("description", "")).replace("\n", " | ")
        line = f"{status}: {scenario}: {check.get('id')}: {message}"
        bad += 1
        print(line)

missing = 0
if expected and int(expected) != len(files):
    missing = int(expected) - len(files)
    print(f"conformance-2026: {expected} scenarios were to run but {len(files)} left a checks.json")
if bad or missing:
    print(f"conformance-2026: {bad} check(s) failed or warned in {len(files)} scenario(s)")
    sys.exit(1)
PY

summary="$(sed -n '/^=== SUMMARY ===$/,/^Total: /p' "$SUITE_LOG")"
if [[ -n "$SCENARIO" ]]; then
    summary="$(grep -E '^(Passed: |SKIPPED: )' "$SUITE_LOG" || true)"
fi
failed=0
if [[ "$suite_rc" != 0 || "$check_rc" != 0 ]] || { [[ -z "$summary" ]] && ! grep -q '^SKIPPED: scenario' "$SUITE_LOG"; }; then
    failed=1
    KEEP_WORK=1
    echo "conformance-2026: FAILED (suite exit $suite_rc); results kept in $WORK"
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
    # The CLI's own account of the scenarios it ran but does not score (tasks, pending).
    sed -n '/^Not scored for /,/^$/p' "$SUITE_LOG"
fi
exit "$failed"
