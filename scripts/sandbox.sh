#!/usr/bin/env bash
# Build caplv-manager and start the sandbox: an in-memory API server with the CRDs, a Cluster API
# simulator and every controller. Extra arguments go to `caplv-manager sandbox`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
cargo build --quiet --bin caplv-manager
exec ./target/debug/caplv-manager sandbox "$@"
