#!/usr/bin/env bash
# Build the Dockerfile as written with buildah and run the image as OpenShift's restricted-v2
# SCC runs it, with podman and runc. No registry can be pulled from here, so the Dockerfile's
# FROM images are local stand-ins tagged with exactly its names, built from Debian's packages
# (debootstrap); the Rust stage's stand-in carries this machine's toolchain where the official
# rust image keeps it (/usr/local/rustup, proxies in /usr/local/cargo/bin).
#
#   - localhost/caplv-manager:dev is the shipped image (no sandbox stand-ins), also tagged as the
#     chart's default image (values.yaml image.repository, the chart's appVersion); its size is
#     reported. localhost/caplv-manager:dev-sandbox is that image with the development build of
#     the binary (which has the sandbox), for running the demo.
#   - Each check runs in a container with an arbitrary UID and GID 0, a read-only root file
#     system, /tmp a tmpfs, no network but loopback, every capability dropped and no new
#     privileges: `--help`; `crds`; `crds --out-dir` (the committed CRDs, written as that UID, to
#     /tmp but not to the root); the shipped image has no `sandbox`; `sandbox --demo` in the other.
#
#   scripts/test-image.sh             build both images and run the checks above
#   scripts/test-image.sh --genuine   in a scripts/control-plane.sh environment (its env file
#                                     exported, as scripts/genuine-test.sh does): the rendered
#                                     install (manifests/install.yaml) applied, the shipped
#                                     image's manager run with the chart's Deployment arguments,
#                                     the chart's ServiceAccount token and CA mounted where a pod
#                                     has them, on the host network (the API server is on
#                                     loopback); it must reconcile an IgnitionConfig, and the
#                                     audit log must show its Secret created by that account.
#
# The last line of output is one JSON object: image, size_mb, sandbox_size_mb, build_s, checks
# (or, with --genuine, image, checks and reconciled_s).
set -euo pipefail
mode=${1:-all}
case "$mode" in
  all | --genuine) ;;
  *) echo "usage: test-image.sh [--genuine]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
root=$PWD
cache="$HOME/.cache/caplv/image"
image=localhost/caplv-manager:dev
sandbox_image=localhost/caplv-manager:dev-sandbox
mkdir -p "$cache"

say() { echo "test-image: $*" >&2; }
die() {
  say "$*"
  exit 1
}

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
missing=()
for tool in buildah podman runc debootstrap newuidmap fuse-overlayfs; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing podman buildah runc debootstrap uidmap fuse-overlayfs (missing: ${missing[*]})"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    podman buildah runc debootstrap uidmap fuse-overlayfs >/dev/null
fi
[ "$(id -u)" -eq 0 ] || die "run as root: buildah's chroot isolation and debootstrap need it"

# Root here cannot raise rlimits and podman's defaults are above the hard limits; crun refuses
# hybrid cgroups, runc does not. Our own containers.conf, so the machine's stays as it is.
export CONTAINERS_CONF="$cache/containers.conf"
cat >"$CONTAINERS_CONF" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF

# The FROM names, in the Dockerfile's order: the build stage's, then the runtime's.
mapfile -t bases < <(sed -n 's/^FROM \([^ ]*\).*/\1/p' Dockerfile | grep -vx scratch)
[ ${#bases[@]} -eq 2 ] || die "expected two images in the Dockerfile's FROM lines, found ${#bases[@]}"
rust_base=${bases[0]}
debian_base=${bases[1]}
case "$rust_base" in
  docker.io/library/rust:*-slim-bookworm) ;;
  *) die "the build stage's FROM ($rust_base) is not an official rust slim-bookworm image" ;;
esac
[ "$debian_base" = docker.io/library/debian:bookworm-slim ] || die "unexpected runtime FROM $debian_base"

