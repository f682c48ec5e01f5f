#!/usr/bin/env bash
# The genuine control plane for caplv's tests, on 127.0.0.1 only: etcd, kube-apiserver (Node and
# RBAC authorizers, default admission plugins plus NodeRestriction), kube-controller-manager
# (garbage collector, namespaces, CSR signing and cleaning, service-account tokens, RBAC
# aggregation, disruption budgets), Cluster API core with its own CRDs, conversion and
# admission webhooks, and Cluster API's in-cluster IPAM provider the same way. Every component is
# built from its Go module (testbed/*/go.mod pins the versions) and cached under ~/.cache/caplv/.
#
#   scripts/control-plane.sh build           build and cache every component (both CAPI releases)
#   scripts/control-plane.sh up DIR          start everything; writes DIR/admin.kubeconfig, DIR/env
#   scripts/control-plane.sh down DIR        stop what `up DIR` started, by PID, and delete DIR
#   scripts/control-plane.sh restart DIR NAME  SIGKILL one component (etcd, kube-apiserver, ...), start it again
#
# The API server writes an audit log (DIR/audit.log: user, verb, resource and response code of
# every request). CAPLV_CAPI_VERSION=v1beta1 (Cluster API v1.10, as OpenShift 4.20 ships; the
# default) or v1beta2 (the newest Cluster API release) chooses the core; the IPAM provider (built
# against v1.10, speaking ipam v1beta1, which both cores serve) is the same for both. The webhook
# servers of Cluster API and the IPAM provider have no listen-address flag and bind their ports on
# all addresses; only the loopback URLs of the webhook configurations point at them. Ports:
# CAPLV_CP_PORT_BASE (default 26000) + 443 API, +379/+380 etcd, +257 kube-controller-manager,
# +1443 CAPI webhooks, +1440 CAPI health, +1444 CAPI diagnostics, +1543 IPAM webhooks, +1540 IPAM
# health, +1544 IPAM metrics; all below the kernel's ephemeral range (32768 and up), so no client
# socket can take one between the check and the bind.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${CAPLV_CP_CACHE:-$HOME/.cache/caplv}"
python=/usr/bin/python3

die() {
  echo "control-plane: $*" >&2
  exit 1
}

module_version() { (cd "$root/testbed/$1" && go list -m -f '{{.Version}}' "$2"); }

