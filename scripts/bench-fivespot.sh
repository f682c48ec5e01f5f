#!/usr/bin/env bash
# The 5-Spot benchmark, run on the binaries users run: the image's `dist` profile (LTO, one
# codegen unit, stripped). The 1000-window opening runs the whole manager as the image ships it;
# the one-family figures come from a build with only the `fivespot` feature, so without libvirt,
# as users of that family alone would build it. `cargo bench --bench fivespot` alone measures
# this checkout's release build instead.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --profile dist --locked --bin caplv-manager --no-default-features --features caplv,ignition,fivespot
cp target/dist/caplv-manager target/dist/caplv-manager-all
cargo build --profile dist --locked --bin caplv-manager --no-default-features --features fivespot
cp target/dist/caplv-manager target/dist/caplv-manager-fivespot
BENCH_MANAGER="$PWD/target/dist/caplv-manager-all" \
  FIVESPOT_MANAGER="$PWD/target/dist/caplv-manager-fivespot" \
  cargo bench --bench fivespot