# The mirror apt already uses (the Debian one: security updates are not needed for a stand-in).
mirror=$(sed -n 's/^URIs: *\(.*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
mirror=${mirror:-$(sed -n 's/^deb \([^ ]*debian\) bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n 1)}
[ -n "$mirror" ] || die "no Debian mirror found in apt's sources"

debian_standin() {
  podman image exists "$debian_base" && return 0
  local tarball="$cache/debian-bookworm-minbase.tar"
  if [ ! -f "$tarball" ]; then
    say "debootstrap bookworm (minbase) from $mirror"
    local rootfs
    rootfs=$(mktemp -d /var/tmp/caplv-rootfs.XXXXXX)
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $cache/debootstrap.log"
    # Slim as the official image is: no apt lists or downloaded packages, no documentation,
    # manual pages or translations, and dpkg told to leave them out of later installs too.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/groff/* "$rootfs"/usr/share/lintian/*
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
SLIM
    tar -C "$rootfs" -cf "$tarball.partial" . && mv "$tarball.partial" "$tarball"
    rm -rf "$rootfs"
  fi
  podman import --quiet --change 'CMD ["bash"]' "$tarball" "$debian_base" >/dev/null
  say "stand-in $debian_base imported"
}

rust_standin() {
  podman image exists "$rust_base" && return 0
  local want=${rust_base#docker.io/library/rust:}
  want=${want%-slim-bookworm}
  local have
  have=$(rustc --version | cut -d' ' -f2)
  case "$have" in
    "$want" | "$want".*) ;;
    *) die "the Dockerfile builds with Rust $want, this machine has $have" ;;
  esac
  local toolchain
  toolchain=$(rustc --print sysroot)
  local name="$have-x86_64-unknown-linux-gnu"
  say "stand-in $rust_base: $debian_base with gcc and this machine's Rust $have ($toolchain)"
  local ctr
  ctr=$(buildah from --pull=never "$debian_base")
  buildah run --isolation chroot "$ctr" -- sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates gcc libc6-dev >/dev/null && rm -rf /var/lib/apt/lists/*'
  local mnt
  mnt=$(buildah mount "$ctr")
  mkdir -p "$mnt/usr/local/rustup/toolchains/$name" "$mnt/usr/local/cargo/bin"
  # The compiler and the standard library; the documentation stays behind.
  cp -a "$toolchain/bin" "$toolchain/lib" "$toolchain/libexec" "$mnt/usr/local/rustup/toolchains/$name/"
  cp "$(command -v rustup)" "$mnt/usr/local/cargo/bin/rustup"
  for proxy in cargo rustc rustdoc cargo-clippy clippy-driver cargo-fmt rustfmt; do
    ln -s rustup "$mnt/usr/local/cargo/bin/$proxy"
  done
  printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\nauto_self_update = "disable"\n\n[overrides]\n' \
    "$name" >"$mnt/usr/local/rustup/settings.toml"
  buildah umount "$ctr" >/dev/null
  buildah config --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env RUST_VERSION="$have" "$ctr"
  buildah commit --quiet --rm "$ctr" "$rust_base" >/dev/null
}

# As restricted-v2 runs a pod: an arbitrary UID of the namespace's range, GID 0.
restricted=(--rm --read-only --tmpfs /tmp:rw,size=256m --user 1000870000:0 --cap-drop ALL
  --security-opt no-new-privileges)

if [ "$mode" = --genuine ]; then
  exec bash scripts/image-genuine.sh "$image" "${restricted[@]}"
fi

debian_standin
rust_standin

# Every crate is fetched here first and this machine's registry cache lent to the build stage
# (mounted for the RUN steps only, never part of a layer), so the build downloads nothing.
cargo fetch --locked --quiet
build_log="$cache/build.log"
start=$SECONDS
say "buildah bud $image (log: $build_log)"
buildah bud --isolation chroot --pull=never --layers \
  -v "$HOME/.cargo/registry:/usr/local/cargo/registry" -t "$image" -f Dockerfile . >"$build_log" 2>&1 || {
  tail -n 40 "$build_log" >&2
  die "building $image failed"
}
built_s=$((SECONDS - start))
say "built $image in $built_s s"
# The chart's default image names the same build: image.repository at the chart's appVersion.
chart_image="$(sed -n 's/^  repository: *//p' helm/caplv/values.yaml | head -n 1):$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/caplv/Chart.yaml)"
grep -qF "build -t $chart_image ." Dockerfile || die "the Dockerfile's build command does not name the chart's image $chart_image"
podman tag "$image" "$chart_image"

# The sandbox image: the shipped one with the development build (every feature, the sandbox
# too) in place of its binary. The check is of the image's runtime (its libraries, an arbitrary
# user, a read-only root); a second release build would double this script's time.
cargo build --quiet -p caplv --bin caplv-manager
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
context="$cache/sandbox-context"
rm -rf "$context"
mkdir -p "$context"
cp "$target_dir/debug/caplv-manager" "$context/caplv-manager"
printf 'FROM %s\nCOPY caplv-manager /usr/local/bin/caplv-manager\n' "$image" >"$context/Containerfile"
buildah bud --isolation chroot --pull=never --quiet -t "$sandbox_image" "$context" >/dev/null ||
  die "building $sandbox_image failed"

size_mb() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.1f", $1 / 1000000}'; }
size=$(size_mb "$image")
sandbox_size=$(size_mb "$sandbox_image")
say "$image: $size MB; $sandbox_image: $sandbox_size MB"
checks=()

help=$(podman run "${restricted[@]}" --network none "$image" --help) || die "--help failed"
grep -q '^Usage: caplv-manager' <<<"$help" || die "--help printed no usage: $help"
checks+=(help)

# `crds --out-dir` into a directory of this machine: the files are the committed CRDs, and
# their owner tells the container ran as the arbitrary UID with GID 0.
out="$cache/crds-out"
rm -rf "$out"
mkdir -p "$out"
chmod 777 "$out"
podman run "${restricted[@]}" --network none -v "$out:/out" "$image" crds --out-dir /out ||
  die "crds --out-dir failed"
diff -r manifests/crds "$out" >&2 || die "the image's crds differ from manifests/crds"
owner=$(stat -c %u:%g "$out/$(ls "$out" | head -n 1)")
[ "$owner" = 1000870000:0 ] || die "the container wrote as $owner, not 1000870000:0"
printed=$(podman run "${restricted[@]}" --network none "$image" crds) || die "crds failed"
[ "$(grep -c '^kind: CustomResourceDefinition' <<<"$printed")" -eq "$(ls manifests/crds | wc -l)" ] ||
  die "crds printed another number of CRDs than manifests/crds holds"
podman run "${restricted[@]}" --network none "$image" crds --out-dir /tmp/crds || die "/tmp is not writable"
if err=$(podman run "${restricted[@]}" --network none "$image" crds --out-dir /usr/local/crds 2>&1); then
  die "the root file system is writable"
fi
grep -q "Read-only file system" <<<"$err" || die "writing to the root failed for another reason: $err"
checks+=(crds restricted)

if podman run "${restricted[@]}" --network none "$image" sandbox --help >/dev/null 2>&1; then
  die "the shipped image carries the sandbox subcommand"
fi
demo_log="$cache/demo.log"
if ! podman run "${restricted[@]}" --network none "$sandbox_image" sandbox --demo \
  --kubeconfig-out /tmp/sandbox.kubeconfig >"$demo_log" 2>&1; then
  tail -n 30 "$demo_log" >&2
  die "sandbox --demo failed in $sandbox_image (log: $demo_log)"
fi
checks+=(sandbox-demo)

json_checks=$(printf '"%s",' "${checks[@]}")
echo "{\"image\":\"$image\",\"size_mb\":$size,\"sandbox_size_mb\":$sandbox_size,\"build_s\":$built_s,\"checks\":[${json_checks%,}]}"
