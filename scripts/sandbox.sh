#!/usr/bin/env bash
# Build caplv-manager and start the sandbox: an in-memory API server with the CRDs, a Cluster API
# simulator and every controller. Extra arguments go to `caplv-manager sandbox`.
#
# With --real first, the sandbox runs on the genuine control plane instead: kube-apiserver, etcd,
# kube-controller-manager and Cluster API core (scripts/control-plane.sh; built from their Go
# modules once, cached), the chart installed as a user installs it, the manager under the
# chart's ServiceAccount, and only the kubelet emulated. CAPLV_CAPI_VERSION=v1beta2 picks the
# newest Cluster API. Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
real=0
if [ "${1:-}" = --real ]; then
  real=1
  shift
fi
cargo build --quiet --bin caplv-manager
if [ $real = 0 ]; then
  exec ./target/debug/caplv-manager sandbox "$@"
fi

cpdir=$(mktemp -d /tmp/caplv-sandbox-real.XXXXXX)
rmdir "$cpdir"
trap 'bash scripts/control-plane.sh down "$cpdir"' EXIT
bash scripts/control-plane.sh up "$cpdir"
bash scripts/install-genuine.sh "$cpdir"
./target/debug/caplv-manager sandbox --control-plane real \
  --admin-kubeconfig "$cpdir/admin.kubeconfig" \
  --manager-kubeconfig "$cpdir/manager.kubeconfig" \
  --bootstrap-kubeconfig "$cpdir/bootstrap.kubeconfig" "$@"
