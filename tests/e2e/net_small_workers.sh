#!/usr/bin/env bash
# End to end, in real processes on loopback: the model lives only on the parameter servers.
#   1. 2 `tessera ps`, 2 worker processes and the coordinator train and evaluate a recsys model of
#      ~440 MB of parameters (users 200000 x 500, items 20000 x 500; as much again in Adagrad
#      slots, all on the PS). Each worker and the coordinator must stay below a quarter of the
#      parameters' size (their peak RSS, from /proc: the worker prints it, the coordinator's
#      summary records it): neither ever holds a table, its slots, or the data set. The
#      evaluation ran on the workers (closures beyond the training steps).
#   2. A worker started with another --batch_size than the coordinator is refused at join: it
#      exits non-zero naming the difference, and so does the coordinator, which waited for it.
#   net_small_workers.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"

read -r -a ports < <(free_ports 5)
cat >"$work/spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"],
             "ps": ["127.0.0.1:${ports[1]}", "127.0.0.1:${ports[2]}"],
             "worker": ["127.0.0.1:${ports[3]}", "127.0.0.1:${ports[4]}"]}}
JSON
model=(--users=200000 --items=20000 --embedding_dim=500 --hidden=16 --train_examples=20000
       --test_examples=5000 --batch_size=256)
common=(--cluster_spec="$work/spec.json" "${model[@]}" --connect_timeout_s=60)
parameter_bytes=$(( (200000 + 20000) * 500 * 4 ))
quarter_mib=$(( parameter_bytes / 4 / 1048576 ))

start_ps "$tessera" 2
start_workers 2 "$recsys" "${common[@]}"
"$recsys" "${common[@]}" --min_workers=2 --summary="$work/summary.json" \
  >"$work/coordinator.log" 2>&1
wait_workers 2

grep -q "test AUC" "$work/coordinator.log"
python3 - "$work/summary.json" "$quarter_mib" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
quarter = int(sys.argv[2]) * 1048576
steps = summary["steps"]
assert summary["examples"] == 20000, summary["examples"]
# 79 train steps, and the test set's 10 evaluation batches run as closures on the workers.
assert summary["closures_completed"] == steps + 10, (summary["closures_completed"], steps)
assert 0 < summary["peak_rss_bytes"] < quarter, ("coordinator", summary["peak_rss_bytes"], quarter)
print("coordinator peak %.0f MiB (a quarter of the parameters: %.0f MiB)"
      % (summary["peak_rss_bytes"] / 1048576, quarter / 1048576))
PY
for t in 0 1; do
  peak=$(sed -n "s/^worker $t: peak memory \([0-9.]*\) MiB$/\1/p" "$work/worker$t.log")
  [ -n "$peak" ] || { echo "worker $t printed no peak memory"; exit 1; }
  echo "worker $t peak $peak MiB (limit $quarter_mib MiB)"
  awk -v p="$peak" -v q="$quarter_mib" 'BEGIN { exit !(p > 0 && p < q) }'
done
stop_ps 2

# 2. A worker of another job is refused, by name, on both sides.
read -r -a ports < <(free_ports 3)
cat >"$work/spec1.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"], "ps": ["127.0.0.1:${ports[1]}"],
             "worker": ["127.0.0.1:${ports[2]}"]}}
JSON
small=(--cluster_spec="$work/spec1.json" --users=500 --items=50 --train_examples=2000
       --test_examples=500 --connect_timeout_s=20)
"$tessera" ps --port "${ports[1]}" --task 0 >"$work/ps-small.log" 2>&1 &
pids[ps]=$!
"$recsys" "${small[@]}" --batch_size=256 --role=worker --task=0 >"$work/refused.log" 2>&1 &
pids[refused]=$!
if "$recsys" "${small[@]}" --batch_size=512 --worker_wait_s=8 >"$work/waiting.log" 2>&1; then
  echo "the coordinator ran with a worker of another job"; exit 1
fi
grep -q "batch_size: the coordinator's 512, this worker's 256" "$work/waiting.log"
if wait "${pids[refused]}"; then echo "the refused worker exited 0"; exit 1; fi
unset "pids[refused]"
grep -q "batch_size: the coordinator's 512, this worker's 256" "$work/refused.log"
echo "refused as expected: $(grep -o 'worker task 0 was started for another job.*' "$work/refused.log" | head -c 200)"
