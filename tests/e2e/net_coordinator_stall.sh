#!/usr/bin/env bash
# End to end across real processes on loopback: the coordinator is frozen (SIGSTOP) for 5 s in
# the middle of training, longer than the 2 s connection timeout, then let go (SIGCONT), while
# 2 `tessera ps` and 2 recsys worker processes keep running. Every peer closes its connection to
# the silent coordinator: the PS nodes keep its shards for their lease, the workers wait for it.
# Checks: each PS kept the shards and gave them back; the coordinator re-adopted both PS tasks
# (no checkpoint reloaded, no step lost); every closure completed; every shard's optimizer step
# is the global step (no update lost or applied twice); the model still reaches its test AUC.
# MODE "no_checkpoint_dir": the same with no --checkpoint_dir (re-adoption needs none).
# MODE "shard_backups": 3 PS, --shard_copies=2 and no --checkpoint_dir; PS 2 is killed (kill -9) 3 s
# into the stall, after the others have closed their connections to the silent coordinator, so
# its loss reaches the coordinator only once it runs again: PS 2's shards are promoted on PS 0
# and 1, and the primaries there whose backups PS 2 held (which hold their acknowledgements
# meanwhile, Note [A lost backup is struck before the primary acknowledges alone]) are given new
# backups. Also checked: every shard has exactly one backup at the end, and no copy of a shard
# is off the global step.
#   net_coordinator_stall.sh RECSYS_BINARY TESSERA_BINARY [MODE]
set -euo pipefail
recsys=$1
tessera=$2
mode=${3:-}
source "$(dirname "$0")/net_lib.sh"
num_ps=$([ "$mode" = shard_backups ] && echo 3 || echo 2)
read -r -a ports < <(free_ports $((3 + num_ps)))
write_spec "$num_ps" 2
common=(--cluster_spec="$work/spec.json" --users=20000 --items=2000 --train_examples=1500000
        --test_examples=20000 --connect_timeout_s=60)
start_ps "$tessera" "$num_ps"
start_workers 2 "$recsys" "${common[@]}"
checkpointing=(--checkpoint_dir="$work/ckpt" --checkpoint_every=100)
case "$mode" in
  no_checkpoint_dir) checkpointing=() ;;
  shard_backups) checkpointing=(--shard_copies=2) ;;
esac
"$recsys" "${common[@]}" --min_workers=2 "${checkpointing[@]}" \
  --summary="$work/summary.json" >"$work/coordinator.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator

# Freeze the coordinator once training is under way (the first checkpoint exists; without
# checkpoints, both workers joined and half a second more).
if [ "$mode" != "" ]; then
  for t in 0 1; do
    for _ in $(seq 600); do grep -q "joined the coordinator" "$work/worker$t.log" && break; sleep 0.1; done
  done
  sleep 0.5
else
  for _ in $(seq 600); do ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 && break; sleep 0.1; done
  ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 || { echo "no checkpoint within 60 s"; exit 1; }
fi
kill -STOP "$coordinator"
echo "stall: stopped the coordinator"
if [ "$mode" = shard_backups ]; then
  sleep 3
  kill -9 "${pids[ps2]}"; wait "${pids[ps2]}" 2>/dev/null || true
  echo "stall: killed ps 2"
  sleep 2
else
  sleep 5
fi
for t in 0 1; do
  grep -q "the coordinator that owns .* is gone" "$work/ps$t.log" ||
    { kill -CONT "$coordinator"; echo "ps $t did not notice the silent coordinator"; exit 1; }
done
kill -CONT "$coordinator"
echo "stall: let the coordinator go on after 5 s"

status=0
if ! timeout 180 tail --pid="$coordinator" -f /dev/null; then
  echo "the coordinator did not finish within 180 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the coordinator failed ($status)"; exit 1; }
wait_workers 2
for t in 0 1; do
  grep -q "the coordinator is back: it reclaimed" "$work/ps$t.log" ||
    { echo "ps $t was not reclaimed"; exit 1; }
  if grep -q "dropped .* of a coordinator that is gone" "$work/ps$t.log"; then
    echo "ps $t dropped the shards"; exit 1
  fi
done
tr '\r' '\n' <"$work/coordinator.log" | grep -E "re-adopted|restored|closures|AUC" || true
cat "$work"/ps*.log | grep "lost its backup" | sort || true
python3 - "$work/summary.json" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
backed_up = sys.argv[2] == "shard_backups"
problems = []
if s["closures_completed"] != s["closures_scheduled"]:
    problems.append(f"completed {s['closures_completed']} of {s['closures_scheduled']} closures")
recoveries = s["ps_recoveries"]
readopted = sorted(r["ps_task"] for r in recoveries if r["readopted"])
promoted = sorted(r["ps_task"] for r in recoveries if r["promoted"])
if readopted != [0, 1] or promoted != ([2] if backed_up else []) or \
        len(recoveries) != len(readopted) + len(promoted):
    problems.append(f"ps_recoveries: {recoveries} (expected ps 0 and 1 re-adopted"
                    f"{', ps 2 by promotion' if backed_up else ''})")
if any(r["checkpoint"] for r in recoveries):
    problems.append("a checkpoint was reloaded")
if backed_up:
    names = {shard["name"] for shard in s["shards"]}
    copies = {n: [x["ps_task"] for x in s["shards"] if x["name"] == n] for n in names}
    wrong = {n: tasks for n, tasks in copies.items() if len(tasks) != 2 or 2 in tasks}
    if wrong:
        problems.append(f"shards not on exactly two live PS at the end: {wrong}")
steps = sorted({shard["step"] for shard in s["shards"]})
if steps != [s["global_step"]]:
    problems.append(f"shard steps {steps} != global step {s['global_step']}")
if s["test_auc"] < 0.65:  # the simulation reaches 0.67 on this data
    problems.append(f"test AUC {s['test_auc']:.4f} < 0.65")
print(f"coordinator stall: {s['closures_completed']}/{s['closures_scheduled']} closures, "
      f"recovered in {[round(r['recovery_seconds'], 3) for r in recoveries]} s, "
      f"shard steps {steps}, {s['duplicate_updates']} repeated updates dropped, "
      f"AUC {s['test_auc']:.4f}")
sys.exit("; ".join(problems) if problems else 0)
PY
