#!/usr/bin/env bash
# The previous release's caplv-manager, for the upgrade test: built once from the commit that
# testbed/previous-release names (a git worktree of this clone) and cached under
# ~/.cache/caplv/previous/COMMIT/. Prints the binary's path.
#
# The build shares this checkout's target directory, so only the workspace's own crates compile
# again (the dependencies are the ones the current build has). That also leaves the old binary
# at target/debug/caplv-manager: the next cargo build or test puts the current one back, which
# scripts/system-test.sh's `cargo test --no-run` after this does.
#
#   scripts/previous-release.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

log() { echo "previous-release: $*" >&2; }
die() { log "error: $*"; exit 1; }

field() { sed -n "s/^$1=//p" testbed/previous-release; }
tag=$(field tag)
commit=$(field commit)
[[ $commit =~ ^[0-9a-f]{40}$ ]] || die "testbed/previous-release: commit must be 40 hex digits, not '$commit'"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caplv/previous/$commit
if [ -x "$cache/caplv-manager" ]; then
  echo "$cache/caplv-manager"
  exit 0
fi

git cat-file -e "$commit^{commit}" 2>/dev/null ||
  die "commit $commit ($tag) is not in this clone; fetch the history (git fetch --unshallow)"
# A tag of that name, if this clone has one, must point at the same commit.
if tagged=$(git rev-parse -q --verify "refs/tags/$tag^{commit}"); then
  [ "$tagged" = "$commit" ] || die "tag $tag is $tagged, but testbed/previous-release says $commit"
fi

src=$(mktemp -d /tmp/caplv-previous.XXXX)
trap 'git -C "$root" worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"; git -C "$root" worktree prune' EXIT
git worktree add -q --detach "$src" "$commit"
log "building $tag ($commit)"
# The same features as the test build, so the dependencies are reused as they are.
CARGO_TARGET_DIR=$root/target cargo build -q --manifest-path "$src/Cargo.toml" -p caplv --all-features --bin caplv-manager
mkdir -p "$cache"
cp "$root/target/debug/caplv-manager" "$cache/caplv-manager.tmp"
mv "$cache/caplv-manager.tmp" "$cache/caplv-manager"
echo "$cache/caplv-manager"
