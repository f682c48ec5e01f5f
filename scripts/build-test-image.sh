#!/usr/bin/env bash
# Build the tiny UEFI test disk image that caplv's system tests boot as worker VMs. It proves
# Ignition delivery: /init reads opt/com.coreos/config from QEMU fw_cfg, prints
# "CAPLV-PROBE: ..." lines on ttyS0, then idles. Like a real OS it powers off when its ACPI
# power button is pressed (a Graceful deletion, `virsh shutdown`), and never otherwise.
# Layout: 64 MiB GPT disk with one FAT ESP holding \EFI\BOOT\BOOTX64.EFI, a unified kernel
# image (systemd-stub + Debian kernel + busybox initramfs + cmdline).
#
# Usage: scripts/build-test-image.sh [OUTPUT.qcow2]
#   default OUTPUT: <repo>/target/test-image/caplv-test-image.qcow2
#   stdout: the absolute image path, nothing else; logs go to stderr.
#   cache: ${CAPLV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/caplv}/test-image/<key>/
set -euo pipefail

self="${BASH_SOURCE[0]}"
repo=$(cd "$(dirname "$self")/.." && pwd)
out=$(realpath -m "${1:-$repo/target/test-image/caplv-test-image.qcow2}")
cache_base="${CAPLV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/caplv}/test-image"
cmdline="console=ttyS0 quiet panic=0"
disk_mib=64 # caplv layers larger (>=128 MiB) qcow2 overlays on this base, so keep it small
# Debian's docker-style images disable apt's binary cache, making each apt-cache call ~1 s;
# keeping our own makes the cached path near-instant (apt revalidates it against its lists).
apt_opts=(-o "Dir::Cache::pkgcache=$cache_base/apt-pkgcache.bin" -o APT::Sandbox::User=root)
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

log() { echo "build-test-image: $*" >&2; }
exec 3>&1 1>&2 # only the final path may reach stdout; every tool's chatter goes to stderr

# Install the few host tools the build needs; a no-op when they are already there.
ensure_tools() {
  local pkg missing=()
  for pkg in dosfstools mtools fdisk binutils xz-utils qemu-utils; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

candidate() { apt-cache "${apt_opts[@]}" policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

# Print "pkg=version" for the concrete kernel behind linux-image-amd64, busybox and the stub.
# The stub is always downloaded (not taken from the host) so the image does not vary by host.
resolve_pkgs() {
  local meta kpkg pkg
  mkdir -p "$cache_base"
  meta=$(candidate linux-image-amd64)
  if [ -z "$meta" ] || [ "$meta" = "(none)" ]; then # fresh machine without apt lists
    "${sudo_cmd[@]}" apt-get update -qq >&2 # stdout here is the package list
    meta=$(candidate linux-image-amd64)
  fi
  # awk reads all input: exiting early would SIGPIPE apt-cache and trip pipefail.
  kpkg=$(apt-cache "${apt_opts[@]}" show "linux-image-amd64=$meta" |
    awk '/^Depends:/ && !k && match($0, /linux-image-[0-9][^ ,]*/) {k = substr($0, RSTART, RLENGTH)} END {print k}')
  [ -n "$kpkg" ] || { log "cannot resolve linux-image-amd64 $meta"; return 1; }
  for pkg in "$kpkg" busybox-static systemd-boot-efi; do echo "$pkg=$(candidate "$pkg")"; done
}

# Download the pinned .debs into cache dir $1 unless already there.
fetch_debs() {
  local dir=$1 spec
  for spec in "${@:2}"; do
    compgen -G "$dir/${spec%%=*}_*.deb" >/dev/null && continue
    log "downloading $spec"
    (cd "$dir" && apt-get "${apt_opts[@]}" download -q "$spec" >/dev/null)
  done
}

# Pull members matching patterns $2... out of kernel deb $1 into $work/kx. A pass over the
# 70 MB deb costs ~3 s, so extract only what is needed, never the whole package.
kernel_extract() {
  mkdir -p "$work/kx"
  dpkg-deb --fsys-tarfile "$1" | tar -x -C "$work/kx" --wildcards "${@:2}"
}

# Copy module $2 and, first, (recursively) its dependencies from kernel deb $1 into
# $3/lib/modules, appending each name to load-order.
add_module() {
  local kdeb=$1 name=$2 mods="$3/lib/modules" pat="${2//[-_]/[-_]}.ko*" ko dep
  grep -qx "$name" "$mods/load-order" 2>/dev/null && return 0
  [ -n "$(find "$work/kx" -name "$pat" 2>/dev/null)" ] || kernel_extract "$kdeb" "*/$pat"
  ko=$(find "$work/kx" -name "$pat" -print -quit)
  case $ko in # newer Debian kernels compress modules; busybox insmod wants a plain .ko
    *.xz) xz -dc "$ko" >"$work/$name.ko" ;;
    *.zst) zstd -qdc "$ko" >"$work/$name.ko" ;;
    *) cp "$ko" "$work/$name.ko" ;;
  esac
  # Same as `modinfo -F depends`, without needing kmod on the host.
  for dep in $(tr '\0' '\n' <"$work/$name.ko" | sed -n 's/^depends=//p' | tr ',' ' '); do
    add_module "$kdeb" "$dep" "$3"
  done
  mv "$work/$name.ko" "$mods/$name.ko"
  echo "$name" >>"$mods/load-order"
}

