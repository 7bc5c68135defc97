#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ (fuzz/fuzz_targets/*.rs) for SECONDS each, one after the
# other (default 60), and fails if any finds a crash. What each target checks lives in
# crates/fuzz-checks (whose test also runs the committed seeds in plain `cargo test`).
#
#   scripts/fuzz.sh [SECONDS]
#
# - Installs cargo-fuzz (`cargo install cargo-fuzz --locked`) if it is missing.
# - Needs no nightly toolchain: RUSTC_BOOTSTRAP=1 lets the stable compiler accept the -Z flags
#   cargo-fuzz passes (AddressSanitizer, coverage instrumentation).
# - Builds into $CARGO_TARGET_DIR/fuzz when CARGO_TARGET_DIR is set, else fuzz/target.
#   CARGO_BUILD_JOBS bounds the build's parallelism as usual.
# - Corpus: fuzz/corpus/<target>/. The committed seeds are the `seed-*` files; what libFuzzer
#   adds there is git-ignored, and kept between runs. fuzz/<target>.dict is passed if present.
# - A crash (a panic, an out-of-bounds access, an allocation over libFuzzer's 2 GB default, an
#   input taking over 10 s) is written to fuzz/artifacts/<target>/; reproduce it with
#   `RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/crash-...`.
# - Each run's full libFuzzer output goes to fuzz/artifacts/<target>.log; this prints the
#   summary (executions, time, coverage) or the failure.
# - TMPDIR defaults to /dev/shm: index_file writes a file per input, which on a busy disk is
#   ten times slower than in memory.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
if [[ -z "${TMPDIR:-}" && -d /dev/shm && -w /dev/shm ]]; then
  export TMPDIR=/dev/shm
fi
target_dir="${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/fuzz}"
target_dir="${target_dir:-$PWD/fuzz/target}"

cargo fuzz build --target-dir "$target_dir"
mkdir -p fuzz/artifacts
failed=0
for target in $(cargo fuzz list); do
  args=(-max_total_time="$seconds" -timeout=10 -print_final_stats=1)
  if [[ -f "fuzz/$target.dict" ]]; then
    args+=(-dict="fuzz/$target.dict")
  fi
  log="fuzz/artifacts/$target.log"
  echo "== fuzz $target for ${seconds} s (log: $log)"
  if cargo fuzz run --target-dir "$target_dir" "$target" -- "${args[@]}" >"$log" 2>&1; then
    grep -E '^Done [0-9]+ runs|^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
    grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | cut -c1-160 || true
  else
    failed=1
    echo "!! $target FAILED:"
    grep -E -A2 'panicked at|ERROR: (libFuzzer|AddressSanitizer)|Test unit written|^SUMMARY' "$log" | cut -c1-300 || true
  fi
done
exit "$failed"