# build_tool MODULE_DIR OUT LDFLAGS PACKAGE... : one `go build -o OUT` (a directory ending in /,
# or one binary's path in a directory), marked complete only once it succeeded, so an interrupted
# build is never mistaken for a cached one.
build_tool() {
  local dir=$1 target=$2 ldflags=$3
  shift 3
  local out=${target%/*}
  [ -f "$out/.complete" ] && return 0
  echo "control-plane: building $(basename "$out") (cached afterwards in $out)" >&2
  mkdir -p "$out"
  local start=$SECONDS
  (cd "$root/testbed/$dir" && flock "${CAPLV_BUILD_LOCK:-/tmp/caplv-build.lock}" \
    go build -trimpath -ldflags "-s -w $ldflags" -o "$target" "$@") ||
    die "building $(basename "$out") failed"
  touch "$out/.complete"
  echo "control-plane: built $(basename "$out") in $((SECONDS - start)) s" >&2
}

kube_dir() { echo "$cache/kubernetes-$(module_version kube k8s.io/kubernetes)"; }
etcd_dir() { echo "$cache/etcd-$(module_version etcd go.etcd.io/etcd/server/v3)"; }
capi_module() { echo "capi-$1"; }
capi_dir() { echo "$cache/cluster-api-$(module_version "$(capi_module "$1")" sigs.k8s.io/cluster-api)"; }
ipam_module=sigs.k8s.io/cluster-api-ipam-provider-in-cluster
ipam_version() { module_version ipam-in-cluster $ipam_module; }
ipam_dir() { echo "$cache/ipam-in-cluster-$(ipam_version)"; }

build_kube() {
  local v
  v=$(module_version kube k8s.io/kubernetes)
  local minor=${v#v1.}
  minor=${minor%%.*}
  local x="-X k8s.io/component-base/version"
  build_tool kube "$(kube_dir)/" \
    "$x.gitVersion=$v $x.gitMajor=1 $x.gitMinor=$minor $x.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$v" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  build_tool etcd "$(etcd_dir)/etcd" "" go.etcd.io/etcd/server/v3
}

build_capi() {
  local contract=$1 pkg=sigs.k8s.io/cluster-api
  [ "$contract" = v1beta2 ] && pkg=sigs.k8s.io/cluster-api/core
  local v
  v=$(module_version "$(capi_module "$contract")" sigs.k8s.io/cluster-api)
  build_tool "$(capi_module "$contract")" "$(capi_dir "$contract")/manager" \
    "-X sigs.k8s.io/cluster-api/version.gitVersion=$v" "$pkg"
}

# The provider's main.go logs client-go's version as its own (and client-go puts it in the
# user agent): make that the release.
build_ipam() {
  build_tool ipam-in-cluster "$(ipam_dir)/manager" \
    "-X k8s.io/client-go/pkg/version.gitVersion=$(ipam_version)" $ipam_module
}

# The module's config/ tree (CRDs, webhooks, RBAC): v1.10 keeps it at the root, later releases
# under core/.
capi_config() {
  local mod
  mod=$(cd "$root/testbed/$(capi_module "$1")" && go mod download sigs.k8s.io/cluster-api &&
    go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  [ -d "$mod/core/config" ] && echo "$mod/core/config" || echo "$mod/config"
}

ipam_config() {
  local mod
  mod=$(cd "$root/testbed/ipam-in-cluster" && go mod download $ipam_module && go list -m -f '{{.Dir}}' $ipam_module)
  echo "$mod/config"
}

check_prerequisites() {
  local tool
  for tool in go openssl curl flock ss; do
    command -v "$tool" >/dev/null 2>&1 || die "missing prerequisite: $tool"
  done
  [ -x "$python" ] && "$python" -c 'import yaml' 2>/dev/null ||
    die "missing prerequisite: $python with PyYAML (apt-get install python3-yaml)"
}

cmd_build() {
  check_prerequisites
  build_etcd
  build_kube
  build_capi v1beta1
  build_capi v1beta2
  build_ipam
}

# --- PKI ----------------------------------------------------------------------------------

# cert NAME CA SUBJECT [SANS]: an ECDSA key and a certificate for it signed by CA.
cert() {
  local name=$1 ca=$2 subject=$3 sans=${4:-}
  local ext="$pki/$name.ext"
  if [ -n "$sans" ]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >"$ext"
  fi
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
    -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
    -days 30 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}

ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$2" \
    -days 30 -keyout "$pki/$1.key" -out "$pki/$1.crt" 2>/dev/null
}

make_pki() {
  mkdir -p "$pki"
  ca ca caplv-testbed-ca
  ca webhook-ca caplv-testbed-webhook-ca
  cert apiserver ca /CN=kube-apiserver \
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1"
  cert admin ca "/O=system:masters/CN=caplv-testbed-admin"
  cert kcm ca /CN=system:kube-controller-manager
  cert capi ca /CN=capi-manager
  cert ipam ca /CN=capi-ipam-in-cluster-manager
  cert webhook webhook-ca /CN=capi-webhook "IP:127.0.0.1"
  cert ipam-webhook webhook-ca /CN=capi-ipam-in-cluster-webhook "IP:127.0.0.1"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
  mkdir -p "$dir/capi-webhook" "$dir/ipam-webhook"
  cp "$pki/webhook.crt" "$dir/capi-webhook/tls.crt"
  cp "$pki/webhook.key" "$dir/capi-webhook/tls.key"
  cp "$pki/ipam-webhook.crt" "$dir/ipam-webhook/tls.crt"
  cp "$pki/ipam-webhook.key" "$dir/ipam-webhook/tls.key"
}

# kubeconfig NAME CERT: a kubeconfig for the API server as the holder of CERT.
kubeconfig() {
  cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: caplv-testbed
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: $1
  context: {cluster: caplv-testbed, user: $1, namespace: default}
current-context: $1
EOF
}

# --- processes ------------------------------------------------------------------------------

# start NAME COMMAND...: run in its own session, log to DIR/logs/NAME.log, remember the PID.
start() {
  local name=$1
  shift
  mkdir -p "$dir/cmds"
  printf '%s\n' "$@" >"$dir/cmds/$name"
  setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
}

# restart DIR NAME: kill one component with SIGKILL, as a crash would, and start it again with
# the command line it was started with (its log goes on); for the tests that restart the API
# server or etcd under the manager. Returns once the new process listens; a process that exits
# first is reported with the end of its log and started again, at most three times.
cmd_restart() {
  dir=${1:?usage: control-plane.sh restart DIR NAME}
  local name=${2:?usage: control-plane.sh restart DIR NAME} pid attempt
  [ -e "$dir/cmds/$name" ] || die "$dir runs no component named '$name'"
  pid=$(cat "$dir/pids/$name")
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 15))
  while alive "$pid"; do
    [ $SECONDS -lt $deadline ] || die "$name (pid $pid) survived SIGKILL for 15 s"
    sleep 0.1
  done
  local -a cmd
  mapfile -t cmd <"$dir/cmds/$name"
  for attempt in 1 2 3; do
    setsid "${cmd[@]}" >>"$dir/logs/$name.log" 2>&1 </dev/null &
    pid=$!
    echo $pid >"$dir/pids/$name"
    listening "$pid" 120 && return 0
    echo "control-plane: $name (pid $pid) did not come back (attempt $attempt); its log ends:" >&2
    tail -n 20 "$dir/logs/$name.log" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
  done
  die "$name did not start again after three attempts (log: $dir/logs/$name.log)"
}

# listening PID SECONDS: wait until process PID listens on a TCP port; fail if it exits first
# or the deadline passes.
listening() {
  local deadline=$((SECONDS + $2))
  until ss -Htlnp | grep -q "pid=$1,"; do
    alive "$1" && [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# alive PID: the process exists and has not exited. A component killed after its starter exited
# is reparented, and where nothing reaps it, it lingers as a zombie that `kill -0` still finds.
# A multithreaded process's leader shows as a zombie while its other threads are still exiting,
# and those hold its files (listening sockets among them) until the last one is gone.
alive() {
  local stat tasks
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ] && return 0
  tasks=("/proc/$1/task/"*)
  [ ${#tasks[@]} -gt 1 ]
}

# stop_all DIR: SIGTERM every component, SIGKILL what is left after 15 s, and return only once
# all have exited, so that the next control plane finds its ports free.
stop_all() {
  local pidfile pid
  [ -d "$1/pids" ] || return 0
  for pidfile in "$1"/pids/*; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  local deadline=$((SECONDS + 15))
  for pidfile in "$1"/pids/*; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
  deadline=$((SECONDS + 15))
  for pidfile in "$1"/pids/*; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    while alive "$pid"; do
      [ $SECONDS -lt $deadline ] || die "$(basename "$pidfile") (pid $pid) survived SIGKILL for 15 s"
      sleep 0.1
    done
    rm -f "$pidfile"
  done
}

# wait_ready NAME SECONDS COMMAND...: poll COMMAND until it succeeds; fail naming NAME if the
# deadline passes or its process exits first.
wait_ready() {
  local name=$1 limit=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ -f "$dir/pids/$name" ] && ! alive "$(cat "$dir/pids/$name")"; then
      fail "$name exited before it became ready; last log line: $(tail -n 1 "$dir/logs/$name.log")"
    fi
    [ $SECONDS -lt $deadline ] || fail "$name did not become ready within ${limit} s (log: $dir/logs/$name.log)"
    sleep 0.2
  done
}

fail() {
  echo "control-plane: $*" >&2
  stop_all "$dir"
  exit 1
}

# port_free PORT NAME: wait up to 15 s for PORT to have no listener (a control plane going down
# in another process may still hold it), then fail naming the holder as ss sees it.
port_free() {
  local deadline=$((SECONDS + 15)) holder
  while [ -n "$(ss -Htln "sport = :$1")" ]; do
    if [ $SECONDS -ge $deadline ]; then
      holder=$(ss -Htlnp "sport = :$1" | sed -n 's/.*users:((\(.*\)))$/\1/p' | head -n1)
      die "port $1 ($2) is already in use, held by ${holder:-a process of another user}"
    fi
    sleep 0.2
  done
}

api_get() {
  curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$api_port$1"
}

kubectl_admin() { "$kube/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }

# provider_manifests NAME CONFIG WEBHOOK_PORT USER PREFIX: prepare a provider's RBAC (bound to
# USER), CRDs and webhook configurations from its module's config/ into DIR/NAME-manifests/ (names
# prefixed with PREFIX, as its kustomization would), apply the RBAC and the CRDs and wait until
# they are established. The webhook configurations wait until the provider serves them.
provider_manifests() {
  local name=$1 config=$2 port=$3 user=$4 prefix=$5 part
  local out="$dir/$name-manifests"
  mkdir -p "$out"
  for part in rbac crds webhooks; do
    "$python" "$root/testbed/capi_manifests.py" "$config" "$port" "$pki/webhook-ca.crt" "$user" "$prefix" "$part" \
      >"$out/$part.yaml" || fail "cannot prepare $name $part from $config"
  done
  kubectl_admin apply --server-side -f "$out/rbac.yaml" >/dev/null || fail "cannot apply $name RBAC"
  kubectl_admin apply --server-side -f "$out/crds.yaml" >/dev/null || fail "cannot apply $name CRDs"
  kubectl_admin wait --for condition=established --timeout 60s -f "$out/crds.yaml" >/dev/null ||
    fail "$name CRDs were not established"
}

cmd_up() {
  dir=${1:?usage: control-plane.sh up DIR}
  local contract=${CAPLV_CAPI_VERSION:-v1beta1}
  case "$contract" in v1beta1 | v1beta2) ;; *) die "CAPLV_CAPI_VERSION must be v1beta1 or v1beta2, not '$contract'" ;; esac
  check_prerequisites
  [ -e "$dir/pids" ] && die "$dir already holds a control plane; run: control-plane.sh down $dir"
  # kubectl caches discovery per host:port for hours, and every control plane listens on the
  # same port: a cache from one Cluster API contract would make kubectl ask the next one for
  # versions it does not serve. Each control plane keeps its own.
  export KUBECACHEDIR="$dir/kube-cache"
  local base=${CAPLV_CP_PORT_BASE:-26000}
  api_port=$((base + 443))
  local etcd_port=$((base + 379)) peer_port=$((base + 380)) kcm_port=$((base + 257))
  local hook_port=$((base + 1443)) health_port=$((base + 1440)) diag_port=$((base + 1444))
  local ipam_hook_port=$((base + 1543)) ipam_health_port=$((base + 1540)) ipam_metrics_port=$((base + 1544))
  [ $((base + 1544)) -lt 32768 ] || die "CAPLV_CP_PORT_BASE=$base puts ports in the ephemeral range; use at most 31000"
  port_free $api_port kube-apiserver
  port_free $etcd_port etcd
  port_free $peer_port "etcd peer"
  port_free $kcm_port kube-controller-manager
  port_free $hook_port "cluster-api webhooks"
  port_free $health_port "cluster-api health"
  port_free $diag_port "cluster-api diagnostics"
  port_free $ipam_hook_port "ipam-in-cluster webhooks"
  port_free $ipam_health_port "ipam-in-cluster health"
  port_free $ipam_metrics_port "ipam-in-cluster metrics"

  build_etcd
  build_kube
  build_capi "$contract"
  build_ipam
  local began=$SECONDS
  kube=$(kube_dir)
  local etcd capi config ipam ipam_cfg
  etcd=$(etcd_dir)/etcd
  capi=$(capi_dir "$contract")/manager
  config=$(capi_config "$contract")
  ipam=$(ipam_dir)/manager
  ipam_cfg=$(ipam_config)

  mkdir -p "$dir/logs" "$dir/pids" "$dir/etcd"
  dir=$(cd "$dir" && pwd)
  pki="$dir/pki"
  trap 'fail "interrupted"' INT TERM
  make_pki
  kubeconfig admin admin
  kubeconfig kcm kcm
  kubeconfig capi capi
  kubeconfig ipam ipam

  start etcd "$etcd" --name caplv-testbed --data-dir "$dir/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "caplv-testbed=http://127.0.0.1:$peer_port" --listen-metrics-urls ""
  wait_ready etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

  # Every request's user and response code, so tests can prove nobody was refused (403).
  printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n' \
    >"$dir/audit-policy.yaml"
  start kube-apiserver "$kube/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --profiling=false
  wait_ready kube-apiserver 60 api_get /readyz

  start kube-controller-manager "$kube/kube-controller-manager" \
    --kubeconfig "$dir/kcm.kubeconfig" \
    --authentication-kubeconfig "$dir/kcm.kubeconfig" --authorization-kubeconfig "$dir/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --leader-elect=false --use-service-account-credentials \
    --controllers garbage-collector-controller,namespace-controller,certificatesigningrequest-signing-controller,certificatesigningrequest-cleaner-controller,serviceaccount-token-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,disruption-controller \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --profiling=false
  wait_ready kube-controller-manager 60 curl -sfk "https://127.0.0.1:$kcm_port/healthz"

  # Cluster API core: its RBAC bound to the identity it runs as, its CRDs (conversion served by
  # the manager itself), then the manager, then the admission webhooks it serves.
  kubectl_admin create namespace capi-system >/dev/null || fail "cannot create namespace capi-system"
  provider_manifests cluster-api "$config" "$hook_port" capi-manager capi-
  POD_NAMESPACE=capi-system KUBECONFIG="$dir/capi.kubeconfig" start cluster-api "$capi" \
    --kubeconfig "$dir/capi.kubeconfig" --leader-elect=false \
    --webhook-port "$hook_port" --webhook-cert-dir "$dir/capi-webhook" \
    --health-addr "127.0.0.1:$health_port" \
    --diagnostics-address "127.0.0.1:$diag_port" --insecure-diagnostics=true \
    --sync-period 10m
  wait_ready cluster-api 120 curl -sf "http://127.0.0.1:$health_port/readyz"
  kubectl_admin apply --server-side -f "$dir/cluster-api-manifests/webhooks.yaml" >/dev/null || fail "cannot apply Cluster API webhooks"

  # The in-cluster IPAM provider, the same way, once core (whose CRDs hold IPAddressClaim and
  # IPAddress) is up. Its readyz is a bare ping, so its webhook server is waited for too: a TLS
  # handshake against the webhook CA and any HTTP answer.
  provider_manifests ipam-in-cluster "$ipam_cfg" "$ipam_hook_port" capi-ipam-in-cluster-manager capi-ipam-in-cluster-
  start ipam-in-cluster "$ipam" \
    --kubeconfig "$dir/ipam.kubeconfig" --leader-elect=false \
    --webhook-port "$ipam_hook_port" --webhook-cert-dir "$dir/ipam-webhook" \
    --health-probe-bind-address "127.0.0.1:$ipam_health_port" \
    --metrics-bind-address "127.0.0.1:$ipam_metrics_port"
  wait_ready ipam-in-cluster 60 curl -sf "http://127.0.0.1:$ipam_health_port/readyz"
  wait_ready ipam-in-cluster 30 curl -s -o /dev/null --cacert "$pki/webhook-ca.crt" "https://127.0.0.1:$ipam_hook_port/"
  kubectl_admin apply --server-side -f "$dir/ipam-in-cluster-manifests/webhooks.yaml" >/dev/null ||
    fail "cannot apply ipam-in-cluster webhooks"

  local release
  release=$(module_version "$(capi_module "$contract")" sigs.k8s.io/cluster-api)
  cat >"$dir/env" <<EOF
KUBECONFIG=$dir/admin.kubeconfig
CAPLV_CP_DIR=$dir
CAPLV_CP_API_PORT=$api_port
CAPLV_CP_API_URL=https://127.0.0.1:$api_port
CAPLV_CP_CA_FILE=$pki/ca.crt
CAPLV_CP_AUDIT_LOG=$dir/audit.log
CAPLV_CP_KUBECTL=$kube/kubectl
KUBECACHEDIR=$KUBECACHEDIR
CAPLV_CP_KUBERNETES_VERSION=$(module_version kube k8s.io/kubernetes)
CAPLV_CAPI_VERSION=$contract
CAPLV_CAPI_RELEASE=$release
CAPLV_CP_IPAM_RELEASE=$(ipam_version)
EOF
  trap - INT TERM
  echo "control-plane: up in $((SECONDS - began)) s: Kubernetes $(module_version kube k8s.io/kubernetes), Cluster API $release ($contract), in-cluster IPAM $(ipam_version) at https://127.0.0.1:$api_port; env in $dir/env" >&2
}

cmd_down() {
  local d=${1:?usage: control-plane.sh down DIR}
  [ -d "$d" ] || return 0
  stop_all "$d"
  rm -rf "$d"
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up "${2:-}" ;;
down) cmd_down "${2:-}" ;;
restart) cmd_restart "${2:-}" "${3:-}" ;;
*) die "usage: control-plane.sh build | up DIR | down DIR | restart DIR NAME" ;;
esac
