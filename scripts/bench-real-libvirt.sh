#!/usr/bin/env bash
# The CAPLV benchmark including its real-libvirt part: brings up the same environment as the
# system test, runs `cargo bench --bench caplv` against it, and tears it down.
set -euo pipefail
cd "$(dirname "$0")/.."

workdir="${CAPLV_SYS_WORKDIR:-/tmp/caplv-system}"
trap 'bash scripts/libvirt-env.sh down "$workdir" >/dev/null' EXIT
bash scripts/libvirt-env.sh up "$workdir"
set -a
# shellcheck source=/dev/null
. "$workdir/env"
set +a
cargo bench --all-features --bench caplv
