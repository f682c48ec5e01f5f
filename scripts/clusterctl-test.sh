#!/usr/bin/env bash
# clusterctl against genuine control planes (scripts/control-plane.sh): `clusterctl init` installs
# caplv's generated provider files (manifests/clusterctl/) from a local repository, and
# `clusterctl move` carries a provisioned Cluster to a second control plane
# (tests/manager/clusterctl_move.rs). clusterctl is built from the cluster-api module the v1beta1
# control plane runs (testbed/clusterctl pins the same release) and cached under ~/.cache/caplv/.
#
#   scripts/clusterctl-test.sh build       build and cache clusterctl and cert-manager's controller
#   scripts/clusterctl-test.sh init DIR    cert-manager, then `clusterctl init`, on control plane DIR
#   scripts/clusterctl-test.sh             the end-to-end test: two control planes, init, move
#
# clusterctl init insists on cert-manager: it creates a self-signed Issuer and a Certificate and
# proceeds once the API accepts them. cert-manager's controller is built from its module (see
# testbed/cert-manager/main.go) and runs as a process of control plane DIR (DIR/pids), so
# `control-plane.sh down DIR` stops it; its CRDs are the module's deploy/crds.
#
# Ports: the two control planes use CAPLV_CP_PORT_BASE (default 26000) and
# CAPLV_CP_TARGET_PORT_BASE (default 28000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${CAPLV_CP_CACHE:-$HOME/.cache/caplv}"
lock=${CAPLV_BUILD_LOCK:-/tmp/caplv-build.lock}

die() {
  echo "clusterctl-test: $*" >&2
  exit 1
}

module_version() { (cd "$root/testbed/$1" && go list -m -f '{{.Version}}' "$2"); }
module_dir() { (cd "$root/testbed/$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2"); }

capi_release() { module_version capi-v1beta1 sigs.k8s.io/cluster-api; }
clusterctl_bin() { echo "$cache/clusterctl-$(capi_release)/clusterctl"; }
cert_manager_release() { module_version cert-manager github.com/cert-manager/cert-manager; }
cert_manager_bin() { echo "$cache/cert-manager-$(cert_manager_release)/controller"; }
caplv_version() { sed -n 's/^version = "\(.*\)"/v\1/p' "$root/Cargo.toml" | head -n 1; }

# build_once BIN MODULE_DIR LDFLAGS PACKAGE: go build PACKAGE into BIN unless already complete.
build_once() {
  local bin=$1 dir=$2 ldflags=$3 pkg=$4
  [ -f "$(dirname "$bin")/.complete" ] && return 0
  mkdir -p "$(dirname "$bin")"
  echo "clusterctl-test: building $bin" >&2
  (cd "$root/testbed/$dir" && flock -o "$lock" go build -trimpath -ldflags "-s -w $ldflags" -o "$bin" "$pkg") ||
    die "building $bin failed"
  touch "$(dirname "$bin")/.complete"
}

cmd_build() {
  local v
  v=$(capi_release)
  # clusterctl must be the release of the core it manages.
  [ "$(module_version clusterctl sigs.k8s.io/cluster-api)" = "$v" ] ||
    die "testbed/clusterctl pins a cluster-api release other than testbed/capi-v1beta1's ($v)"
  local x=sigs.k8s.io/cluster-api/version minor=${v#v1.}
  build_once "$(clusterctl_bin)" clusterctl \
    "-X $x.gitVersion=$v -X $x.gitMajor=1 -X $x.gitMinor=${minor%%.*}" sigs.k8s.io/cluster-api/cmd/clusterctl
  build_once "$(cert_manager_bin)" cert-manager "" .
}

# wait_for WHAT SECONDS COMMAND...: poll COMMAND until it succeeds, or fail naming WHAT.
wait_for() {
  local what=$1 deadline=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what did not happen within $2 s"
    sleep 0.5
  done
}

certificate_ready() {
  [ "$(kubectl -n caplv-cert-check get certificate check \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# cert-manager's CRDs and controller on control plane DIR, proven by a self-signed Certificate
# it issues (not by anything written on its behalf).
start_cert_manager() {
  local crds
  crds="$(module_dir cert-manager github.com/cert-manager/cert-manager)/deploy/crds"
  kubectl apply --server-side -f "$crds" >/dev/null
  kubectl wait --for condition=established --timeout 60s -f "$crds" >/dev/null
  kubectl create namespace cert-manager >/dev/null
  setsid "$(cert_manager_bin)" --kubeconfig "$dir/admin.kubeconfig" >"$dir/logs/cert-manager.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/cert-manager"
  kubectl create namespace caplv-cert-check >/dev/null
  kubectl apply -f - >/dev/null <<'YAML'
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: check, namespace: caplv-cert-check}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: check, namespace: caplv-cert-check}
spec: {secretName: check-tls, dnsNames: [check.example], issuerRef: {name: check}}
YAML
  wait_for "cert-manager issuing a self-signed Certificate (log: $dir/logs/cert-manager.log)" 60 certificate_ready
  kubectl delete namespace caplv-cert-check --wait=false >/dev/null
}

# The local repository clusterctl reads ({provider-label}/{version}/ with the components and
# metadata.yaml) and its config file naming it. Core runs as a process already: its components
# are what control-plane.sh applied from the module's config/ (CRDs, webhooks, RBAC), with the
# namespace it runs for, so clusterctl records it in its inventory and changes nothing.
write_repository() {
  local repo=$dir/clusterctl/repository capi caplv
  capi=$(capi_release)
  caplv=$(caplv_version)
  mkdir -p "$repo/cluster-api/$capi" "$repo/infrastructure-libvirt/$caplv" "$repo/bootstrap-ignition/$caplv"
  cp "$(module_dir capi-v1beta1 sigs.k8s.io/cluster-api)/metadata.yaml" "$repo/cluster-api/$capi/"
  {
    printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: capi-system}\n'
    for part in crds webhooks rbac; do
      printf -- '---\n'
      cat "$dir/cluster-api-manifests/$part.yaml"
    done
  } >"$repo/cluster-api/$capi/core-components.yaml"
  cp "$root/manifests/clusterctl/metadata.yaml" "$root/manifests/clusterctl/infrastructure-components.yaml" \
    "$repo/infrastructure-libvirt/$caplv/"
  cp "$root/manifests/clusterctl/metadata.yaml" "$root/manifests/clusterctl/bootstrap-components.yaml" \
    "$repo/bootstrap-ignition/$caplv/"
  cat >"$dir/clusterctl/clusterctl.yaml" <<YAML
providers:
- {name: cluster-api, type: CoreProvider, url: "$repo/cluster-api/$capi/core-components.yaml"}
- {name: libvirt, type: InfrastructureProvider, url: "$repo/infrastructure-libvirt/$caplv/infrastructure-components.yaml"}
- {name: ignition, type: BootstrapProvider, url: "$repo/bootstrap-ignition/$caplv/bootstrap-components.yaml"}
YAML
}

