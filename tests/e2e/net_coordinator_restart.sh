#!/usr/bin/env bash
# End to end across real processes on loopback: the coordinator dies (kill -9) in the middle of
# training and is started again with --resume, while 2 `tessera ps` and 2 recsys worker processes
# keep running. Checks: each PS kept the dead coordinator's shards for their lease and let the
# new coordinator's shards take their names, the workers waited for the new coordinator and
# joined it, the run continued from the latest checkpoint, every closure of the resumed run
# completed, and the model still reaches its test AUC.
#   net_coordinator_restart.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"
read -r -a ports < <(free_ports 5)
write_spec 2 2
common=(--cluster_spec="$work/spec.json" --users=20000 --items=2000 --train_examples=1000000
        --test_examples=20000 --connect_timeout_s=60)
for t in 0 1; do
  "$tessera" ps --port "${ports[$((1 + t))]}" --task "$t" >"$work/ps$t.log" 2>&1 &
  pids[ps$t]=$!
done
workers=()
for t in 0 1; do
  "$recsys" "${common[@]}" --role=worker --task="$t" >"$work/worker$t.log" 2>&1 &
  workers+=($!)
  pids[worker$t]=$!
done
coordinate() {  # $@: extra flags
  "$recsys" "${common[@]}" --min_workers=2 --checkpoint_dir="$work/ckpt" --checkpoint_every=100 \
    --summary="$work/summary.json" "$@" >>"$work/coordinator.log" 2>&1 &
  coordinator=$!
  pids[coordinator]=$coordinator
}
coordinate

# Kill the coordinator once training is under way (the first checkpoint exists).
for _ in $(seq 600); do ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 && break; sleep 0.1; done
ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 || { echo "no checkpoint within 60 s"; exit 1; }
kill -9 "$coordinator"
wait "$coordinator" 2>/dev/null || true
echo "restart: killed the coordinator after $(ls -d "$work"/ckpt/ckpt-* | wc -l) checkpoint(s)"
for t in 0 1; do
  for _ in $(seq 100); do grep -q "the coordinator that owns .* is gone" "$work/ps$t.log" && break; sleep 0.05; done
  grep -q "the coordinator that owns .* is gone" "$work/ps$t.log" ||
    { echo "ps $t did not notice the dead coordinator"; exit 1; }
done
coordinate --resume

status=0
if ! timeout 180 tail --pid="$coordinator" -f /dev/null; then
  echo "the resumed coordinator did not finish within 180 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the resumed coordinator failed ($status)"; exit 1; }
for t in 0 1; do
  grep -q "of a lost coordinator gives way to a new one's" "$work/ps$t.log" ||
    { echo "ps $t did not let the new coordinator's shards replace the dead one's"; exit 1; }
done
for i in 0 1; do
  wait "${workers[$i]}" || { echo "worker $i failed"; exit 1; }
  grep -q "lost the coordinator" "$work/worker$i.log" ||
    { echo "worker $i did not see the coordinator go"; exit 1; }
  [ "$(grep -c "joined the coordinator" "$work/worker$i.log")" -ge 2 ] ||
    { echo "worker $i did not join the new coordinator"; exit 1; }
done
tr '\r' '\n' <"$work/coordinator.log" | grep -E "resumed|closures|AUC" || true
python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
problems = []
if s["first_step"] <= 0:
    problems.append(f"first_step {s['first_step']}: the run did not continue from a checkpoint")
if s["closures_completed"] != s["closures_scheduled"]:
    problems.append(f"completed {s['closures_completed']} of {s['closures_scheduled']} closures")
if s["test_auc"] < 0.65:  # the simulation reaches 0.67 on this data
    problems.append(f"test AUC {s['test_auc']:.4f} < 0.65")
print(f"coordinator restart: resumed at step {s['first_step']}, "
      f"{s['closures_completed']}/{s['closures_scheduled']} closures, AUC {s['test_auc']:.4f}")
sys.exit("; ".join(problems) if problems else 0)
PY
