#!/usr/bin/env bash
# Test the Helm chart helm/caplv: lint and render it with Helm's own renderer (helm-python-sdk,
# offline, no helm binary), check values.schema.json, and apply the rendered install to memkube
# with kubectl; check the dashboard and alerts against a running sandbox manager. Python tooling
# lives in a venv under target/helm-venv, reused between runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned, verified together (Python 3.11, Debian 12): helm-python-sdk 0.2.2 embeds Helm v4.2.3.
requirements=(helm-python-sdk==0.2.2 pytest==9.2.0 pyyaml==6.0.4)
venv=target/helm-venv

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
apt_install() {
  echo "test-helm: installing $*" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v python3 >/dev/null 2>&1 || apt_install python3
command -v kubectl >/dev/null 2>&1 || apt_install kubernetes-client

# A venv is usable when its python runs and it has pip; anything else is rebuilt.
if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; }; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 has no ensurepip without python3-venv; the failed venv is half made.
    rm -rf "$venv"
    apt_install python3-venv
    python3 -m venv "$venv"
  fi
fi

stamp="$venv/.caplv-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "${requirements[*]}" ]; then
  echo "test-helm: pip install ${requirements[*]}" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
  echo "${requirements[*]}" >"$stamp"
fi

echo "== cargo build -p memkube --bin memkube" >&2
cargo build --quiet -p memkube --bin memkube
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
export CAPLV_MEMKUBE_BIN="$target_dir/debug/memkube"
# The dashboard and alert tests scrape a sandbox manager and parse PromQL with Prometheus' own
# parser (testbed/promql), built once per source into the cache.
echo "== cargo build --bin caplv-manager" >&2
cargo build --quiet -p caplv --bin caplv-manager
export CAPLV_MANAGER_BIN="$target_dir/debug/caplv-manager"
promql_key=$(cat testbed/promql/main.go testbed/promql/go.mod testbed/promql/go.sum | sha256sum | cut -c1-12)
promql="$HOME/.cache/caplv/promql-$promql_key/promql-names"
if [ ! -x "$promql" ]; then
  echo "== go build testbed/promql (cached in ${promql%/*})" >&2
  mkdir -p "${promql%/*}"
  (cd testbed/promql && go build -trimpath -o "$promql.partial" . && mv "$promql.partial" "$promql")
fi
export CAPLV_PROMQL_NAMES=$promql

echo "== pytest tests/helm" >&2
PYTHONDONTWRITEBYTECODE=1 exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/helm "$@"
