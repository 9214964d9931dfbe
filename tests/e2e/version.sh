#!/usr/bin/env bash
# `--version` on every binary a user runs: the `tessera` tool (alone and after each command)
# and the example drivers print exactly the version line CMake expects (project(VERSION), the
# build type and options: tessera/version.h) on stdout, nothing on stderr, and exit 0.
#   version.sh EXPECTED_LINE TESSERA RECSYS FASHION_MNIST
set -euo pipefail
expected=$1 tessera=$2 recsys=$3 fashion_mnist=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
check() {  # the command line, run with --version appended
  local status=0
  "$@" --version >"$work/out" 2>"$work/err" || status=$?
  local out err
  out=$(cat "$work/out") err=$(cat "$work/err")
  if [ "$status" != 0 ] || [ "$out" != "$expected" ] || [ -n "$err" ]; then
    echo "FAIL: $* --version: exit $status, stdout '$out', stderr '$err'; expected '$expected'"
    failed=1
  else
    echo "ok: $(basename "$1") ${*:2} --version: $out"
  fi
}
check "$tessera"
for command in predict serve ps inspect help; do check "$tessera" "$command"; done
check "$recsys"
check "$fashion_mnist"
exit $failed
