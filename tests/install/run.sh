#!/usr/bin/env bash
# Builds tests/install/train_small.cc against Tessera installed from BUILD_DIR into a fresh
# prefix, the way a user would, and runs it (it trains a small model in the simulation and
# checks that the loss fell):
#   run.sh cmake BUILD_DIR [CXX_LAUNCHER]       # find_package(Tessera) + Tessera::tessera,
#                                               # compiled with -march=native when the library
#                                               # is portable (Note [One Eigen alignment])
#   run.sh pkg-config BUILD_DIR [CXX_LAUNCHER]  # c++ $(pkg-config --cflags --libs tessera)
# Nothing is read from the source tree but this folder: the headers, libraries, CMake package
# and pkg-config file all come from the installed prefix. CXX_LAUNCHER (ccache) wraps the
# compiler when given; the scratch directory, BUILD_DIR/tests/install/MODE (emptied first, kept
# after for a look), has the same path every run so that the launcher's cache hits.
set -euo pipefail
mode=$1 build=$2 launcher=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(cd "$build" && pwd)/tests/install/$mode
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
# The layout README.md promises (lib/ is the platform's library directory, lib/ on Debian).
pc=$(find "$prefix" -name tessera.pc)
libdir=$(dirname "$(dirname "$pc")")
for path in "$prefix/bin/tessera" "$prefix/include/tessera/training.h" \
            "$libdir/cmake/Tessera/TesseraConfig.cmake" "$libdir/libtessera_core.a" \
            "$libdir/pkgconfig/tessera-workloads.pc"; do
  [ -e "$path" ] || { echo "FAIL: the install has no $path"; find "$prefix"; exit 1; }
done
# Only the public tree is installed: include/tessera/ and nothing else under include/.
extra=$(cd "$prefix/include" && find . -type f ! -path './tessera/*')
if [ -n "$extra" ] || [ -n "$(find "$prefix/include/tessera" -type f ! -name '*.h')" ]; then
  echo "FAIL: the install holds headers beside the public tree: $extra"; exit 1
fi
# Every header an installed header includes from Tessera is installed, and none includes CAF,
# Cap'n Proto or a header of the library's own tree.
includes=$(cd "$prefix/include" && grep -rhoE '^#include ["<][^">]*[">]' tessera |
  sed -E 's/#include ["<](.*)[">]/\1/' | sort -u)
for h in $includes; do
  case $h in
    caf/*|capnp/*|kj/*|*.capnp.h|core/*|schema/*|actors/*|cluster/*|coordinator/*|serving/*|\
      http/*|workloads/*)
      echo "FAIL: an installed header includes $h"; exit 1 ;;
    tessera/*) [ -e "$prefix/include/$h" ] || { echo "FAIL: $h is included, not installed"; exit 1; } ;;
  esac
done
"$prefix/bin/tessera" --version

cp "$here/train_small.cc" "$here/CMakeLists.txt" "$work/"
case $mode in
  cmake)
    flags=""
    # A portable library under a program tuned for this CPU.
    if ! "$prefix/bin/tessera" --version | grep -q -- "-march=native"; then
      flags="-march=native"
    fi
    cmake -S "$work" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
          ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher} -DTRAIN_SMALL_FLAGS="$flags" \
          >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
    cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
    program=$work/build/train_small
    ;;
  pkg-config)
    export PKG_CONFIG_PATH=$libdir/pkgconfig
    cflags=$(pkg-config --cflags tessera) libs=$(pkg-config --libs tessera)
    version=$("$prefix/bin/tessera" --version | cut -d' ' -f2)
    if [ "$(pkg-config --modversion tessera)" != "$version" ]; then
      echo "FAIL: tessera.pc's version is not the binary's ($version)"
      exit 1
    fi
    # shellcheck disable=SC2086  # the flags are words
    $launcher c++ -std=c++17 -O2 -o "$work/train_small" "$work/train_small.cc" $cflags $libs
    program=$work/train_small
    ;;
  *) echo "usage: run.sh cmake|pkg-config BUILD_DIR [CXX_LAUNCHER]"; exit 2 ;;
esac
"$program" "$work/export"
