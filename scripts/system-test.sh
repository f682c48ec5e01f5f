#!/usr/bin/env bash
# System test on genuine components: libvirtd + QEMU (TCG) + OVMF in a private network namespace
# and an sshd on 127.0.0.1 (scripts/libvirt-env.sh); kube-apiserver, etcd,
# kube-controller-manager and Cluster API core on 127.0.0.1 (scripts/control-plane.sh), once for
# each Cluster API contract (v1beta1: v1.10, as OpenShift 4.20 ships; v1beta2: the newest
# release). On each, scripts/install-genuine.sh applies the chart's default install, and the
# ignored system tests run with the manager as its own process under the chart's ServiceAccount. Everything is torn down on exit, unless CAPLV_SYS_KEEP=1 keeps the last
# environment for a look at what failed (then: control-plane.sh down, libvirt-env.sh down).
set -euo pipefail
cd "$(dirname "$0")/.."

workdir="${CAPLV_SYS_WORKDIR:-/tmp/caplv-system}"
cpdir="$workdir/control-plane"
contracts=${CAPLV_SYS_CONTRACTS:-v1beta1 v1beta2}
# Which system tests to run (a test-name filter), e.g. CAPLV_SYS_TESTS=system::crash.
tests=${CAPLV_SYS_TESTS:-system::}
cleanup() {
  if [ "${CAPLV_SYS_KEEP:-0}" = 1 ]; then
    echo "system-test: kept $cpdir and $workdir; remove with: scripts/control-plane.sh down $cpdir; scripts/libvirt-env.sh down $workdir" >&2
    return
  fi
  bash scripts/control-plane.sh down "$cpdir" || true
  bash scripts/libvirt-env.sh down "$workdir" >/dev/null
}
trap cleanup EXIT
bash scripts/libvirt-env.sh up "$workdir"
set -a
# shellcheck source=/dev/null
. "$workdir/env"
set +a
# The guest the seed's flow boots: a tiny UEFI image whose init prints what it finds in fw_cfg.
image=$(bash scripts/build-test-image.sh)
cp "$image" "$CAPLV_SYS_POOL_DIR/caplv-test-image.qcow2"
virsh -q -c qemu:///system pool-refresh "$CAPLV_SYS_POOL" >/dev/null
export CAPLV_SYS_TEST_IMAGE=caplv-test-image.qcow2
# The storage round trip the test driver cannot do (dir pool, qcow2 overlay, streams).
mkdir -p "$workdir/roundtrip-pool"
CAPLV_TEST_LIBVIRT_URI=qemu:///system CAPLV_TEST_POOL_DIR="$workdir/roundtrip-pool" \
  cargo test --workspace --all-features --lib real_libvirt_storage_roundtrip -- --ignored

# The previous release's manager, for the upgrade test (built once into ~/.cache/caplv/previous).
# Its build leaves it at target/debug/caplv-manager; the test build after it puts the current back.
CAPLV_SYS_PREVIOUS_MANAGER=$(bash scripts/previous-release.sh)
export CAPLV_SYS_PREVIOUS_MANAGER
cargo test --workspace --all-features --test manager --no-run
if cmp -s target/debug/caplv-manager "$CAPLV_SYS_PREVIOUS_MANAGER"; then
  echo "system-test: target/debug/caplv-manager is still the previous release's" >&2
  exit 1
fi
for contract in $contracts; do
  echo "== system tests on the genuine control plane, Cluster API $contract"
  CAPLV_CAPI_VERSION=$contract bash scripts/control-plane.sh up "$cpdir"
  set -a
  # shellcheck source=/dev/null
  . "$cpdir/env"
  set +a
  # The kubectl built with the API server, first on the PATH for the tests too.
  PATH="$(dirname "$CAPLV_CP_KUBECTL"):$PATH"
  bash scripts/install-genuine.sh "$cpdir"
  export CAPLV_SYS_MANAGER_KUBECONFIG="$cpdir/manager.kubeconfig"
  export CAPLV_SYS_BOOTSTRAP_KUBECONFIG="$cpdir/bootstrap.kubeconfig"
  cargo test --workspace --all-features --test manager "$tests" -- --ignored --test-threads=1 --nocapture
  bash scripts/control-plane.sh down "$cpdir"
done
