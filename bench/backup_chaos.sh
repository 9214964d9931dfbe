#!/usr/bin/env bash
# backup_chaos.sh: issue 17's chaos figure across processes with --shard_copies=2. 2 `tessera ps`
# and a `tessera ps --standby`, 3 recsys worker processes and the coordinator, on loopback. While
# it trains, a random worker process is killed with kill -9 every KILL_EVERY seconds and started
# again half a second later; PS 1 is killed once training is under way, and PS 0 once the lost
# PS's backups have been rebuilt on the standby (PS 0 is then started again at its address).
# The same run without faults follows, as the replay to compare with.
#
# Checks (each a field of the JSON):
#   - every closure of the chaos run completed;
#   - each PS loss was recovered by promotion (no checkpoint: the run has no --checkpoint_dir),
#     training going on within 0.8 s;
#   - every copy of every shard (primaries and backups, rebuilt ones too) is at the global step:
#     each applied every step's gradients once (none lost, none applied twice);
#   - the replay: the fault-free run scheduled the same closures and reached the same global
#     step, and the chaos run's test AUC is within 0.01 of it.
#
#   bench/backup_chaos.sh BUILD_DIR [KILL_EVERY] [-- extra recsys flags for every process]
#   bench/backup_chaos.sh build 1.5 -- --train_examples=4000000
# (Defaults: --users=20000 --items=2000 --train_examples=3000000 --test_examples=20000.)
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [KILL_EVERY] [-- recsys flags]" >&2
  exit 2
