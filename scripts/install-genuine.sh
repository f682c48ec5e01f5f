#!/usr/bin/env bash
# What an OpenShift cluster has before a caplv user arrives, on the genuine control plane that
# `scripts/control-plane.sh up DIR` started: the chart's default install (manifests/install.yaml,
# Helm's render) applied as a user applies it, and OpenShift's node-bootstrapper identity that
# kubelets file their first CSR with. Writes DIR/manager.kubeconfig (the chart's ServiceAccount)
# and DIR/bootstrap.kubeconfig (the node-bootstrapper), both with bound tokens.
#
#   scripts/install-genuine.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: install-genuine.sh DIR}
set -a
# shellcheck source=/dev/null
. "$dir/env"
set +a
kubectl() { "$CAPLV_CP_KUBECTL" "$@"; }

# kubeconfig FILE TOKEN NAMESPACE: a kubeconfig for the genuine API server with a bearer token.
kubeconfig() {
  cat >"$1" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: genuine
  cluster: {server: "$CAPLV_CP_API_URL", certificate-authority-data: $(base64 -w0 "$CAPLV_CP_CA_FILE")}
users:
- name: user
  user: {token: "$2"}
contexts:
- name: user
  context: {cluster: genuine, user: user, namespace: $3}
current-context: user
YAML
}

kubectl create namespace caplv-system >/dev/null
kubectl apply --server-side -f manifests/install.yaml >/dev/null
kubectl wait --for condition=established --timeout 60s -f manifests/crds/ >/dev/null
kubectl create namespace openshift-machine-config-operator >/dev/null
kubectl -n openshift-machine-config-operator create serviceaccount node-bootstrapper >/dev/null
kubectl create clusterrolebinding node-bootstrapper --clusterrole system:node-bootstrapper \
  --serviceaccount openshift-machine-config-operator:node-bootstrapper >/dev/null
kubeconfig "$dir/manager.kubeconfig" "$(kubectl -n caplv-system create token caplv --duration 4h)" caplv-system
kubeconfig "$dir/bootstrap.kubeconfig" \
  "$(kubectl -n openshift-machine-config-operator create token node-bootstrapper --duration 4h)" default
