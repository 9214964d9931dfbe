#!/usr/bin/env bash
# End to end across real processes on loopback, configured the way TensorFlow jobs are: every
# process gets nothing but the TF_CONFIG environment variable (the cluster, with TF's "chief" for
# the coordinator, and its own task) — no --cluster_spec, --role, --task or --port. 2 `tessera ps`
# (task type "ps"), 2 recsys workers ("worker") and the recsys coordinator ("chief") train a
# small recsys to the end. Checks: each PS listens on the port of its TF_CONFIG address, every
# process exits 0, every closure completed, the summary's mode is "net" (a value --mode takes)
# with the cluster's sizes, and the model reaches its test AUC. Then the flags still override:
# a PS given --task 0 over TF_CONFIG's task 1 takes task 0's port.
#   net_tf_config.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"
read -r -a ports < <(free_ports 5)
cluster="{\"chief\": [\"127.0.0.1:${ports[0]}\"],
          \"ps\": [\"127.0.0.1:${ports[1]}\", \"127.0.0.1:${ports[2]}\"],
          \"worker\": [\"127.0.0.1:${ports[3]}\", \"127.0.0.1:${ports[4]}\"]}"
tf_config() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }
data=(--users=20000 --items=2000 --train_examples=400000 --test_examples=20000
      --connect_timeout_s=60)

for t in 0 1; do
  TF_CONFIG=$(tf_config ps "$t") "$tessera" ps --threads 1 >"$work/ps$t.log" 2>&1 &
  pids[ps$t]=$!
done
workers=()
for t in 0 1; do
  TF_CONFIG=$(tf_config worker "$t") "$recsys" "${data[@]}" >"$work/worker$t.log" 2>&1 &
  workers+=($!)
  pids[worker$t]=$!
done
TF_CONFIG=$(tf_config chief 0) "$recsys" "${data[@]}" --min_workers=2 \
  --summary="$work/summary.json" >"$work/coordinator.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator

status=0
if ! exits_within "$coordinator" 150; then
  echo "the coordinator did not finish within 150 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the coordinator failed ($status)"; exit 1; }
for t in 0 1; do
  exits_within "${workers[$t]}" 30 || { echo "worker $t did not exit after the run"; exit 1; }
  wait "${workers[$t]}" || { echo "worker $t failed"; exit 1; }
  grep -q "joined the coordinator" "$work/worker$t.log" ||
    { echo "worker $t never joined the coordinator"; exit 1; }
  grep -q "ps $t listening on 127.0.0.1:${ports[$((1 + t))]} " "$work/ps$t.log" ||
    { echo "ps $t is not listening on its TF_CONFIG port ${ports[$((1 + t))]}"; exit 1; }
done
for t in 0 1; do
  kill "${pids[ps$t]}"; wait "${pids[ps$t]}" 2>/dev/null || true; unset "pids[ps$t]"
done
tr '\r' '\n' <"$work/coordinator.log" | grep -E "networked cluster|closures|AUC" || true
python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
problems = []
if s["mode"] != "net":
    problems.append(f"mode {s['mode']!r}, not 'net'")
if (s["ps"], s["workers"]) != (2, 2):
    problems.append(f"{s['ps']} PS and {s['workers']} workers, not TF_CONFIG's 2 and 2")
if s["closures_completed"] != s["closures_scheduled"] or s["closures_scheduled"] == 0:
    problems.append(f"completed {s['closures_completed']} of {s['closures_scheduled']} closures")
if s["test_auc"] < 0.6:  # the simulation reaches 0.64 on this data
    problems.append(f"test AUC {s['test_auc']:.4f} < 0.6")
print(f"TF_CONFIG cluster: mode {s['mode']}, {s['closures_completed']}/{s['closures_scheduled']} "
      f"closures, AUC {s['test_auc']:.4f}")
sys.exit("; ".join(problems) if problems else 0)
PY

# The flags override TF_CONFIG: --task 0 over its task 1 listens on task 0's address.
TF_CONFIG=$(tf_config ps 1) "$tessera" ps --task 0 --threads 1 >"$work/override.log" 2>&1 &
pids[override]=$!
for _ in $(seq 100); do grep -q "listening on" "$work/override.log" && break; sleep 0.05; done
grep -q "ps 0 listening on 127.0.0.1:${ports[1]} " "$work/override.log" ||
  { echo "--task 0 did not override TF_CONFIG's task 1"; cat "$work/override.log"; exit 1; }
kill "${pids[override]}"; wait "${pids[override]}" 2>/dev/null || true; unset "pids[override]"
echo "TF_CONFIG: every process configured by it alone; --task overrides it"
