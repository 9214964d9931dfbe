#!/usr/bin/env bash
# The sharded-variable tests (tests/coordinator/ps/sharded_variable_test.cc) once more, against
# shards living in two `tessera ps` processes on loopback instead of in process: every read,
# gather, slice, assign and scatter then crosses the real wire format and handshake.
#   networked_shard_ops.sh COORDINATOR_TEST_BINARY TESSERA_BINARY
set -euo pipefail
tests=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"
read -r -a ports < <(free_ports 2)
for task in 0 1; do
  "$tessera" ps --port "${ports[$task]}" --task "$task" >"$work/ps$task.log" 2>&1 &
  pids[ps$task]=$!
done
TESSERA_TEST_PS="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}" \
  "$tests" --source-file='*sharded_variable_test.cc'
