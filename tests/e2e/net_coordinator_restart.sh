#!/usr/bin/env bash
# End to end across real processes on loopback: the coordinator dies (kill -9) in the middle of
# training and is started again with --resume, while 2 `tessera ps` and 2 recsys worker processes
# keep running. Checks: each PS kept the dead coordinator's shards for their lease and handed
# them to the new coordinator of the same run, which re-adopted every one as it was (nothing read
# from a checkpoint) and continued from their step, at or past the latest checkpoint's; the
# workers waited for the new coordinator and joined it; every closure of the resumed run
# completed; every trained shard's optimizer step equals the global step (the closures in flight
# at the kill applied once, neither lost nor doubled); and the model still reaches its test AUC.
# MODE "shard_backups": the same with --shard_copies=2 (backups re-adopted with their primaries).
# MODE "ps_restarted": PS 1 is also killed and started again (empty) while no coordinator runs,
# so the shards are not the run's any more: the new coordinator drops those PS 0 kept, creates
# every shard afresh and continues from the latest checkpoint instead.
#   net_coordinator_restart.sh RECSYS_BINARY TESSERA_BINARY [MODE]
set -euo pipefail
recsys=$1
tessera=$2
mode=${3:-}
extra=()
[ "$mode" = shard_backups ] && extra=(--shard_copies=2)
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
    --summary="$work/summary.json" "${extra[@]}" "$@" >>"$work/coordinator.log" 2>&1 &
  coordinator=$!
  pids[coordinator]=$coordinator
}
coordinate

# Kill the coordinator once training is under way (the first checkpoint exists).
for _ in $(seq 600); do ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 && break; sleep 0.1; done
ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 || { echo "no checkpoint within 60 s"; exit 1; }
kill -9 "$coordinator"
wait "$coordinator" 2>/dev/null || true
# The latest complete checkpoint's step.
latest=$(ls "$work"/ckpt/ckpt-*/manifest.tsr | sed 's|.*ckpt-\([0-9]*\)/manifest.tsr|\1|' |
         sort -n | tail -1)
echo "restart: killed the coordinator after $(ls -d "$work"/ckpt/ckpt-* | wc -l) checkpoint(s)"
for t in 0 1; do
  for _ in $(seq 100); do grep -q "the coordinator that owns .* is gone" "$work/ps$t.log" && break; sleep 0.05; done
  grep -q "the coordinator that owns .* is gone" "$work/ps$t.log" ||
    { echo "ps $t did not notice the dead coordinator"; exit 1; }
done
if [ "$mode" = ps_restarted ]; then
  kill -9 "${pids[ps1]}"; wait "${pids[ps1]}" 2>/dev/null || true
  "$tessera" ps --port "${ports[2]}" --task 1 >>"$work/ps1.log" 2>&1 &
  pids[ps1]=$!
fi
coordinate --resume

status=0
if ! timeout 180 tail --pid="$coordinator" -f /dev/null; then
  echo "the resumed coordinator did not finish within 180 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the resumed coordinator failed ($status)"; exit 1; }
grep -q "a coordinator of the same run took over .* shard(s) of its lost predecessor" \
  "$work/ps0.log" || { echo "ps 0 did not hand the run's shards to the new coordinator"; exit 1; }
if [ "$mode" = ps_restarted ]; then
  grep -q "resumed from .*ckpt" "$work/coordinator.log" ||
    { echo "the coordinator did not go back to the checkpoint with PS 1's shards gone"; exit 1; }
  grep -q "are not this run's layout (ps 1 holds no " "$work/coordinator.log" ||
    { echo "the coordinator did not say why it dropped the shards"; exit 1; }
else
  grep -q "a coordinator of the same run took over .* shard(s) of its lost predecessor" \
    "$work/ps1.log" || { echo "ps 1 did not hand the run's shards to the new coordinator"; exit 1; }
  grep -q "resumed from .*ckpt" "$work/coordinator.log" &&
    { echo "the resumed coordinator read a checkpoint instead of re-adopting the shards"; exit 1; }
fi
for i in 0 1; do
  wait "${workers[$i]}" || { echo "worker $i failed"; exit 1; }
  grep -q "lost the coordinator" "$work/worker$i.log" ||
    { echo "worker $i did not see the coordinator go"; exit 1; }
  [ "$(grep -c "joined the coordinator" "$work/worker$i.log")" -ge 2 ] ||
    { echo "worker $i did not join the new coordinator"; exit 1; }
done
tr '\r' '\n' <"$work/coordinator.log" | grep -E "resumed|closures|AUC" || true
python3 - "$work/summary.json" "${latest:-0}" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
latest = int(sys.argv[2])
problems = []
wanted = 0 if sys.argv[3] == "ps_restarted" else len(s["shards"])
if s["readopted_shards"] != wanted or not s["shards"]:
    problems.append(f"re-adopted {s['readopted_shards']} of {len(s['shards'])} shards, "
                    f"not {wanted}")
if s["first_step"] < max(latest, 1):
    problems.append(f"first_step {s['first_step']}: behind the latest checkpoint's {latest}")
# Exactly once across the restart: the closures in flight at the kill ran again under their old
# ids, dropped by the shards they had reached; every trained shard steps once per global step.
for shard in s["shards"]:
    if shard["step"] and shard["step"] != s["global_step"]:
        problems.append(f"{shard['name']} at step {shard['step']}, global {s['global_step']}")
if s["closures_completed"] != s["closures_scheduled"]:
    problems.append(f"completed {s['closures_completed']} of {s['closures_scheduled']} closures")
if s["test_auc"] < 0.65:  # the simulation reaches 0.67 on this data
    problems.append(f"test AUC {s['test_auc']:.4f} < 0.65")
print(f"coordinator restart: re-adopted {s['readopted_shards']} shards, resumed at step "
      f"{s['first_step']} (latest checkpoint {latest}), {s['duplicate_updates']} re-run updates "
      f"dropped, "
      f"{s['closures_completed']}/{s['closures_scheduled']} closures, AUC {s['test_auc']:.4f}")
sys.exit("; ".join(problems) if problems else 0)
PY
