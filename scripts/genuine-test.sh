#!/usr/bin/env bash
# The tests that compare caplv's stand-ins with the genuine components: memkube against
# kube-apiserver (crates/memkube/tests/differential, once) and capi-sim against Cluster API
# core (crates/capi-sim/tests/genuine_capi.rs, for each contract: v1beta1 core v1.10 and
# v1beta2 core v1.14). Each run gets its own control plane from scripts/control-plane.sh in a
# temporary directory, stopped on exit whatever happens.
#
#   scripts/genuine-test.sh            all of it
#   CAPLV_CP_PORT_BASE=31000 ...       ports of the control plane (default: control-plane.sh's)
#
# Cargo runs under the shared build lock (/tmp/caplv-build.lock, or CAPLV_BUILD_LOCK).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
control_plane=${CAPLV_CONTROL_PLANE:-$root/scripts/control-plane.sh}
lock=${CAPLV_BUILD_LOCK:-/tmp/caplv-build.lock}
[ -x "$control_plane" ] || [ -f "$control_plane" ] || { echo "genuine-test: no $control_plane" >&2; exit 1; }

dir=""
down() {
  if [ -n "$dir" ]; then
    bash "$control_plane" down "$dir" || true
    dir=""
  fi
}
trap down EXIT INT TERM

# with_control_plane CONTRACT COMMAND...: a fresh control plane with Cluster API CONTRACT,
# its env exported, COMMAND run in the repository, the control plane stopped afterwards.
with_control_plane() {
  local contract=$1
  shift
  dir=$(mktemp -d "${TMPDIR:-/tmp}/caplv-genuine.XXXXXX")
  rmdir "$dir"
  CAPLV_CAPI_VERSION=$contract bash "$control_plane" up "$dir"
  set -a
  # shellcheck disable=SC1091
  . "$dir/env"
  set +a
  (cd "$root" && "$@")
  down
}

cargo_test() { flock "$lock" cargo test "$@"; }
capi_tests() { cargo_test -p capi-sim --test genuine_capi -- --ignored --test-threads 1; }
memkube_and_capi_tests() { cargo_test -p memkube --test differential -- --ignored && capi_tests; }

start=$SECONDS
with_control_plane v1beta1 memkube_and_capi_tests
with_control_plane v1beta2 capi_tests
echo "genuine-test: passed in $((SECONDS - start)) s" >&2
