#!/usr/bin/env bash
# Run every check and test of the project: formatting, lints, unit, integration and system tests.
#   scripts/test.sh           the short form (CI's)
#   scripts/test.sh --long    the long form: 10,000 ScheduledMachines at once, 300 s per fuzz target
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_args=()
case "${1:-}" in
  "") ;;
  --long) export CAPLV_LONG=1; fuzz_args=(--long) ;;
  *) echo "usage: test.sh [--long]" >&2; exit 2 ;;
esac
CAPLV_SETUP_NEEDS_GO=1 bash scripts/setup-debian.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo clippy (the shipped build: no sandbox stand-ins)"
cargo clippy -p caplv --all-targets --no-default-features --features caplv,ignition,fivespot -- -D warnings
echo "== cargo test"
cargo test --workspace --all-features
echo "== fuzz (cargo-fuzz)"
bash scripts/fuzz.sh "${fuzz_args[@]}"
echo "== Helm chart (Helm's own renderer, schema, RBAC, apply to memkube)"
bash scripts/test-helm.sh
echo "== the image: the Dockerfile built with buildah, run with podman as OpenShift's restricted-v2 runs it"
bash scripts/test-image.sh
echo "== the genuine control plane (etcd, kube-apiserver, kube-controller-manager, Cluster API core)"
bash scripts/control-plane.sh build
echo "== differential suites and the chart's install on the genuine control plane"
bash scripts/genuine-test.sh
echo "== system test (real libvirtd, QEMU, OVMF, sshd; the genuine control plane, both Cluster API contracts)"
bash scripts/system-test.sh
