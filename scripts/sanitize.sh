#!/usr/bin/env bash
# Builds the whole tree with AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite
# under them: any report fails its test. The build is optimized with -O1 (faster to compile than
# -O3, readable stacks) into build-asan/ (or $SANITIZE_BUILD_DIR). ~45 minutes on 2 cores from
# cold.
#
#   scripts/sanitize.sh [extra ctest arguments, e.g. -R "^actors:"]
#
# Left out, because the instrumentation itself breaks what they measure (they run in the plain
# suite): the tests that bound peak memory or an address-space limit (ASan reserves terabytes of
# shadow memory and keeps freed blocks in quarantine), the check of the release build's kernel
# symbols, and the install tests (a consumer project linked without the sanitizer's flags).
#
# ThreadSanitizer (-DTESSERA_TSAN=ON) builds and runs, but with Debian's packages its reports are
# mostly false: CAF and Abseil are not built with it, so it does not see the synchronization
# inside CAF's scheduler (a "race" at the first message of every spawned actor) or inside
# absl::Mutex (a "race" on every value it guards). Code that must be checked by TSan uses
# std::mutex (core/base/mem_env.cc does).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${SANITIZE_BUILD_DIR:-build-asan}
TESSERA_BUILD_DIR=$build \
  TESSERA_CMAKE_ARGS="-DTESSERA_ASAN=ON -DCMAKE_CXX_FLAGS_RELEASE=-O1 ${TESSERA_CMAKE_ARGS:-}" \
  scripts/setup.sh

excluded='kernel_symbols|install\.|net_hostile_peers|net_small_workers|net_dlrm_files'
excluded+='|a body near the size limit costs a small multiple of itself'
# allocator_may_return_null: some tests allocate more than the machine has on purpose and expect
# ResourceExhausted, not an abort.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
ctest --test-dir "$build" -j"$(nproc)" --timeout 600 --output-on-failure -E "$excluded" "$@"
