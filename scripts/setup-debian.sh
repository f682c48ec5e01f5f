#!/usr/bin/env bash
# Install what building and testing caplv needs on a fresh Debian 12 machine. Idempotent: it
# installs only what is missing, so it is cheap to run before every build.
set -euo pipefail

need_pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# openssh-server: the SSH transport's tests run a private sshd on 127.0.0.1.
# python3-yaml, curl, openssl, iproute2: scripts/control-plane.sh (Cluster API's manifests,
# readiness probes, the PKI, port checks).
for pkg in pkg-config libvirt-dev openssh-server python3-yaml curl openssl iproute2; do
  have_pkg "$pkg" || need_pkgs+=("$pkg")
done
command -v kubectl >/dev/null 2>&1 || need_pkgs+=(kubernetes-client)

if ((${#need_pkgs[@]})); then
  echo "setup: installing ${need_pkgs[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

command -v cargo >/dev/null 2>&1 || { echo "setup: cargo is required (install Rust with rustup)" >&2; exit 1; }
if [ "${CAPLV_SETUP_NEEDS_GO:-0}" = 1 ]; then
  command -v go >/dev/null 2>&1 || { echo "setup: go is required to build the genuine control plane (scripts/control-plane.sh)" >&2; exit 1; }
fi
