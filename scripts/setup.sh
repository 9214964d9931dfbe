#!/usr/bin/env bash
# Installs the Debian packages Tessera needs (only those missing), then configures and builds
# into build/ (or $TESSERA_BUILD_DIR). A second run costs seconds.
#
#   TESSERA_BUILD_DIR    build directory (default: build)
#   TESSERA_CMAKE_ARGS   extra CMake arguments, e.g. "-DTESSERA_ASAN=ON"
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libcaf-dev            # CAF 0.17: actors, middleman (networking), openssl module
  libssl-dev            # OpenSSL: network.cc checks the TLS files before CAF loads them
  libeigen3-dev         # Eigen 3.4: tensor math
  capnproto libcapnp-dev  # Cap'n Proto 0.9: wire payloads, checkpoints, exported models
  libabsl-dev           # Abseil 20220623: Status, flags, containers
  doctest-dev           # tests
  gdb                   # a hung test's thread stacks (tests/doctest_main.cc)
  libspdlog-dev         # logging (core/base/logging.h)
  zlib1g-dev            # gzip'd IDX files
  nlohmann-json3-dev    # JSON summaries and the serving API
  libcpp-httplib-dev    # the serving tests' HTTP client
  libbenchmark-dev      # bench/
  dataset-fashion-mnist # the fashion_mnist reference workload
  curl                  # the end-to-end serving and dashboard tests
  chromium fonts-liberation  # the dashboard's browser test and its screenshot
  openssl               # the TLS tests make their certificates with it (docs/tls.md)
  python3               # the layering check's include reach, the hostile-peer e2e test
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing missing Debian packages: ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install packages" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi

build_dir=${TESSERA_BUILD_DIR:-build}
# shellcheck disable=SC2206
extra_args=(${TESSERA_CMAKE_ARGS:-})
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${TESSERA_BUILD_TYPE:-Release}" "${extra_args[@]}" >/dev/null
echo "setup: building in $build_dir/ with $jobs jobs"
cmake --build "$build_dir" -j "$jobs"
