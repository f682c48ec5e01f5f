#!/usr/bin/env bash
# The 5-Spot benchmark with its one-family figures taken from the binary users of that family
# alone would run: the image's `dist` profile (LTO, one codegen unit) built with only the
# `fivespot` feature, so without libvirt. The 1000-window opening runs against this build's
# manager, as `cargo bench --bench fivespot` alone does.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --profile dist --locked --bin caplv-manager --no-default-features --features fivespot
FIVESPOT_MANAGER="$PWD/target/dist/caplv-manager" cargo bench --bench fivespot
