#!/usr/bin/env bash
# Fails when a doctest case's name holds a ';': ctest's test discovery splits names at it, so
# such a case becomes entries that match no test and fail (every case is its own ctest entry).
set -u
cd "$(dirname "$0")/.."
bad=$(grep -rnE 'TEST_CASE\("[^"]*;' tests)
if [ -n "$bad" ]; then
  echo "test names must not contain ';' (ctest splits them there):"
  echo "$bad"
  exit 1
fi
echo "test names: ok"
