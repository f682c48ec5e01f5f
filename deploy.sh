#!/usr/bin/env bash
# Install, inspect and remove the caplv stack with Helm and kubectl.
#
#   ./deploy.sh install [helm args...]   helm upgrade --install the chart in helm/caplv
#   ./deploy.sh status                   controllers, CRDs, hosts, machines, schedules at a glance
#   ./deploy.sh teardown                 remove ScheduledMachines (gracefully), then the release
#
# Environment: NAMESPACE (caplv-system), RELEASE (caplv), KUBECTL (kubectl), HELM (helm),
# CAPLV_METRICS_URL (a reachable /metrics of the manager, e.g. through `kubectl port-forward`;
# status then shows each controller's readiness), TEARDOWN_TIMEOUT (600s).
set -euo pipefail
cd "$(dirname "$0")"

: "${NAMESPACE:=caplv-system}" "${RELEASE:=caplv}" "${KUBECTL:=kubectl}" "${HELM:=helm}"
: "${TEARDOWN_TIMEOUT:=600s}"

die() { echo "deploy.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is required (set ${2} to its path)"; }
section() { printf '\n== %s\n' "$1"; }
k() { "$KUBECTL" "$@"; }

install() {
  need "$HELM" HELM
  "$HELM" upgrade --install "$RELEASE" helm/caplv --namespace "$NAMESPACE" --create-namespace "$@"
}

controllers() {
  section "Controllers"
  local args
  if args=$(k get deployment -n "$NAMESPACE" -l "app.kubernetes.io/instance=$RELEASE" \
    -o jsonpath='{range .items[*]}{.metadata.name}: ready {.status.readyReplicas}/{.spec.replicas}; args {.spec.template.spec.containers[0].args}{"\n"}{end}' 2>/dev/null) &&
    [ -n "$args" ]; then
    echo "$args"
  else
    echo "no $RELEASE Deployment in namespace $NAMESPACE (not installed with Helm, or another namespace)"
  fi
  if [ -n "${CAPLV_METRICS_URL:-}" ]; then
    local metrics
    metrics=$(curl -fsS --max-time 5 "$CAPLV_METRICS_URL") || die "cannot read $CAPLV_METRICS_URL"
    echo "$metrics" | awk -F'[{}"]' '/^caplv_controller_ready\{/ { printf "  %-18s %s\n", $3, ($5 ~ / 1$/ ? "ready" : "not ready") }'
    echo "$metrics" | awk '/^caplv_leader / { print "  leader: " ($2 == 1 ? "yes" : "no (standby)") }'
  fi
}

crds() {
  section "CRDs"
  k get crd -o custom-columns='NAME:.metadata.name,ESTABLISHED:.status.conditions[?(@.type=="Established")].status' |
    awk 'NR == 1 || /(cluster\.x-k8s\.io|5spot\.finos\.org)$|(cluster\.x-k8s\.io|5spot\.finos\.org) /'
}

table() { # title, kind, columns
  section "$1"
  k get "$2" -A -o "custom-columns=$3" 2>&1 | sed 's/^No resources found.*/(none)/'
}

status() {
  need "$KUBECTL" KUBECTL
  controllers
  crds
  table "Hosts" libvirthosts 'NAMESPACE:.metadata.namespace,NAME:.metadata.name,READY:.status.ready,REASON:.status.conditions[?(@.type=="Reachable")].reason,VCPUS-AVAIL:.status.capacity.availableVCPUs,VCPUS-TOTAL:.status.capacity.totalVCPUs,MEM-MB-AVAIL:.status.capacity.availableMemoryMB,MEM-MB-TOTAL:.status.capacity.totalMemoryMB'
  table "Machines" machines.cluster.x-k8s.io 'NAMESPACE:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase,NODE:.status.nodeRef.name,PROVIDERID:.spec.providerID'
  table "VMs" libvirtmachines 'NAMESPACE:.metadata.namespace,NAME:.metadata.name,HOST:.spec.hostRef.name,READY:.status.conditions[?(@.type=="Ready")].reason,VM:.status.domainState,NODE:.status.nodeName'
  table "Schedules" scheduledmachines 'NAMESPACE:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase,IN-WINDOW:.status.inSchedule,NEXT-TRANSITION:.status.nextTransition,MACHINE:.status.machineRef.name'
  table "Capacities" scheduledcapacities 'NAMESPACE:.metadata.namespace,NAME:.metadata.name,TARGET:.spec.targetRef.name,REPLICAS:.status.desiredReplicas,IN-WINDOW:.status.inSchedule,APPLIED:.status.conditions[?(@.type=="ReplicasApplied")].reason,NEXT-TRANSITION:.status.nextTransition'
}

teardown() {
  need "$KUBECTL" KUBECTL
  # Graceful first: each ScheduledMachine drains its Node and removes its Machine and VM.
  k delete scheduledmachines --all -A --wait=true --timeout="$TEARDOWN_TIMEOUT"
  need "$HELM" HELM
  "$HELM" uninstall "$RELEASE" --namespace "$NAMESPACE"
  echo "CRDs are kept (Helm never deletes them); remove them with: $KUBECTL delete -f helm/caplv/crds/"
}

case "${1:-}" in
  install) shift; install "$@" ;;
  status) status ;;
  teardown) teardown ;;
  *) die "usage: $0 install [helm args...] | status | teardown" ;;
esac
