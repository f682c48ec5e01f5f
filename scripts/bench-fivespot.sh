#!/usr/bin/env bash
# The 5-Spot benchmark, run on the binaries users run: the image's `dist` profile (LTO, one
# codegen unit, stripped). The 1000-window opening runs the whole manager as the image ships it;
# the one-family figures come from a build with only the `fivespot` feature, so without libvirt,
# as users of that family alone would build it. `cargo bench --bench fivespot` alone measures
# this checkout's release build instead.
#
#   scripts/bench-fivespot.sh             on memkube with the CAPI simulator
#   scripts/bench-fivespot.sh --genuine   on the genuine control plane (scripts/control-plane.sh,
#                                         Cluster API core v1.10, the chart installed as a user
#                                         installs it; the manager runs as its ServiceAccount)
set -euo pipefail
cd "$(dirname "$0")/.."
plane=memkube
case "${1:-}" in
  "") ;;
  --genuine) plane=real ;;
  *) echo "usage: bench-fivespot.sh [--genuine]" >&2; exit 2 ;;
esac
cargo build --profile dist --locked --bin caplv-manager --no-default-features --features caplv,ignition,fivespot
cp target/dist/caplv-manager target/dist/caplv-manager-all
cargo build --profile dist --locked --bin caplv-manager --no-default-features --features fivespot
cp target/dist/caplv-manager target/dist/caplv-manager-fivespot
export BENCH_MANAGER="$PWD/target/dist/caplv-manager-all"
export FIVESPOT_MANAGER="$PWD/target/dist/caplv-manager-fivespot"
if [ "$plane" = memkube ]; then
  exec cargo bench --bench fivespot
fi
cargo bench --bench fivespot --no-run
dir=$(mktemp -d "${TMPDIR:-/tmp}/caplv-bench.XXXXXX")
rmdir "$dir"
trap 'bash scripts/control-plane.sh down "$dir" || true' EXIT INT TERM
CAPLV_CAPI_VERSION=v1beta1 bash scripts/control-plane.sh up "$dir"
bash scripts/install-genuine.sh "$dir"
set -a
# shellcheck source=/dev/null
. "$dir/env"
set +a
BENCH_CONTROL_PLANE=real cargo bench --bench fivespot
