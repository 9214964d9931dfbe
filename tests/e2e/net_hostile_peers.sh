#!/usr/bin/env bash
# End to end across real processes on loopback: strangers against a plain-TCP `tessera ps` and a
# recsys coordinator, each under a 1.5 GiB address-space limit (prlimit --as). While the
# coordinator waits for its worker, tests/e2e/hostile_peer.py sends each port forged BASP headers
# announcing 3-4 GiB, garbage, a TLS hello, a valid BASP handshake followed by a huge message,
# and connections that never complete the version handshake. Checks: every such connection is
# closed by the node (the silent ones within the handshake deadline), both processes are alive,
# neither allocated what the headers announced (peak RSS), the PS logged why it closed the first
# one, and then a real worker joins and the run completes with its AUC line.
#   net_hostile_peers.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
here=$(dirname "$0")
source "$here/net_lib.sh"
read -r -a ports < <(free_ports 3)
cat >"$work/spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"],
             "ps": ["127.0.0.1:${ports[1]}"],
             "worker": ["127.0.0.1:${ports[2]}"]}}
JSON
limit=$((1536 << 20))  # the 4 GiB a forged header announced could never be allocated
common=(--cluster_spec="$work/spec.json" --users=2000 --items=500 --train_examples=20000
        --test_examples=2000 --connect_timeout_s=30 --threads=1)

prlimit --as=$limit "$tessera" ps --port "${ports[1]}" --task 0 --threads 1 >"$work/ps.log" 2>&1 &
pids[ps]=$!
prlimit --as=$limit "$recsys" "${common[@]}" --min_workers=1 --worker_wait_s=120 \
  >"$work/coordinator.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator
for _ in $(seq 300); do grep -q "waiting for 1 of 1 workers" "$work/coordinator.log" && break; sleep 0.1; done
grep -q "waiting for 1 of 1 workers" "$work/coordinator.log" ||
  { echo "the coordinator did not start listening within 30 s"; exit 1; }

# Both ports at once: the silent variants wait out the handshake deadline.
python3 "$here/hostile_peer.py" "${ports[1]}" >"$work/attack_ps.log" 2>&1 & attack_ps=$!
python3 "$here/hostile_peer.py" "${ports[0]}" >"$work/attack_coordinator.log" 2>&1 & attack_c=$!
status=0
wait "$attack_ps" || status=1
wait "$attack_c" || status=1
cat "$work/attack_ps.log" "$work/attack_coordinator.log"
[ "$status" = 0 ] || { echo "a node kept a stranger's connection open, or died"; exit 1; }

for name in ps coordinator; do
  pid=${pids[$name]}
  kill -0 "$pid" 2>/dev/null || { echo "the $name died"; exit 1; }
  peak_kib=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  echo "$name: alive, peak RSS $((peak_kib / 1024)) MiB"
  [ "$peak_kib" -lt $((512 << 10)) ] || { echo "the $name's peak RSS is ${peak_kib} KiB"; exit 1; }
done
grep -q "closed the connection from 127.0.0.1:[0-9]*: it announced a message of 4294967280 bytes" \
  "$work/ps.log" || { echo "the PS did not say why it closed the forged connection"; exit 1; }

# A real worker still gets in, and the run completes.
"$recsys" "${common[@]}" --role=worker --task=0 >"$work/worker.log" 2>&1 &
pids[worker]=$!
status=0
if ! timeout 120 tail --pid="$coordinator" -f /dev/null; then
  echo "the coordinator did not finish within 120 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the coordinator failed ($status)"; exit 1; }
grep -q "test AUC" "$work/coordinator.log" || { echo "no test AUC line"; exit 1; }
kill -0 "${pids[ps]}" 2>/dev/null || { echo "the PS died"; exit 1; }
tr '\r' '\n' <"$work/coordinator.log" | grep "test AUC"
echo "net hostile peers: both nodes closed every stranger's connection and served the run"
