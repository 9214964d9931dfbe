#!/usr/bin/env bash
# The sharded-variable tests (tests/coordinator/sharded_variable_test.cc) once more, against
# shards living in two `tessera ps` processes on loopback instead of in process: every read,
# gather, slice, assign and scatter then crosses the real wire format and handshake.
#   networked_shard_ops.sh COORDINATOR_TEST_BINARY TESSERA_BINARY
set -euo pipefail
tests=$1
tessera=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
read -r -a ports < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
for task in 0 1; do
  "$tessera" ps --port "${ports[$task]}" --task "$task" >"$work/ps$task.log" 2>&1 &
  pids+=($!)
done
TESSERA_TEST_PS="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}" \
  "$tests" --source-file='*sharded_variable_test.cc'
