#!/usr/bin/env bash
# A real, private libvirt hypervisor for caplv's system tests on Debian 12 (no systemd needed).
# libvirtd and QEMU (TCG) run inside the network namespace caplv-sys, so virbr0, dnsmasq and the
# guests' NICs never touch the host network. A private sshd on 127.0.0.1 lets the least-privilege
# user caplv-sys reach the libvirt socket, as the product does on a real host.
#   scripts/libvirt-env.sh up     [WORKDIR]  start everything, write WORKDIR/env (export lines)
#   scripts/libvirt-env.sh down   [WORKDIR]  stop everything, remove WORKDIR
#   scripts/libvirt-env.sh status [WORKDIR]  show what is up
#   scripts/libvirt-env.sh fault  WORKDIR F  inject host fault F (the system tests' host-fault suite):
#     cut-sessions      kill sshd's open sessions (the listener stays)
#     sshd-stop         stop sshd and its sessions; sshd-start starts it again on the same port
#     libvirtd-restart  stop libvirtd and start it again in the netns (guests keep running)
#     partition-on      drop every packet to and from sshd's port on loopback; partition-off lifts it
#     rotate-hostkey    give sshd a new host key (as a reinstall would) and print its fingerprint;
#                       restore-hostkey puts the pinned one back
#     pool-fill         fill the small pool's file system, so creating a volume there fails;
#                       pool-unfill frees it again
# WORKDIR defaults to /tmp/caplv-system. Used by scripts/system-test.sh and scripts/bench-real-libvirt.sh.
set -euo pipefail

# Namespaces, daemons, users and /etc/libvirt all need root.
[ "$(id -u)" -eq 0 ] || exec sudo -- "$0" "$@"

readonly NETNS=caplv-sys SSH_USER=caplv-sys POOL=caplv-system BASE_IMAGE=base.qcow2 NET=default
# A second pool on a tmpfs of its own, small enough to fill in a moment (the pool-fill fault).
readonly SMALL_POOL=caplv-system-small SMALL_POOL_MIB=16 FILLER=filler.raw
readonly URI=qemu:///system SOCK=/run/libvirt/libvirt-sock
readonly LIBVIRTD_PID=/run/libvirtd.pid VIRTLOGD_PID=/run/virtlogd.pid
readonly DEADLINE=60 FIRST_PORT=22220 MARKER=.caplv-libvirt-env
CMD=${1:-}
W=$(realpath -m "${2:-/tmp/caplv-system}")
readonly CMD W SSHD_PID=$W/ssh/sshd.pid SMALL_DIR=$W/small-pool

