#!/usr/bin/env bash
# Fuzzes the file readers of schema/ (DecodeSlice, DecodeManifest, DecodeExportedModel) and the
# delimited-text reader (DelimitedTextSource) with libFuzzer: installs clang and its fuzzer runtime if missing, builds fuzz/ with clang, ASan and
# UBSan in build-fuzz/, seeds each target with round-trip encodings (tessera_fuzz_seeds), and runs
# each target for a bounded time. Exits non-zero when a target finds a crash; the reproducer is
# left in build-fuzz/artifacts/.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [slice|manifest|model|text ...]
#   SECONDS_PER_TARGET defaults to $FUZZ_SECONDS or 60. Extra libFuzzer flags: $FUZZ_FLAGS.
#   Reproduce a crash: build-fuzz/fuzz/tessera_fuzz_decode_slice build-fuzz/artifacts/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${FUZZ_SECONDS:-60}}
shift || true
readers=("$@")
[ ${#readers[@]} -eq 0 ] && readers=(slice manifest model text)
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_BUILD_JOBS:-$(nproc)}

# A compiler that can link -fsanitize=fuzzer (Debian: clang plus libclang-rt-<version>-dev).
can_fuzz() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    >"$dir/probe.cc"
  clang++ -fsanitize=fuzzer "$dir/probe.cc" -o "$dir/probe" >/dev/null 2>&1
  local ok=$?
  rm -rf "$dir"
  return $ok
}
if ! can_fuzz; then
  echo "fuzz.sh: installing clang and libFuzzer (apt-get)" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update
  version=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9]*\)$/\1/p' | head -1)
  $sudo_cmd apt-get install -y clang ${version:+libclang-rt-$version-dev}
  can_fuzz || { echo "fuzz.sh: clang cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_FUZZ=ON -DTESSERA_ASAN=ON >/dev/null
targets=(tessera_fuzz_seeds)
for r in "${readers[@]}"; do targets+=("tessera_fuzz_decode_$r"); done
cmake --build "$build" --target "${targets[@]}" -j"$jobs"

seeds="$build/seeds"
rm -rf "$seeds"
"$build/fuzz/tessera_fuzz_seeds" "$seeds"
mkdir -p "$build/artifacts"
status=0
for r in "${readers[@]}"; do
  corpus="$build/corpus/$r"  # kept between runs: it grows what earlier runs found
  mkdir -p "$corpus"
  echo "== fuzzing Decode $r for ${seconds}s"
  # shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
  if ! "$build/fuzz/tessera_fuzz_decode_$r" "$corpus" "$seeds/$r" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$r-" ${FUZZ_FLAGS:-} 2>"$build/fuzz-$r.log"; then
    echo "!! Decode $r: crash (see $build/fuzz-$r.log and $build/artifacts/)" >&2
    status=1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done|^INFO: Running with|ERROR' \
    "$build/fuzz-$r.log" || true
done
exit $status