# The busybox sh PID 1 that prints what fw_cfg delivered.
write_init() {
  cat >"$1" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
dmesg -n 1   # no kernel messages between our lines
stty -onlcr  # bare LF line ends, so probe lines match exactly
say() { echo "CAPLV-PROBE: $*"; }
while read -r m; do insmod "/lib/modules/$m.ko" || say "error insmod $m"; done </lib/modules/load-order

# The ACPI power button powers off at once (nothing here needs stopping): the first event on
# its input device ends the wait.
for ev in /sys/class/input/event*; do
  [ "$(cat "$ev/device/name" 2>/dev/null)" = "Power Button" ] || continue
  (dd if="/dev/input/${ev##*/}" of=/dev/null bs=24 count=1 2>/dev/null && poweroff -f) &
done

# Contents of storage file $1 from /tmp/files ("path<TAB>compression<TAB>data URL" lines).
# URLs are "data:,<percent-encoded>" or "data:[...];base64,<base64>".
file_body() {
  while IFS=$(printf '\t') read -r path comp src; do
    [ "$path" = "$1" ] || continue
    case $src in data:*,*) ;; *) return 1 ;; esac
    case ${src%%,*} in
      *';base64') echo "${src#*,}" | base64 -d ;;
      *) printf '%b' "$(echo "${src#*,}" | sed 's/\\/\\\\/g; s/%/\\x/g')" ;;
    esac >/tmp/body || return 1
    if [ "$comp" = gzip ]; then gunzip -c </tmp/body; else cat /tmp/body; fi
    return
  done </tmp/files
  return 1
}

probe() {
  cfg=/sys/firmware/qemu_fw_cfg/by_name/opt/com.coreos/config/raw
  n=0
  while [ ! -e $cfg ] && [ $n -lt 20 ]; do sleep 0.1; n=$((n + 1)); done
  [ -d /sys/firmware/qemu_fw_cfg ] || { say "error no /sys/firmware/qemu_fw_cfg"; return; }
  [ -r $cfg ] || { say "error no fw_cfg entry opt/com.coreos/config"; return; }
  cat $cfg >/tmp/config.json || { say "error cannot read $cfg"; return; }
  say "fw_cfg config $(($(wc -c </tmp/config.json))) bytes"
  # caplv emits compact JSON with sorted keys, so a storage file is '{"contents":{...},...,
  # "path":"..."}': split there and take compression/source only from before "path".
  awk '{
    n = split($0, part, /[{]"contents":/)
    for (i = 2; i <= n; i++) {
      if (!match(part[i], /"path":"[^"]*"/)) continue
      path = substr(part[i], RSTART + 8, RLENGTH - 9); head = substr(part[i], 1, RSTART - 1)
      comp = match(head, /"compression":"[^"]*"/) ? substr(head, RSTART + 15, RLENGTH - 16) : "none"
      src = match(head, /"source":"[^"]*"/) ? substr(head, RSTART + 10, RLENGTH - 11) : "none"
      print path "\t" comp "\t" src
    }
  }' /tmp/config.json >/tmp/files
  if file_body /etc/hostname >/tmp/hostname; then say "hostname=$(cat /tmp/hostname)"; else say "error no /etc/hostname file"; fi
  kf=$(awk -F '\t' '$1 ~ /^\/etc\/NetworkManager\/system-connections\/.*\.nmconnection$/ {print $1; exit}' /tmp/files)
  if [ -n "$kf" ] && file_body "$kf" >/tmp/keyfile; then
    say "keyfile $kf begin"
    while IFS= read -r l || [ -n "$l" ]; do say "| $l"; done </tmp/keyfile
    say "keyfile end"
  else
    say "error no NetworkManager keyfile"
  fi
}

probe
say done
while :; do sleep 3600; done # never exit: only the power button powers off
EOF
  chmod 755 "$1"
}