provider_installed() {
  [ "$(kubectl -n "$1" get providers.clusterctl.cluster.x-k8s.io "$2" -o jsonpath='{.version}')" = "$3" ]
}

cmd_init() {
  dir=${1:?usage: clusterctl-test.sh init DIR}
  [ -f "$dir/env" ] || die "$dir holds no control plane (scripts/control-plane.sh up $dir)"
  dir=$(cd "$dir" && pwd)
  set -a
  # shellcheck source=/dev/null
  . "$dir/env"
  set +a
  [ "$CAPLV_CAPI_VERSION" = v1beta1 ] || die "clusterctl $(capi_release) manages the v1beta1 control plane only"
  cmd_build
  start_cert_manager
  write_repository
  local caplv
  caplv=$(caplv_version)
  # `--control-plane -`: caplv's SelfManagedControlPlane ships with the infrastructure provider;
  # without it clusterctl would add the kubeadm control-plane provider (from GitHub).
  clusterctl --config "$dir/clusterctl/clusterctl.yaml" init --kubeconfig "$KUBECONFIG" \
    --core "cluster-api:$(capi_release)" --infrastructure "libvirt:$caplv" --bootstrap "ignition:$caplv" \
    --control-plane - >"$dir/logs/clusterctl-init.log" 2>&1 ||
    die "clusterctl init failed: $(tail -n 5 "$dir/logs/clusterctl-init.log")"
  provider_installed capi-system cluster-api "$(capi_release)" || die "core is not in clusterctl's inventory"
  provider_installed caplv-system infrastructure-libvirt "$caplv" || die "libvirt is not in clusterctl's inventory"
  provider_installed caplv-ignition-system bootstrap-ignition "$caplv" || die "ignition is not in clusterctl's inventory"
  echo "clusterctl-test: clusterctl init installed cluster-api $(capi_release), libvirt and ignition $caplv on $CAPLV_CP_API_URL" >&2
}

kubectl() { "$CAPLV_CP_KUBECTL" "$@"; }

# clusterctl with its state (version check, overrides) kept out of the user's home.
clusterctl() {
  XDG_CONFIG_HOME="$dir/clusterctl/xdg" CLUSTERCTL_DISABLE_VERSIONCHECK=true "$(clusterctl_bin)" "$@"
}

cmd_test() {
  cmd_build
  local start=$SECONDS
  local t=clusterctl_move::a_moved_cluster_keeps_its_machine_and_domain
  # Built under the lock; run without it, since the test starts the control planes' daemons.
  (cd "$root" && flock -o "$lock" cargo test --all-features --test manager --no-run)
  (cd "$root" && CAPLV_TEST_CONTROL_PLANE=real CAPLV_CLUSTERCTL="$(clusterctl_bin)" \
    cargo test --all-features --test manager -- --exact --test-threads 1 "$t")
  echo "clusterctl-test: passed in $((SECONDS - start)) s" >&2
}

case "${1:-}" in
build) cmd_build ;;
init) cmd_init "${2:-}" ;;
"") cmd_test ;;
*) die "usage: clusterctl-test.sh [build | init DIR]" ;;
esac
