#!/usr/bin/env bash
# Build the cargo-fuzz targets of fuzz/ once and run each on its committed corpus
# (fuzz/corpus/<target>), libFuzzer writing what it finds to a scratch directory so the
# checkout stays clean. A crash, a timeout (5 s for one input) or more than 1 GiB of memory
# fails the run and prints the input's path and base64.
#
#   scripts/fuzz.sh           the short form, 20 s per target (the test command runs it)
#   scripts/fuzz.sh --long    300 s per target
#   FUZZ_SECONDS=N            N s per target; FUZZ_TARGETS="a b" only those targets
#
# The last line of output is one JSON object: targets, executions, seconds per target, crashes.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-20}
case "${1:-}" in
  "") ;;
  --long) seconds=${FUZZ_SECONDS:-300} ;;
  *) echo "usage: fuzz.sh [--long]" >&2; exit 2 ;;
esac

tools="$HOME/.cache/caplv/cargo-fuzz"
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
  cargo install --locked --root "$tools" cargo-fuzz
fi
export PATH="$tools/bin:$PATH"
# libFuzzer's instrumentation needs nightly flags: the nightly toolchain when there is one,
# else this stable one allowed them.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi

targets=${FUZZ_TARGETS:-$("${fuzz[@]}" list)}
echo "fuzz: building $(echo "$targets" | wc -w) targets"
"${fuzz[@]}" build
bin=target/x86_64-unknown-linux-gnu/release
scratch=$(mktemp -d "${TMPDIR:-/tmp}/caplv-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

total=0
count=0
for target in $targets; do
  mkdir -p "$scratch/$target/corpus" "$scratch/$target/artifacts"
  log="$scratch/$target/log"
  if ! "$bin/$target" -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=5 \
      -artifact_prefix="$scratch/$target/artifacts/" -print_final_stats=1 \
      "$scratch/$target/corpus" "fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    for found in "$scratch/$target/artifacts/"*; do
      [ -e "$found" ] || continue
      echo "fuzz: $target failed on $(basename "$found"), input (base64): $(base64 -w0 "$found")" >&2
    done
    echo "{\"fuzz_targets\":$count,\"executions\":$total,\"seconds_per_target\":$seconds,\"crashes\":1,\"failed\":\"$target\"}"
    exit 1
  fi
  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
  runs=${runs:-0}
  echo "fuzz: $target: $runs executions in ${seconds} s, corpus $(find "$scratch/$target/corpus" -type f | wc -l) new inputs"
  total=$((total + runs))
  count=$((count + 1))
done
echo "{\"fuzz_targets\":$count,\"executions\":$total,\"seconds_per_target\":$seconds,\"crashes\":0}"
