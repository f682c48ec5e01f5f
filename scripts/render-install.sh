#!/usr/bin/env bash
# Regenerate manifests/install.yaml (the chart's default render plus its CRDs) and the clusterctl
# provider files in manifests/clusterctl/ with Helm's own renderer, using the venv
# scripts/test-helm.sh prepares.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/helm-venv/bin/python ] || bash scripts/test-helm.sh -k nothing-to-run >/dev/null || true
PYTHONDONTWRITEBYTECODE=1 target/helm-venv/bin/python tests/helm/render_install.py
PYTHONDONTWRITEBYTECODE=1 target/helm-venv/bin/python tests/helm/render_clusterctl.py
