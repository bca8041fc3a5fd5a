#!/usr/bin/env bash
# Checks the Helm chart and the manifests the operator writes, offline:
#
#   1. installs Helm 4 and kubernetes-validate into .tools/ if missing (recipes in DESIGN.md)
#   2. helm lint --strict, with the default values and with every value set (ci/all-values.yaml)
#   3. helm template with both, CRD included, validated with kubernetes-validate --strict
#      against Kubernetes 1.33 (the version the operator's k8s-openapi feature targets)
#   4. what the values switch on and off (replicas, leader-election Role, ServiceMonitor,
#      PrometheusRule, dashboard ConfigMap), and that the chart renders as a subchart (global)
#   5. the chart's CRD is byte-for-byte crds/mcpserver.yaml
#   6. the children the operator renders for the chart's example McpServer validate too
#
# Needs: npm, python3 (venv), unzip, cargo (to build the operator, unless
# SWITCHBOARD_OPERATOR_BIN names a built binary).
# Exits non-zero if any check fails; the last line is `chart-check: N passed, M failed`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=lib/tools.sh
source "$REPO/scripts/lib/tools.sh"

CHART="$REPO/charts/switchboard-operator"
K8S_VERSION="1.33.0"

passed=0
failed=0
check() {
    local name=$1
    shift
    if "$@"; then
        echo "ok   $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        failed=$((failed + 1))
    fi
}

helm="$(ensure_helm)"
validator="$(ensure_kubernetes_validate)"
echo "helm:                $helm ($("$helm" version --short))"
echo "kubernetes-validate: $validator ($("$validator" --version))"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

validate() {
    "$validator" --strict --quiet -k "$K8S_VERSION" "$@"
}

# The documents of kind $1 in the multi-document YAML file $2.
kind_docs() {
    awk -v kind="$1" '
        /^---/ { if (keep) printf "%s", doc; doc = ""; keep = 0; next }
        { doc = doc $0 "\n"; if ($0 == "kind: " kind) keep = 1 }
        END { if (keep) printf "%s", doc }
    ' "$2"
}
export -f kind_docs

check "helm lint --strict (default values)" "$helm" lint --strict "$CHART"
check "helm lint --strict (all values)" "$helm" lint --strict "$CHART" -f "$CHART/ci/all-values.yaml"
check "helm template (default values)" \
    bash -c '"$1" template ops "$2" --namespace switchboard-system --include-crds > "$3"' _ "$helm" "$CHART" "$out/default.yaml"
check "helm template (all values)" \
    bash -c '"$1" template ops "$2" --namespace switchboard-system --include-crds -f "$2/ci/all-values.yaml" > "$3"' _ "$helm" "$CHART" "$out/all.yaml"
check "kubernetes-validate --strict $K8S_VERSION (default values)" validate "$out/default.yaml"
check "kubernetes-validate --strict $K8S_VERSION (all values)" validate "$out/all.yaml"
check "the chart refuses values outside its schema" \
    bash -c '! "$1" template ops "$2" --set log.format=xml >/dev/null 2>&1' _ "$helm" "$CHART"
check "the removed membership.enabled switch is refused" \
    bash -c '! "$1" template ops "$2" --set membership.enabled=false >/dev/null 2>&1' _ "$helm" "$CHART"
check "the chart refuses replicas and lease durations outside their range" \
    bash -c '! "$1" template ops "$2" --set replicaCount=0 >/dev/null 2>&1 \
        && ! "$1" template ops "$2" --set leaderElection.leaseDurationSeconds=2 >/dev/null 2>&1 \
        && ! "$1" template ops "$2" --set leaderElection.leaseDurationSeconds=301 >/dev/null 2>&1' _ "$helm" "$CHART"
check "all values render the ServiceMonitor and the default values do not" \
    bash -c 'grep -q "^kind: ServiceMonitor" "$1" && ! grep -q "^kind: ServiceMonitor" "$2"' _ "$out/all.yaml" "$out/default.yaml"
check "all values render the PrometheusRule and the default values do not" \
    bash -c 'grep -q "^kind: PrometheusRule" "$1" && ! grep -q "^kind: PrometheusRule" "$2"' _ "$out/all.yaml" "$out/default.yaml"
check "all values render the dashboard ConfigMap and the default values do not" \
    bash -c 'kind_docs ConfigMap "$1" | grep -q "^  switchboard.json: " && ! kind_docs ConfigMap "$2" | grep -q "^  switchboard.json: "' \
    _ "$out/all.yaml" "$out/default.yaml"
check "the Grafana dashboard is valid JSON" \
    bash -c 'python3 -m json.tool "$1" >/dev/null' _ "$CHART/dashboards/switchboard.json"
check "the default Deployment runs 2 replicas with leader election" \
    bash -c 'd="$(kind_docs Deployment "$1")" && grep -q "^  replicas: 2$" <<<"$d" \
        && grep -q "name: SWITCHBOARD_OPERATOR_LEASE_NAME" <<<"$d" && grep -q "name: SWITCHBOARD_OPERATOR_LEASE_SECONDS" <<<"$d"' \
    _ "$out/default.yaml"
check "all values set the Deployment's replicas (replicaCount)" \
    bash -c 'kind_docs Deployment "$1" | grep -q "^  replicas: 3$"' _ "$out/all.yaml"
check "the Role grants the operator its leader-election leases" \
    bash -c 'r="$(kind_docs Role "$1")" && grep -q "coordination.k8s.io" <<<"$r" && grep -q "resources: \[\"leases\"\]" <<<"$r" \
        && grep -q "verbs: \[\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\"\]" <<<"$r" \
        && kind_docs RoleBinding "$1" | grep -q "kind: ServiceAccount"' _ "$out/default.yaml"
check "the chart renders as a subchart (global values accepted)" \
    bash -c '"$1" template ops "$2" --set global.foo=bar >/dev/null' _ "$helm" "$CHART"
check "chart CRD equals crds/mcpserver.yaml" cmp "$CHART/crds/mcpserver.yaml" "$REPO/crds/mcpserver.yaml"

operator="${SWITCHBOARD_OPERATOR_BIN:-}"
if [[ -z "$operator" ]]; then
    cargo build --quiet -p switchboard-operator --bin switchboard-operator
    operator="$REPO/target/debug/switchboard-operator"
fi
check "switchboard-operator crd equals crds/mcpserver.yaml" \
    bash -c 'diff <("$1" crd) "$2"' _ "$operator" "$REPO/crds/mcpserver.yaml"
check "operator renders the example McpServer" \
    bash -c '"$1" render "$2" --namespace mcp > "$3"' _ "$operator" "$CHART/examples/mcpserver.yaml" "$out/children.yaml"
check "kubernetes-validate --strict $K8S_VERSION (operator children)" validate "$out/children.yaml"
check "operator renders an McpServer with every field set" \
    bash -c '"$1" render "$2" > "$3"' _ "$operator" "$CHART/ci/mcpserver-all-fields.yaml" "$out/children-all.yaml"
check "kubernetes-validate --strict $K8S_VERSION (children of every field)" validate "$out/children-all.yaml"

echo "chart-check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
