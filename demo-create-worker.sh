#!/usr/bin/env bash
# Create the seed's scheduled worker: a ScheduledMachine whose window brings up a libvirt VM
# that joins the cluster as a worker Node. Every setting comes from an environment variable
# (defaults are the seed's); DRY_RUN=1 prints the manifest instead of applying it.
#
#   HOST=laptop WORKER=spot-worker-01 VCPUS=2 MEMORY_MB=8192 IP=192.168.122.100/24 \
#   GATEWAY=192.168.122.1 BASE_IMAGE=rhcos-qemu.x86_64.qcow2 ./demo-create-worker.sh
#
# Also: NAMESPACE, CLUSTER, POOL, NETWORK, DISK_SIZE, DAYS (comma list), HOURS (comma list),
# TIMEZONE, PRIORITY, IGNITION_SECRET, KUBECTL (the kubectl to use).
set -euo pipefail

: "${NAMESPACE:=default}" "${CLUSTER:=spot}" "${HOST:=laptop}" "${WORKER:=spot-worker-01}"
: "${VCPUS:=2}" "${MEMORY_MB:=8192}" "${IP:=192.168.122.100/24}" "${GATEWAY:=192.168.122.1}"
: "${BASE_IMAGE:=rhcos-qemu.x86_64.qcow2}" "${POOL:=default}" "${NETWORK:=default}" "${DISK_SIZE:=20Gi}"
: "${DAYS:=mon-fri}" "${HOURS:=9-17}" "${TIMEZONE:=America/New_York}" "${PRIORITY:=50}"
: "${IGNITION_SECRET:=worker-ignition}" "${KUBECTL:=kubectl}" "${DRY_RUN:=0}"

fail() { echo "demo-create-worker: $1" >&2; exit 2; }
check() { # check VAR REGEX WHAT
  [[ ${!1} =~ $2 ]] || fail "$1=${!1:-<empty>} is not $3"
}
dns_label='^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
check NAMESPACE "$dns_label" "a DNS-1123 label"
check CLUSTER "$dns_label" "a DNS-1123 label"
check HOST '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$' "a LibvirtHost name"
check WORKER "$dns_label" "a DNS-1123 label (it becomes the node name)"
check VCPUS '^[0-9]{1,4}$' "a whole number of vCPUs (0 = size from free capacity)"
check MEMORY_MB '^[0-9]{1,9}$' "a whole number of MiB (0 = size from free capacity)"
check IP '^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$' "an IPv4 address with prefix, e.g. 192.168.122.100/24"
check GATEWAY '^[0-9]{1,3}(\.[0-9]{1,3}){3}$' "an IPv4 address"
check BASE_IMAGE '^[A-Za-z0-9_.:-]+$' "a storage volume name"
check POOL '^[A-Za-z0-9_.:-]+$' "a storage pool name"
check NETWORK '^[A-Za-z0-9_.:-]+$' "a libvirt network name"
check DISK_SIZE '^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$' "a size such as 20Gi"
check DAYS '^[a-z,-]+$' "a day list such as mon-fri or sat,sun"
check HOURS '^[0-9,-]+$' "an hour list such as 9-17 or 22-6"
check TIMEZONE '^[A-Za-z0-9_+/-]+$' "an IANA time zone such as America/New_York"
check PRIORITY '^[0-9]{1,3}$' "a priority from 0 to 100"
((PRIORITY <= 100)) || fail "PRIORITY=$PRIORITY is not a priority from 0 to 100"
check IGNITION_SECRET "$dns_label" "a Secret name"

yaml_list() { # "a,b" -> ["a", "b"]
  local IFS=, out="" item
  for item in $1; do out+="${out:+, }\"$item\""; done
  echo "[$out]"
}

manifest=$(cat <<YAML
apiVersion: 5spot.finos.org/v1alpha1
kind: ScheduledMachine
metadata:
  name: $WORKER
  namespace: $NAMESPACE
spec:
  clusterName: $CLUSTER
  schedule:
    enabled: true
    daysOfWeek: $(yaml_list "$DAYS")
    hoursOfDay: $(yaml_list "$HOURS")
    timezone: $TIMEZONE
  infrastructureSpec:
    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
    kind: LibvirtMachine
    spec:
      hostRef:
        name: $HOST
      bootstrapFormat: ignition
      domain:
        firmware: uefi
        machine: q35
        vcpus: $VCPUS
        memoryMB: $MEMORY_MB
      rootDisk:
        baseImage: $BASE_IMAGE
        storagePool: $POOL
        size: $DISK_SIZE
      network:
        name: $NETWORK
        type: network
        addresses:
          - $IP
        gateway: $GATEWAY
  bootstrapSpec:
    apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1
    kind: IgnitionConfig
    spec:
      secretRef:
        name: $IGNITION_SECRET
  machineTemplate:
    labels:
      node-role.kubernetes.io/worker: ""
  priority: $PRIORITY
  gracefulShutdownTimeout: 5m
  nodeDrainTimeout: 5m
  killSwitch: false
YAML
)

if [ "$DRY_RUN" = 1 ]; then
  echo "$manifest"
  exit 0
fi
echo "$manifest" | "$KUBECTL" apply -f -
echo "Watch it: $KUBECTL get scheduledmachines -n $NAMESPACE -w"
