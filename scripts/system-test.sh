#!/usr/bin/env bash
# System test on real components: brings up libvirtd + QEMU (TCG) + OVMF in a private network
# namespace and an sshd on 127.0.0.1 (scripts/libvirt-env.sh), runs the ignored system tests
# against them with the manager as a real process, and always tears the environment down.
set -euo pipefail
cd "$(dirname "$0")/.."

workdir="${CAPLV_SYS_WORKDIR:-/tmp/caplv-system}"
trap 'bash scripts/libvirt-env.sh down "$workdir" >/dev/null' EXIT
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
# The product end to end: the kill-switch test, then the seed's own flow booting the test image.
cargo test --workspace --all-features --test manager system:: -- --ignored --test-threads=1
