#!/usr/bin/env bash
# The tests on the genuine components that need no libvirt: memkube against kube-apiserver
# (crates/memkube/tests/differential, once), capi-sim against Cluster API core
# (crates/capi-sim/tests/genuine_capi.rs, for each contract: v1beta1 core v1.10 and v1beta2 core
# v1.14), the chart's install judged by the real API server (tests/helm/test_apply.py), and the
# integration tests' main flows with CAPLV_TEST_CONTROL_PLANE=real, the shipped image's manager
# reconciling as the chart's ServiceAccount (scripts/test-image.sh --genuine; the image must have
# been built by scripts/test-image.sh), and clusterctl's init and move
# (scripts/clusterctl-test.sh). Each run gets its own control plane from scripts/control-plane.sh
# in a temporary directory, stopped on exit whatever happens.
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

# Helm's render of every tested values set, applied to a fresh genuine API server with the
# kubectl built beside it: its schemas, CEL rules and admission accept every object.
helm_apply() {
  PATH="$(dirname "$CAPLV_CP_KUBECTL"):$PATH" CAPLV_HELM_APPLY_KUBECONFIG="$KUBECONFIG" \
    bash scripts/test-helm.sh tests/helm/test_apply.py
}

# The integration tests' main flows on genuine components: each test starts its own control
# plane (support/genuine.rs), so they run one at a time. Only tests whose Clusters name loopback
# endpoints (or none) are here: genuine Cluster API core dials the endpoint a kubeconfig names.
main_flows=(
  libvirt_cluster::reachable_endpoint_makes_the_cluster_ready_and_capi_sees_it
  libvirt_cluster::unreachable_endpoint_reports_why_and_recovers_when_it_answers
  ignition_config::an_owner_machine_gets_the_contract_shaped_secret_which_follows_the_source
  ignition_config::a_standalone_config_produces_data_and_its_deletion_removes_it
  leader::only_the_lease_holder_runs_controllers_and_a_standby_takes_over
  scheduled_capacity::replicas_follow_the_schedule_across_both_edges
  scheduled_capacity::a_machine_set_follows_on_a_v1beta2_server_and_one_a_deployment_controls_is_refused
  host_pool::failure_domains_reach_a_v1beta1_cluster
  host_pool::failure_domains_reach_a_v1beta2_cluster
  machine_ipam::an_address_from_a_pool_reaches_the_keyfile_and_goes_back_at_deletion
)

start=$SECONDS
with_control_plane v1beta1 memkube_and_capi_tests
with_control_plane v1beta2 capi_tests
with_control_plane v1beta1 helm_apply
with_control_plane v1beta1 bash scripts/test-image.sh --genuine
(cd "$root" && CAPLV_TEST_CONTROL_PLANE=real cargo_test --workspace --all-features --test manager -- \
  --exact --test-threads 1 "${main_flows[@]}")
# clusterctl init with the generated provider files, and clusterctl move to a second control
# plane (CAPLV_CP_TARGET_PORT_BASE, default 28000).
bash "$root/scripts/clusterctl-test.sh"
echo "genuine-test: passed in $((SECONDS - start)) s" >&2
