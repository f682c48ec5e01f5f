#!/usr/bin/env bash
# Run every check and test of the project: formatting, lints, unit, integration and system tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo test"
cargo test --workspace --all-features
echo "== Helm chart (Helm's own renderer, schema, RBAC, apply to memkube)"
bash scripts/test-helm.sh
echo "== system test (real libvirtd, QEMU, OVMF, sshd)"
bash scripts/system-test.sh
