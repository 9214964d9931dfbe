# Shared plumbing of the networked end-to-end scripts (source it after `set -euo pipefail`):
#   work          a scratch directory, removed at exit
#   pids          an associative array of the processes to kill at exit (any keys)
#   free_ports N  N loopback ports free now (bound, then released), on one line
#   exits_within PID SECONDS  waits (polling every 50 ms) until PID has exited; fails when it is
#                 still running after SECONDS (then `wait PID` gives its status)
#   write_spec P W  $work/spec.json: the coordinator on ports[0], P PS on ports[1..P], W workers
#                 on the next W ports (all on 127.0.0.1)
#   start_ps TESSERA N   N `tessera ps` on ports[1..N] as tasks 0..N-1 (logs ps<t>.log, pids[ps<t>])
#   start_workers N CMD...  N workers: CMD --role=worker --task=t (logs worker<t>.log,
#                 pids[worker<t>])
#   wait_workers N / stop_ps N  wait for the workers to exit / end the PS processes
# At exit every process in pids is killed with SIGKILL; when the script fails, the last lines of
# each log in $work are printed first (progress lines of the drivers left out).
# TESSERA_E2E_KEEP=1 keeps $work (its path is printed) for a closer look.
work=$(mktemp -d)
declare -A pids=()
net_cleanup() {
  local status=$?
  if [ "$status" != 0 ]; then
    for log in "$work"/*.log; do
      [ -e "$log" ] || continue
      echo "== $log"; tr '\r' '\n' <"$log" | grep -v "^recsys: step" | tail -n 12
    done
  fi
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${TESSERA_E2E_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap net_cleanup EXIT

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

exits_within() {
  local deadline
  deadline=$(python3 -c "import time; print(time.time() + $2)")
  while kill -0 "$1" 2>/dev/null; do
    python3 -c "import sys, time; sys.exit(time.time() > $deadline)" || return 1
    sleep 0.05
  done
}

write_spec() {
  python3 - "$1" "$2" "${ports[@]}" >"$work/spec.json" <<'PY'
import json, sys
ps, workers, ports = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
address = lambda k: f"127.0.0.1:{ports[k]}"
print(json.dumps({"cluster": {"coordinator": [address(0)],
                              "ps": [address(1 + t) for t in range(ps)],
                              "worker": [address(1 + ps + t) for t in range(workers)]}}))
PY
}

start_ps() {
  local tessera=$1 t
  for ((t = 0; t < $2; ++t)); do
    "$tessera" ps --port "${ports[$((1 + t))]}" --task "$t" >"$work/ps$t.log" 2>&1 &
    pids[ps$t]=$!
  done
}

start_workers() {
  local n=$1 t
  shift
  for ((t = 0; t < n; ++t)); do
    "$@" --role=worker --task="$t" >"$work/worker$t.log" 2>&1 &
    pids[worker$t]=$!
  done
}

wait_workers() {
  local t
  for ((t = 0; t < $1; ++t)); do wait "${pids[worker$t]}"; unset "pids[worker$t]"; done
}

stop_ps() {
  local t
  for ((t = 0; t < $1; ++t)); do
    kill "${pids[ps$t]}"; wait "${pids[ps$t]}" 2>/dev/null || true; unset "pids[ps$t]"
  done
}
