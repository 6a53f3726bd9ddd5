#!/usr/bin/env bash
# Installs what capper's tests need when it is missing, so that `make test`
# works on a fresh machine: redis-server, redis-tools and promtool (package
# prometheus) from Debian's packages, and pinned Go tools into ./.bin from the
# Go module proxy.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.bin"
mkdir -p "$bin"

# Pinned tool versions. Bump deliberately; CI installs exactly these.
STATICCHECK_VERSION=v0.8.2   # honnef.co/go/tools (staticcheck 2026.x)
HELM_VERSION=v3.22.0

want_helm=0
for arg in "$@"; do
  case "$arg" in
    --helm) want_helm=1 ;;
    *) echo "ensure-deps: unknown argument $arg" >&2; exit 2 ;;
  esac
done

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "ensure-deps: need root to run: $*" >&2; return 1; fi
}

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "ensure-deps: installing redis-server and redis-tools (apt-get)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server redis-tools >/dev/null
  # The package may start a system-wide server; the tests never use it (they
  # start their own on free ports), so stop it to keep port 6379 and CPU free.
  if command -v service >/dev/null; then as_root service redis-server stop >/dev/null 2>&1 || true; fi
fi

# promtool runs the alert rules' unit tests (deploy/prometheus); Debian ships it
# in the server's package. Without recommends: prometheus-node-exporter would
# be one more daemon the tests never use.
if ! command -v promtool >/dev/null; then
  echo "ensure-deps: installing prometheus for promtool (apt-get)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # The package starts a Prometheus server; only promtool is needed.
  if command -v service >/dev/null; then as_root service prometheus stop >/dev/null 2>&1 || true; fi
fi

install_go_tool() { # name pkg@version stampfile
  local name=$1 pkg=$2
  local stamp="$bin/.$name.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$pkg" ]; then return; fi
  echo "ensure-deps: go install $pkg"
  GOBIN="$bin" go install "$pkg"
  echo "$pkg" > "$stamp"
}

install_go_tool staticcheck "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
if [ "$want_helm" = 1 ]; then
  install_go_tool helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