# Gzip'd newc initramfs $3: static busybox (deb $2) + applet links, modules from deb $1, /init.
build_initramfs() {
  local root="$work/root" applet
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,lib/modules} "$work/bb"
  dpkg-deb -x "$2" "$work/bb"
  cp "$work/bb/bin/busybox" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
  add_module "$1" qemu_fw_cfg "$root"
  add_module "$1" evdev "$root"  # /dev/input/event*, for the power button
  add_module "$1" button "$root" # the ACPI power button's input device
  write_init "$root/init"
  (cd "$root" && find . | sort | "$root/bin/busybox" cpio -o -H newc -R 0:0) | gzip -9n >"$3"
}

# Unified kernel image $4 from stub $1, kernel $2, initrd $3: the new sections go page aligned
# after the stub's own, .linux last as systemd-stub requires.
build_uki() {
  local size vma cmd_at initrd_at linux_at
  read -r size vma < <(objdump -h "$1" | awk '$1 ~ /^[0-9]+$/ {s = $3; v = $4} END {print s, v}')
  align() { printf '0x%x' $((($1 + 4095) / 4096 * 4096)); }
  printf '%s' "$cmdline" >"$work/cmdline"
  cmd_at=$(align $((0x$size + 0x$vma)))
  initrd_at=$(align $((cmd_at + $(stat -c %s "$work/cmdline"))))
  linux_at=$(align $((initrd_at + $(stat -c %s "$3"))))
  objcopy --add-section .cmdline="$work/cmdline" --change-section-vma .cmdline="$cmd_at" \
    --add-section .initrd="$3" --change-section-vma .initrd="$initrd_at" \
    --add-section .linux="$2" --change-section-vma .linux="$linux_at" "$1" "$4"
}

# qcow2 $2: GPT disk whose single ESP (1 MiB .. end-1 MiB) holds UKI $1 as the removable-media
# boot path. The FAT is built in a file and dd'd in: no mounting, no root needed.
build_disk() {
  local raw="$work/disk.raw" esp="$work/esp.img" esp_mib=$((disk_mib - 2))
  truncate -s "${disk_mib}M" "$raw"
  printf 'label: gpt\nstart=2048, size=%d, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="ESP"\n' \
    $((esp_mib * 2048)) | sfdisk -q "$raw"
  truncate -s "${esp_mib}M" "$esp"
  mkfs.vfat -F 32 -s 1 -n CAPLV "$esp" >/dev/null
  MTOOLS_SKIP_CHECK=1 mmd -i "$esp" ::/EFI ::/EFI/BOOT
  MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$1" ::/EFI/BOOT/BOOTX64.EFI
  dd if="$esp" of="$raw" bs=1M seek=1 conv=notrunc status=none
  qemu-img convert -f raw -O qcow2 "$raw" "$2"
}

# Copy image $1 to the output path atomically (skipped when identical) and report it.
publish() {
  mkdir -p "$(dirname "$out")"
  cmp -s "$1" "$out" || { cp --reflink=auto "$1" "$out.tmp.$$" && mv -f "$out.tmp.$$" "$out"; }
  echo "$out" >&3
}

main() {
  local pkgs key dir img kdeb vmlinuz
  mapfile -t pkgs < <(resolve_pkgs)
  ((${#pkgs[@]} == 3)) || { log "package resolution failed"; return 1; }
  key=$( (cat "$self" && printf '%s\n' "${pkgs[@]}") | sha256sum | cut -c1-16)
  dir="$cache_base/$key" img="$cache_base/$key/caplv-test-image.qcow2"
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9 # concurrent builds share the cache dir
  if [ -f "$img" ]; then log "cached $img"; publish "$img"; return; fi
  ensure_tools
  fetch_debs "$dir" "${pkgs[@]}"
  work=$(mktemp -d "${TMPDIR:-/tmp}/caplv-test-image.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  log "building from ${pkgs[*]}"
  kdeb=$(compgen -G "$dir/${pkgs[0]%%=*}_*.deb")
  # One pass for the kernel and every module the initramfs loads.
  kernel_extract "$kdeb" './boot/vmlinuz-*' '*/qemu_fw_cfg.ko*' '*/input/evdev.ko*' '*/acpi/button.ko*'
  dpkg-deb -x "$(compgen -G "$dir/systemd-boot-efi_*.deb")" "$work/sb"
  build_initramfs "$kdeb" "$(compgen -G "$dir/busybox-static_*.deb")" "$work/initrd.img"
  vmlinuz=$(compgen -G "$work/kx/boot/vmlinuz-*")
  build_uki "$work/sb/usr/lib/systemd/boot/efi/linuxx64.efi.stub" "$vmlinuz" "$work/initrd.img" "$work/BOOTX64.EFI"
  build_disk "$work/BOOTX64.EFI" "$work/image.qcow2"
  mv "$work/image.qcow2" "$img"
  log "built $img"
  publish "$img"
}

main