fi
source "$(dirname "$0")/lib.sh"
split_args "$@"
use_build "${POSITIONAL[0]}"
KILL_EVERY=${POSITIONAL[1]:-1.5}
echo "command: $0 $BUILD $KILL_EVERY ${EXTRA[*]:+-- ${EXTRA[*]}}"
WORK=$(mktemp -d /tmp/backup_chaos.XXXXXX)
declare -A PROCS=()
cleanup() {
  for pid in "${PROCS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  # Only these: a bare `wait` would also wait for the stderr filter below, which ends with us.
  for pid in "${PROCS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# One run in $WORK/$1 (chaos or replay): the cluster, the coordinator, and with chaos the kills.
run() {
  local dir=$WORK/$1 chaos=$1
  mkdir -p "$dir"
  local ports
  read -r -a ports < <(free_ports 7)
  python3 - "${ports[@]}" >"$dir/spec.json" <<'PY'
import json, sys
a = lambda p: f"127.0.0.1:{p}"
p = sys.argv[1:]
print(json.dumps({"cluster": {"coordinator": [a(p[0])], "ps": [a(p[1]), a(p[2])],
                              "worker": [a(p[3]), a(p[4]), a(p[5])], "ps_standby": [a(p[6])]}}))
PY
  local common=(--cluster_spec="$dir/spec.json" --connect_timeout_s=60 --users=20000 --items=2000
                --train_examples=3000000 --test_examples=20000 "${EXTRA[@]}")
  "$TESSERA" ps --port "${ports[6]}" --standby >"$dir/standby.log" 2>&1 & PROCS[standby]=$!
  for t in 0 1; do
    "$TESSERA" ps --port "${ports[$((1 + t))]}" --task "$t" >"$dir/ps$t.log" 2>&1 &
    PROCS[ps$t]=$!
  done
  start_worker() {
    "$RECSYS" "${common[@]}" --role=worker --task="$1" >>"$dir/worker$1.log" 2>&1 &
    PROCS[worker$1]=$!
  }
  for t in 0 1 2; do start_worker "$t"; done
  "$RECSYS" "${common[@]}" --shard_copies=2 --min_workers=3 --summary="$dir/summary.json" \
    >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  PROCS[coordinator]=$coordinator
  local worker_kills=0
  if [[ $chaos == chaos ]]; then
    for _ in $(seq 1200); do
      grep -q "recsys: step [1-9][0-9][0-9]" "$dir/coordinator.log" && break
      sleep 0.05
    done
    # Random worker kills until the coordinator is done, beside the two PS losses below.
    (
      while kill -0 "$coordinator" 2>/dev/null; do
        sleep "$KILL_EVERY"
        t=$((RANDOM % 3))
        pkill -9 -f -- "--cluster_spec=$dir/spec.json.* --role=worker --task=$t" 2>/dev/null || true
        echo "killed worker $t" >>"$dir/kills.log"
        sleep 0.5
        kill -0 "$coordinator" 2>/dev/null || break
        "$RECSYS" "${common[@]}" --role=worker --task="$t" >>"$dir/worker$t.log" 2>&1 &
      done
    ) &
    PROCS[killer]=$!
    kill -9 "${PROCS[ps1]}"
    echo "killed ps 1" >>"$dir/kills.log"
    for _ in $(seq 600); do grep -q "rebuilt" "$dir/coordinator.log" && break; sleep 0.05; done
    sleep 1
    kill -9 "${PROCS[ps0]}"
    echo "killed ps 0" >>"$dir/kills.log"
    sleep 1
    "$TESSERA" ps --port "${ports[1]}" --task 0 >>"$dir/ps0.log" 2>&1 & PROCS[ps0]=$!
  fi
  local status=0
  timeout 600 tail --pid="$coordinator" -f /dev/null || status=124
  wait "$coordinator" || status=$?
  cleanup
  pkill -9 -f -- "--cluster_spec=$dir/spec.json" 2>/dev/null || true  # restarted workers
  PROCS=()
  if [[ $status -ne 0 ]]; then
    echo "$0: the $chaos run's coordinator failed ($status); see $dir" >&2
    tr '\r' '\n' <"$dir/coordinator.log" | grep -v "^recsys: step" | tail -8 >&2
    exit 1
  fi
  echo "$chaos: $(grep -c "killed worker" "$dir/kills.log" 2>/dev/null || echo 0) worker kills," \
    "$(grep -c "killed ps" "$dir/kills.log" 2>/dev/null || echo 0) PS kills"
}

# kill -9's job reports ("line N: PID Killed ...") are the point here, not news.
run chaos 2> >(grep -v " Killed " >&2)
run replay 2> >(grep -v " Killed " >&2)

python3 - "$WORK/chaos/summary.json" "$WORK/replay/summary.json" "$WORK" <<'PY'
import json, sys
chaos, replay = (json.load(open(p)) for p in sys.argv[1:3])
recoveries = chaos["ps_recoveries"]
wrong = [(x["name"], x["ps_task"], x["step"]) for x in chaos["shards"]
         if x["step"] != chaos["global_step"]]
names = {x["name"] for x in chaos["shards"]}
copies = {n: sum(1 for x in chaos["shards"] if x["name"] == n) for n in names}
out = {
    "closures_scheduled": chaos["closures_scheduled"],
    "closures_completed": chaos["closures_completed"],
    "closures_retried": chaos["closures_retried"],
    "worker_failures": chaos["worker_failures"],
    "repeated_updates_dropped": chaos["duplicate_updates"],
    "ps_recoveries": [{"ps_task": r["ps_task"], "promoted": r["promoted"],
                       "seconds": r["recovery_seconds"]} for r in recoveries],
    "global_step": chaos["global_step"],
    "shard_copies": len(chaos["shards"]),
    "shard_copies_off_global_step": wrong,
    "replay_closures_scheduled": replay["closures_scheduled"],
    "replay_global_step": replay["global_step"],
    "test_auc": chaos["test_auc"], "replay_test_auc": replay["test_auc"],
    "logs": sys.argv[3],
}
checks = {
    "every_closure_completed": chaos["closures_completed"] == chaos["closures_scheduled"],
    "two_ps_losses_by_promotion": len(recoveries) == 2 and all(r["promoted"] for r in recoveries),
    "resumed_within_0_8s": bool(recoveries) and
                           all(r["recovery_seconds"] <= 0.8 for r in recoveries),
    "every_copy_at_global_step": not wrong and all(c == 2 for c in copies.values()),
    "replay_matches": replay["closures_scheduled"] == chaos["closures_scheduled"] and
                      replay["global_step"] == chaos["global_step"] and
                      abs(replay["test_auc"] - chaos["test_auc"]) <= 0.01,
}
out.update(checks)
out["target_met"] = all(checks.values())
print(f"chaos: {out['closures_completed']}/{out['closures_scheduled']} closures "
      f"({out['closures_retried']} retried after {out['worker_failures']} worker losses, "
      f"{out['repeated_updates_dropped']} repeated updates dropped); PS losses "
      f"{[(r['ps_task'], round(r['seconds'], 3)) for r in out['ps_recoveries']]}; "
      f"{out['shard_copies']} shard copies, {len(wrong)} off the global step "
      f"{out['global_step']}; AUC {out['test_auc']:.4f} (replay {out['replay_test_auc']:.4f}); "
      f"target {'met' if out['target_met'] else 'MISSED'}")
print(json.dumps(out))
PY