log() { echo "libvirt-env: $*" >&2; }
die() { log "error: $*"; exit 1; }
vsh() { virsh -q -c "$URI" "$@"; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# PID 1 here reaps orphans only every ~2 s, so a zombie counts as gone.
running() { ps -o stat= -p "$1" 2>/dev/null | grep -qv '^Z'; }
pid_alive() { [ -s "$1" ] && running "$(cat "$1")"; }
# True if the daemon of pidfile $1 runs inside our netns (we never touch anybody else's daemon).
ours() { pid_alive "$1" && [ "$(ip netns identify "$(cat "$1")" 2>/dev/null)" = "$NETNS" ]; }
libvirt_ready() { ours "$LIBVIRTD_PID" && [ -S "$SOCK" ]; }
port_listening() { ss -ltnH "sport = :$1" | grep -q .; }
# `virsh pool-list --name` pads names with blanks, so compare fields, not lines.
in_list() { vsh "$1" --name | awk -v n="$2" '$1 == n { f = 1 } END { exit !f }'; }
sshd_port() { awk '$1 == "Port" { print $2 }' "$W/ssh/sshd_config"; }

# Poll "$@" every 0.1 s; fail naming $1 if it is not true within $DEADLINE seconds.
wait_until() {
  local what=$1 end=$((SECONDS + DEADLINE)); shift
  until "$@"; do
    ((SECONDS < end)) || die "$what did not come up within ${DEADLINE} s"
    sleep 0.1
  done
}

install_packages() {
  local missing=() p guard=""
  # dnsmasq-base is listed because --no-install-recommends skips it and the default network needs it.
  for p in pkg-config libvirt-dev libvirt-daemon-system libvirt-clients dnsmasq-base openssh-server ovmf iptables; do
    have_pkg "$p" || missing+=("$p")
  done
  # bookworm's qemu-system 7.2 conflicts with backports' qemu-utils 10 (preinstalled here): use backports.
  for p in qemu-utils qemu-system-x86 qemu-system-common qemu-system-data seabios; do
    have_pkg "$p" || missing+=("$p/bookworm-backports")
  done
  ((${#missing[@]})) || return 0
  if ! grep -qsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list.d/*.sources; then
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
      'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
      >/etc/apt/sources.list.d/bookworm-backports.sources
  fi
  # Package scripts must never start libvirtd (in the host network namespace): block them.
  [ -e /usr/sbin/policy-rc.d ] || { guard=/usr/sbin/policy-rc.d; trap 'rm -f /usr/sbin/policy-rc.d' EXIT; }
  [ -z "$guard" ] || { printf '#!/bin/sh\nexit 101\n' >"$guard"; chmod 0755 "$guard"; }
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$guard" ] || { rm -f "$guard"; trap - EXIT; }
}

# If libvirt-qemu cannot open /dev/kvm, libvirt 9.0 re-probes QEMU on every call (72 s defines).
# Guests still use TCG (<domain type='qemu'>): nested KVM does not run guests here.
fix_kvm() { [ ! -e /dev/kvm ] || { chgrp kvm /dev/kvm && chmod 0660 /dev/kvm; }; }

# Let group libvirt use the socket without polkit (there is no dbus here).
configure_libvirtd() {
  local conf=/etc/libvirt/libvirtd.conf key val
  for key in unix_sock_group=libvirt unix_sock_rw_perms=0770 auth_unix_rw=none; do
    val=${key#*=} key=${key%%=*}
    if grep -qE "^[[:space:]]*${key}[[:space:]]*=" "$conf"; then
      sed -i -E "s|^[[:space:]]*${key}[[:space:]]*=.*|$key = \"$val\"|" "$conf"
    else
      echo "$key = \"$val\"" >>"$conf"
    fi
  done
}

prepare_workdir() {
  if [ -d "$W" ] && [ ! -e "$W/$MARKER" ] && [ -n "$(ls -A "$W")" ]; then
    die "$W exists, is not empty and was not made by this script"
  fi
  mkdir -p "$W/log" "$W/ssh" && touch "$W/$MARKER"
  chmod 0755 "$W" # libvirt-qemu must traverse it to reach the pool
  # Serial logs of test guests; libvirt-qemu writes them, group libvirt may read them.
  install -d -o libvirt-qemu -g libvirt -m 2775 "$W/consoles"
}

# Mounted before libvirtd starts: `ip netns exec` gives libvirtd a mount namespace of its own,
# which does not see mounts made after it.
mount_small_pool() {
  mkdir -p "$SMALL_DIR"
  mountpoint -q "$SMALL_DIR" || mount -t tmpfs -o "size=${SMALL_POOL_MIB}m,mode=0755" caplv-small-pool "$SMALL_DIR"
}

# virtlogd and libvirtd run in the netns; qemu and dnsmasq inherit it. Unix sockets stay reachable.
start_libvirt() {
  if pid_alive "$LIBVIRTD_PID" && ! ours "$LIBVIRTD_PID"; then
    die "libvirtd (pid $(cat "$LIBVIRTD_PID")) already runs outside netns $NETNS; stop it first"
  fi
  [ -e "/run/netns/$NETNS" ] || ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  if ! pid_alive "$VIRTLOGD_PID"; then
    LIBVIRT_LOG_OUTPUTS="3:file:$W/log/virtlogd.log" ip netns exec "$NETNS" virtlogd -d </dev/null
  fi
  if ! pid_alive "$LIBVIRTD_PID"; then
    LIBVIRT_LOG_OUTPUTS="3:file:$W/log/libvirtd.log" ip netns exec "$NETNS" libvirtd -d </dev/null
  fi
  wait_until "virtlogd ($VIRTLOGD_PID)" pid_alive "$VIRTLOGD_PID"
  wait_until "libvirtd ($SOCK, log $W/log/libvirtd.log)" libvirt_ready
  vsh version >/dev/null # the first call probes QEMU's capabilities (~10 s)
}

# setup_pool NAME DIR: a started dir pool NAME at DIR holding the blank base image.
setup_pool() {
  local name=$1 dir=$2 cur
  cur=$(vsh pool-dumpxml "$name" 2>/dev/null | sed -n 's|.*<path>\(.*\)</path>.*|\1|p') || true
  if [ -n "$cur" ] && [ "$cur" != "$dir" ]; then
    # A leftover definition from another WORKDIR: replace it unless it is in use.
    in_list pool-list "$name" && die "pool $name is active at $cur; run down for that WORKDIR"
    vsh pool-undefine "$name" >/dev/null && cur=""
  fi
  [ -n "$cur" ] || vsh pool-define-as "$name" dir --target "$dir" >/dev/null
  if ! in_list pool-list "$name"; then
    vsh pool-build "$name" >/dev/null && vsh pool-start "$name" >/dev/null
  fi
  if ! vsh vol-info --pool "$name" "$BASE_IMAGE" >/dev/null 2>&1; then
    qemu-img create -q -f qcow2 "$dir/$BASE_IMAGE" 64M # qemu-img defaults to compat=1.1
    vsh pool-refresh "$name" >/dev/null
  fi
}

# The small pool must really be the small tmpfs, as libvirtd sees it, or filling it fills a disk.
check_small_pool() {
  local bytes
  bytes=$(vsh pool-info --bytes "$SMALL_POOL" | awk '$1 == "Capacity:" { print $2 }')
  [ "${bytes:-0}" -le $((SMALL_POOL_MIB * 1024 * 1024)) ] ||
    die "pool $SMALL_POOL has ${bytes:-no} bytes, not the ${SMALL_POOL_MIB} MiB tmpfs at $SMALL_DIR"
}

setup_network() {
  vsh net-info "$NET" >/dev/null 2>&1 || vsh net-define /usr/share/libvirt/networks/default.xml >/dev/null
  in_list net-list "$NET" || vsh net-start "$NET" >/dev/null
}

# Least privilege: no password, no sudo, only group libvirt (socket access).
setup_ssh_user() {
  id "$SSH_USER" >/dev/null 2>&1 ||
    useradd --system --create-home --home-dir "/var/lib/$SSH_USER" --shell /bin/sh "$SSH_USER"
  usermod -aG libvirt "$SSH_USER"
  # useradd leaves the account locked ("!"), which sshd refuses with UsePAM no; "*" = no password.
  usermod -p '*' "$SSH_USER"
}

start_sshd() {
  local d=$W/ssh port
  [ -f "$d/hostkey" ] || ssh-keygen -q -t ed25519 -N '' -C caplv-sys-host -f "$d/hostkey"
  [ -f "$d/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C caplv-sys-client -f "$d/client_ed25519"
  cp "$d/client_ed25519.pub" "$d/authorized_keys"
  # Let the invoking user (if it came through sudo) read the client key.
  [ -z "${SUDO_USER:-}" ] || chown "$SUDO_USER" "$d/client_ed25519"
  pid_alive "$SSHD_PID" && return 0
  port=$FIRST_PORT
  while port_listening "$port"; do port=$((port + 1)); done
  # AllowTcpForwarding must keep "local": sshd gates direct-streamlocal (the libvirt socket tunnel)
  # on it too, and "no" refuses the tunnel. "remote" stays off, so no listening ports.
  cat >"$d/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $d/hostkey
PidFile $SSHD_PID
AuthorizedKeysFile $d/authorized_keys
AllowUsers $SSH_USER
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowStreamLocalForwarding yes
AllowTcpForwarding local
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
LogLevel VERBOSE
EOF
  mkdir -p /run/sshd # sshd's privilege-separation directory; nothing creates it without systemd
  /usr/sbin/sshd -f "$d/sshd_config" -E "$d/sshd.log"
  wait_until "sshd on 127.0.0.1:$port (log $d/sshd.log)" port_listening "$port"
  # Pin the host key ourselves instead of trusting whatever answers first. $d/ssh is ssh with the
  # client key and that pin (never touches ~/.ssh).
  printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$d/hostkey.pub")" >"$d/known_hosts"
  cat >"$d/ssh" <<EOF
#!/bin/sh
exec ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes \\
  -o UserKnownHostsFile=$d/known_hosts -o GlobalKnownHostsFile=/dev/null -i $d/client_ed25519 -p $port "\$@"
EOF
  chmod 0755 "$d/ssh"
}

write_env() {
  local port fp code="" vars c
  port=$(sshd_port)
  fp=$(ssh-keygen -lf "$W/ssh/hostkey.pub" | awk '{ print $2 }')
  for c in /usr/share/OVMF/OVMF_CODE_4M.fd /usr/share/OVMF/OVMF_CODE.fd; do
    [ -f "$c" ] && [ -f "${c/CODE/VARS}" ] && { code=$c; break; }
  done
  [ -n "$code" ] || die "no OVMF code/vars pair in /usr/share/OVMF"
  vars=(
    CAPLV_SYS_WORKDIR="$W" CAPLV_SYS_SSH_PORT="$port" CAPLV_SYS_SSH_USER="$SSH_USER"
    CAPLV_SYS_URI="qemu+ssh://$SSH_USER@127.0.0.1:$port/system" CAPLV_SYS_FINGERPRINT="$fp"
    CAPLV_SYS_CLIENT_KEY="$W/ssh/client_ed25519" CAPLV_SYS_KNOWN_HOSTS="$W/ssh/known_hosts"
    CAPLV_SYS_POOL="$POOL" CAPLV_SYS_POOL_DIR="$W/pool" CAPLV_SYS_BASE_IMAGE="$BASE_IMAGE"
    CAPLV_SYS_SMALL_POOL="$SMALL_POOL" CAPLV_SYS_SMALL_POOL_DIR="$SMALL_DIR"
    CAPLV_SYS_NETWORK="$NET" CAPLV_SYS_CONSOLE_DIR="$W/consoles"
    CAPLV_SYS_OVMF_CODE="$code" CAPLV_SYS_OVMF_VARS="${code/CODE/VARS}"
    CAPLV_SYS_NVRAM_DIR=/var/lib/libvirt/qemu/nvram
  )
  for c in "${vars[@]}"; do printf 'export %s=%q\n' "${c%%=*}" "${c#*=}"; done >"$W/env.tmp"
  mv "$W/env.tmp" "$W/env"
}

# libvirt RPC through an SSH-forwarded libvirt socket, as caplv does. (ssh -W cannot take a socket
# path in OpenSSH 9.2, so forward to a local socket with -L.)
tunnel_ready() { [ -S "$1" ] || ! running "$2"; }
check_tunnel() {
  local sock=$W/ssh/verify.sock pid rc=0
  rm -f "$sock"
  "$W/ssh/ssh" -N -o ExitOnForwardFailure=yes -L "$sock:$SOCK" "$SSH_USER@127.0.0.1" </dev/null &
  pid=$!
  wait_until "ssh -L $sock" tunnel_ready "$sock" "$pid"
  virsh -q -c "qemu+unix:///system?socket=$sock" list --all >/dev/null || rc=$?
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return "$rc"
}

# Prove the pieces work: the pool locally; over SSH the socket tunnel and a remote command.
verify() {
  local log=$W/ssh/sshd.log
  vsh pool-info "$POOL" >/dev/null && vsh vol-info --pool "$POOL" "$BASE_IMAGE" >/dev/null
  ssh-keyscan -T 5 -t ed25519 -p "$(sshd_port)" 127.0.0.1 2>/dev/null | grep -q ssh-ed25519 ||
    die "sshd on 127.0.0.1:$(sshd_port) does not answer (log $log)"
  check_tunnel || die "libvirt through the SSH-forwarded socket fails (log $log)"
  "$W/ssh/ssh" "$SSH_USER@127.0.0.1" virsh -q -c "$URI" list --all </dev/null >/dev/null ||
    die "$SSH_USER cannot use libvirt over ssh (log $log)"
}

up() {
  install_packages
  fix_kvm
  configure_libvirtd
  prepare_workdir
  mount_small_pool
  start_libvirt
  setup_pool "$POOL" "$W/pool"
  setup_pool "$SMALL_POOL" "$SMALL_DIR"
  check_small_pool
  setup_network
  setup_ssh_user
  start_sshd
  write_env
  verify
  echo "$W/env"
}

# TERM the given processes; KILL those still running after 10 s.
stop_pids() {
  local end=$((SECONDS + 10)) p
  kill "$@" 2>/dev/null || true
  for p in "$@"; do
    while running "$p"; do
      ((SECONDS < end)) || { kill -9 "$p" 2>/dev/null || true; break; }
      sleep 0.05
    done
  done
}
stop_pidfile() { if pid_alive "$1"; then stop_pids "$(cat "$1")"; fi; }

# Works when things are partly up or already down; never touches a libvirtd outside our netns.
down() {
  local dom pool pids=()
  if libvirt_ready; then
    vsh list --all --name | while read -r dom; do
      [ -n "$dom" ] || continue
      vsh destroy "$dom" >/dev/null 2>&1 || true
      vsh undefine --nvram "$dom" >/dev/null 2>&1 || vsh undefine "$dom" >/dev/null 2>&1 || true
    done
    for pool in "$POOL" "$SMALL_POOL"; do
      vsh pool-destroy "$pool" >/dev/null 2>&1 || true
      vsh pool-undefine "$pool" >/dev/null 2>&1 || true
    done
    vsh net-destroy "$NET" >/dev/null 2>&1 || true # stops its dnsmasq; killing libvirtd would not
  elif ! pid_alive "$LIBVIRTD_PID"; then
    # No libvirtd to ask: drop our pool definitions directly.
    rm -f "/etc/libvirt/storage/$POOL.xml" "/etc/libvirt/storage/$SMALL_POOL.xml"
  fi
  ours "$LIBVIRTD_PID" && stop_pidfile "$LIBVIRTD_PID"
  ours "$VIRTLOGD_PID" && stop_pidfile "$VIRTLOGD_PID"
  [ ! -f "$W/ssh/sshd_config" ] || partition off
  cut_sessions # its open sessions
  stop_pidfile "$SSHD_PID"
  if [ -e "/run/netns/$NETNS" ]; then
    # Leftover dnsmasq or qemu processes still live in the netns.
    mapfile -t pids < <(ip netns pids "$NETNS")
    ((${#pids[@]} == 0)) || stop_pids "${pids[@]}"
    ip netns del "$NETNS"
  fi
  ! mountpoint -q "$SMALL_DIR" 2>/dev/null || umount "$SMALL_DIR"
  if [ -e "$W/$MARKER" ]; then rm -rf "$W"; elif [ -e "$W" ]; then log "left $W alone (not ours)"; fi
}

# Host faults. The partition matches only sshd's port on loopback, tagged so it can be lifted.
readonly PARTITION_TAG=caplv-sys-partition
partition_rules() {
  local port=$1
  printf '%s\n' "INPUT -i lo -p tcp --dport $port" "OUTPUT -o lo -p tcp --sport $port"
}
partition() {
  local op=$1 rule port
  port=$(sshd_port)
  while read -r rule; do
    # shellcheck disable=SC2086 # the rule is words on purpose
    if [ "$op" = on ]; then
      iptables -C $rule -m comment --comment "$PARTITION_TAG" -j DROP 2>/dev/null ||
        iptables -I $rule -m comment --comment "$PARTITION_TAG" -j DROP
    else
      while iptables -D $rule -m comment --comment "$PARTITION_TAG" -j DROP 2>/dev/null; do :; done
    fi
  done < <(partition_rules "$port")
}
port_free() { ! port_listening "$1"; }
# Each session is a root monitor (the listener's child) and an unprivileged child running as the
# user that owns the TCP socket: killing only the monitor leaves the session working.
cut_sessions() {
  ! pid_alive "$SSHD_PID" || pkill -KILL -P "$(cat "$SSHD_PID")" || true
  pkill -KILL -u "$SSH_USER" || true
}
sshd_stop() {
  cut_sessions
  stop_pidfile "$SSHD_PID"
  wait_until "sshd's port $(sshd_port) closed" port_free "$(sshd_port)"
}
sshd_start() {
  pid_alive "$SSHD_PID" && return 0
  /usr/sbin/sshd -f "$W/ssh/sshd_config" -E "$W/ssh/sshd.log"
  wait_until "sshd on 127.0.0.1:$(sshd_port)" port_listening "$(sshd_port)"
}
libvirtd_restart() {
  ours "$LIBVIRTD_PID" || die "libvirtd does not run in netns $NETNS"
  stop_pidfile "$LIBVIRTD_PID"
  LIBVIRT_LOG_OUTPUTS="3:file:$W/log/libvirtd.log" ip netns exec "$NETNS" libvirtd -d </dev/null
  wait_until "libvirtd ($SOCK) after its restart" libvirt_ready
  vsh version >/dev/null
}
rotate_hostkey() {
  local d=$W/ssh
  [ -f "$d/hostkey.pinned" ] || { mv "$d/hostkey" "$d/hostkey.pinned" && mv "$d/hostkey.pub" "$d/hostkey.pinned.pub"; }
  rm -f "$d/hostkey" "$d/hostkey.pub"
  ssh-keygen -q -t ed25519 -N '' -C caplv-sys-rotated -f "$d/hostkey"
  sshd_stop && sshd_start
  ssh-keygen -lf "$d/hostkey.pub" | awk '{ print $2 }'
}
restore_hostkey() {
  local d=$W/ssh
  [ -f "$d/hostkey.pinned" ] || return 0
  mv "$d/hostkey.pinned" "$d/hostkey" && mv "$d/hostkey.pinned.pub" "$d/hostkey.pub"
  ! pid_alive "$SSHD_PID" || { sshd_stop && sshd_start; }
}

# Fills the small pool's tmpfs to the last byte (dd stops at ENOSPC), then lets libvirt see it.
pool_fill() {
  mountpoint -q "$SMALL_DIR" || die "$SMALL_DIR is not the small pool's tmpfs"
  dd if=/dev/zero of="$SMALL_DIR/$FILLER" bs=1M 2>/dev/null || true
  vsh pool-refresh "$SMALL_POOL" >/dev/null
}
pool_unfill() {
  rm -f "$SMALL_DIR/$FILLER"
  ! libvirt_ready || vsh pool-refresh "$SMALL_POOL" >/dev/null
}

fault() {
  [ -e "$W/$MARKER" ] || die "$W is not a libvirt-env workdir"
  case ${1:-} in
    cut-sessions) cut_sessions ;;
    sshd-stop) sshd_stop ;;
    sshd-start) sshd_start ;;
    libvirtd-restart) libvirtd_restart ;;
    partition-on) partition on ;;
    partition-off) partition off ;;
    rotate-hostkey) rotate_hostkey ;;
    restore-hostkey) restore_hostkey ;;
    pool-fill) pool_fill ;;
    pool-unfill) pool_unfill ;;
    *) die "unknown fault '${1:-}'" ;;
  esac
}

# Prints "up"/"down" for a check, e.g. `state pid_alive FILE`.
state() { if "$@" >/dev/null 2>&1; then echo up; else echo down; fi; }
active() { libvirt_ready && in_list "$@"; } # asks only our libvirtd

status() {
  printf '%-18s %s\n' "netns $NETNS" "$(state test -e "/run/netns/$NETNS")" \
    virtlogd "$(state ours "$VIRTLOGD_PID")" libvirtd "$(state ours "$LIBVIRTD_PID")" \
    "sshd" "$(state pid_alive "$SSHD_PID") $(sshd_port 2>/dev/null || true)" \
    "pool $POOL" "$(state active pool-list "$POOL")" \
    "pool $SMALL_POOL" "$(state active pool-list "$SMALL_POOL") $(state mountpoint -q "$SMALL_DIR") tmpfs" "network $NET" "$(state active net-list "$NET")" \
    "env file" "$(state test -f "$W/env") $W/env"
  ! libvirt_ready || printf '%-18s %s\n' domains "$(vsh list --all --name | grep -c . || true)"
  if pid_alive "$LIBVIRTD_PID" && ! ours "$LIBVIRTD_PID"; then log "a libvirtd outside netns $NETNS runs"; fi
}

case $CMD in
  up | down | status) "$CMD" ;;
  fault) fault "${3:-}" ;;
  *) echo "usage: $0 up|down|status [WORKDIR] | fault WORKDIR FAULT" >&2; exit 2 ;;
esac
