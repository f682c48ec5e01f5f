#!/usr/bin/env bash
# The shipped image's manager, run in a container as the chart's pod would run, reconciles on a
# genuine control plane. Called by `scripts/test-image.sh --genuine IMAGE` with the podman
# arguments of a restricted-v2 pod, in a scripts/control-plane.sh environment (KUBECONFIG,
# CAPLV_CP_API_PORT, CAPLV_CP_CA_FILE, CAPLV_CP_AUDIT_LOG, CAPLV_CP_KUBECTL exported).
#
#   image-genuine.sh IMAGE PODMAN_RUN_ARG...
set -euo pipefail
cd "$(dirname "$0")/.."
image=$1
shift
# Kept after it exits, for its log; removed on the way out.
restricted=()
for arg in "$@"; do
  [ "$arg" = --rm ] || restricted+=("$arg")
done
: "${KUBECONFIG:?no KUBECONFIG: run in a scripts/control-plane.sh environment}"
: "${CAPLV_CP_API_PORT:?}" "${CAPLV_CP_CA_FILE:?}" "${CAPLV_CP_AUDIT_LOG:?}"
kubectl=("${CAPLV_CP_KUBECTL:-kubectl}" --kubeconfig "$KUBECONFIG")
namespace=caplv-system
account=caplv
container=caplv-image-genuine
deadline_s=120

say() { echo "image-genuine: $*" >&2; }
die() {
  say "$*"
  podman logs "$container" 2>&1 | tail -n 40 >&2 || true
  exit 1
}
work=$(mktemp -d "${TMPDIR:-/tmp}/caplv-image-genuine.XXXXXX")
cleanup() {
  podman rm -f "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

podman image exists "$image" || die "no image $image: run scripts/test-image.sh first"

# The install as a user applies it: CRDs, the ServiceAccount, its RBAC, the Deployment (which
# no kubelet runs here: the container below plays its pod).
"${kubectl[@]}" create namespace "$namespace" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
"${kubectl[@]}" apply --server-side -f manifests/install.yaml >/dev/null || die "cannot apply manifests/install.yaml"
"${kubectl[@]}" wait --for=condition=Established --timeout=60s crd --all >/dev/null

# What the kubelet would mount: a token of the pod's ServiceAccount, the cluster CA, the namespace.
sa="$work/serviceaccount"
mkdir -p "$sa"
"${kubectl[@]}" -n "$namespace" create token "$account" --duration 10m >"$sa/token"
cp "$CAPLV_CP_CA_FILE" "$sa/ca.crt"
echo "$namespace" >"$sa/namespace"
chmod 755 "$work" "$sa"
chmod 644 "$sa"/*

# The Deployment's own arguments; only the metrics port moves, as the container shares the
# host's network.
mapfile -t args < <("${kubectl[@]}" -n "$namespace" get deployment "$account" \
  -o jsonpath='{.spec.template.spec.containers[0].args}' |
  python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)))')
[ "${args[0]:-}" = run ] || die "unexpected Deployment arguments: ${args[*]}"
metrics_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
replaced=false
for i in "${!args[@]}"; do
  if [[ ${args[$i]} == --metrics-addr=* ]]; then
    args[i]="--metrics-addr=127.0.0.1:$metrics_port"
    replaced=true
  fi
done
$replaced || die "the Deployment's arguments name no --metrics-addr=: ${args[*]}"

podman rm -f "$container" >/dev/null 2>&1 || true
podman run -d --name "$container" "${restricted[@]}" --network host \
  -v "$sa:/var/run/secrets/kubernetes.io/serviceaccount:ro" \
  -e KUBERNETES_SERVICE_HOST=127.0.0.1 -e KUBERNETES_SERVICE_PORT="$CAPLV_CP_API_PORT" \
  -e POD_NAME=caplv-image-check -e POD_NAMESPACE="$namespace" \
  "$image" "${args[@]}" >/dev/null
say "manager started from $image as system:serviceaccount:$namespace:$account"

name=image-check-$RANDOM
"${kubectl[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: $name-source, namespace: default}
stringData:
  value: '{"ignition":{"version":"3.4.0"}}'
---
apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1
kind: IgnitionConfig
metadata: {name: $name, namespace: default}
spec:
  secretRef: {name: $name-source}
EOF

start=$SECONDS
until [ "$("${kubectl[@]}" -n default get ignitionconfig "$name" \
  -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}' 2>/dev/null)" = DataSecretCreated ]; do
  [ "$(podman inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" = true ] || die "the manager's container exited"
  [ $((SECONDS - start)) -lt $deadline_s ] || die "IgnitionConfig $name not Ready within $deadline_s s"
  sleep 1
done
took=$((SECONDS - start))
[ "$("${kubectl[@]}" -n default get secret "$name" -o jsonpath='{.type}')" = cluster.x-k8s.io/secret ] ||
  die "no bootstrap data Secret $name"

# Written by the chart's ServiceAccount, through the mounted token: the API server's audit log.
python3 - "$CAPLV_CP_AUDIT_LOG" "$name" "system:serviceaccount:$namespace:$account" <<'PY' ||
import json, sys
log, name, user = sys.argv[1:]
for line in open(log):
    event = json.loads(line)
    ref = event.get("objectRef", {})
    if (event.get("verb") in ("create", "patch") and ref.get("resource") == "secrets"
            and ref.get("name") == name and event.get("stage") == "ResponseComplete"
            and event.get("responseStatus", {}).get("code", 0) < 300):
        sys.exit(0 if event["user"]["username"] == user else f"written by {event['user']['username']}")
sys.exit("no write of the data Secret in the audit log")
PY
  die "the data Secret was not written by the chart's ServiceAccount"
say "IgnitionConfig $name reconciled by the image's manager in $took s"
echo "{\"image\":\"$image\",\"checks\":[\"genuine\"],\"reconciled_s\":$took}"
