#!/usr/bin/env bash
# End to end across real processes on loopback, with --shard_copies=2 and no --checkpoint_dir: 3
# `tessera ps`, 2 recsys worker processes and the coordinator. While it trains, PS 1 is killed
# with kill -9 (Note [A lost PS's backups take over], coordinator/scheduling/ps_recovery.cc).
# Checks: the run completes every closure without a checkpoint to restore from; the summary
# has one recovery, by promotion, that took at most 0.8 s; every shard and every backup — on
# the surviving PS, and the backups rebuilt after the loss — applied each step's gradients
# exactly once (its optimizer step is the global step: no acknowledged update was lost, none
# applied twice); and the model still reaches its test AUC.
# With "standby" the cluster is 2 PS and a `tessera ps --standby`: the lost PS's shards then
# find no live PS for their new backups but the standby, which the coordinator adopts; once they
# are rebuilt a worker process is killed (and started again) and then PS 0 too, whose backups
# are all on the standby now, and which is started again at its address to hold the new ones:
# two recoveries by promotion.
#   net_shard_backups.sh RECSYS_BINARY TESSERA_BINARY [standby]
set -euo pipefail
recsys=$1
tessera=$2
standby=${3:-}
source "$(dirname "$0")/net_lib.sh"
read -r -a ports < <(free_ports 7)
if [ "$standby" = standby ]; then
  num_ps=2
  python3 - "${ports[@]}" >"$work/spec.json" <<'PY'
import json, sys
p = sys.argv[1:]
a = lambda k: f"127.0.0.1:{p[k]}"
print(json.dumps({"cluster": {"coordinator": [a(0)], "ps": [a(1), a(2)],
                              "worker": [a(3), a(4)], "ps_standby": [a(6)]}}))
PY
  "$tessera" ps --port "${ports[6]}" --standby >"$work/standby.log" 2>&1 &
  pids[standby]=$!
else
  num_ps=3
  write_spec 3 2
fi
# Two losses need training to last long enough for both.
examples=$([ "$standby" = standby ] && echo 3000000 || echo 1000000)
common=(--cluster_spec="$work/spec.json" --users=20000 --items=2000 --train_examples="$examples"
        --test_examples=20000 --connect_timeout_s=60)
for t in $(seq 0 $((num_ps - 1))); do
  "$tessera" ps --port "${ports[$((1 + t))]}" --task "$t" >"$work/ps$t.log" 2>&1 &
  pids[ps$t]=$!
done
start_worker() { "$recsys" "${common[@]}" --role=worker --task="$1" >>"$work/worker$1.log" 2>&1 &
                 pids[worker$1]=$!; }
for t in 0 1; do start_worker "$t"; done
"$recsys" "${common[@]}" --shard_copies=2 --min_workers=2 --summary="$work/summary.json" \
  >"$work/coordinator.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator

# Once training is under way (both workers joined, half a second more), PS 1 dies. The progress
# line comes only every 5 s, and a quiet machine trains the 3-PS run in less.
for t in 0 1; do
  for _ in $(seq 600); do grep -q "joined the coordinator" "$work/worker$t.log" && break
                          sleep 0.05; done
done
sleep 0.5
kill -0 "$coordinator" 2>/dev/null || { echo "training ended before PS 1 could be killed"; exit 1; }
kill -9 "${pids[ps1]}"; wait "${pids[ps1]}" 2>/dev/null || true
echo "killed ps 1"
recoveries=1
if [ "$standby" = standby ]; then
  for _ in $(seq 200); do grep -q "rebuilt" "$work/coordinator.log" && break; sleep 0.05; done
  grep -q "rebuilt" "$work/coordinator.log" || { echo "no backups rebuilt on the standby"; exit 1; }
  kill -9 "${pids[worker0]}"; wait "${pids[worker0]}" 2>/dev/null || true
  echo "killed worker 0"
  sleep 0.5; start_worker 0
  sleep 1
  kill -9 "${pids[ps0]}"; wait "${pids[ps0]}" 2>/dev/null || true
  echo "killed ps 0"
  sleep 1
  "$tessera" ps --port "${ports[1]}" --task 0 >>"$work/ps0.log" 2>&1 &
  pids[ps0]=$!
  recoveries=2
fi

status=0
if ! timeout 180 tail --pid="$coordinator" -f /dev/null; then
  echo "the coordinator did not finish within 180 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
if [ "$status" != 0 ]; then
  echo "the coordinator failed ($status)"; exit 1
fi
tr '\r' '\n' <"$work/coordinator.log" | grep -E "took over|backup|closures|AUC" || true
# Every backup a primary lost, and when (expected only at the kills; any other is struck and
# rebuilt by the coordinator, Note [A lost backup is replaced]).
cat "$work"/ps*.log "$work"/standby.log 2>/dev/null | grep "lost its backup" | sort || true
python3 - "$work/summary.json" "$standby" "$recoveries" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
problems = []
if s["closures_completed"] != s["closures_scheduled"]:
    problems.append(f"completed {s['closures_completed']} of {s['closures_scheduled']} closures")
recoveries = s["ps_recoveries"]
expected = [1, 0][:int(sys.argv[3])]
if [r["ps_task"] for r in recoveries] != expected or not all(r["promoted"] for r in recoveries):
    problems.append(f"ps_recoveries: {recoveries} (expected ps {expected}, by promotion)")
slow = [r["recovery_seconds"] for r in recoveries if r["recovery_seconds"] > 0.8]
if slow:
    problems.append(f"backups took over in {slow} s > 0.8 s")
# Every copy of every shard (primaries and backups) applied each step's gradients once.
names = {shard["name"] for shard in s["shards"]}
copies = {name: [x for x in s["shards"] if x["name"] == name] for name in names}
on_ps1 = [x for x in s["shards"] if x["ps_task"] == 1]
if sys.argv[2] == "standby" and not on_ps1:
    problems.append("the standby adopted as ps 1 holds no backup")
if sys.argv[2] != "standby" and on_ps1:
    problems.append("the lost ps 1 still lists shards")
wrong = [(x["name"], x["ps_task"], x["step"]) for x in s["shards"] if x["step"] != s["global_step"]]
if wrong:
    problems.append(f"shard steps {wrong} != global step {s['global_step']}")
without_backup = [name for name, c in copies.items() if len(c) != 2]
if without_backup:
    problems.append(f"shards without exactly one backup after the rebuild: {without_backup}")
if s["test_auc"] < 0.66:
    problems.append(f"test AUC {s['test_auc']:.4f} < 0.66")
print(f"net shard backups: {s['closures_completed']}/{s['closures_scheduled']} closures, "
      f"recoveries {recoveries}, {len(s['shards'])} shard copies at step {s['global_step']}, "
      f"{s['duplicate_updates']} repeated updates dropped, AUC {s['test_auc']:.4f}")
sys.exit("; ".join(problems) if problems else 0)
PY

# Stopped one at a time with SIGTERM, as a supervisor stops them, every PS exits promptly (a forward
# link to a backups' node once outlived its node, and the process waited for the peer to go).
for name in "${!pids[@]}"; do
  case $name in
    ps*|standby)
      kill -0 "${pids[$name]}" 2>/dev/null || continue
      kill -TERM "${pids[$name]}"
      exits_within "${pids[$name]}" 10 || { echo "$name did not exit within 10 s of SIGTERM"; exit 1; }
      echo "$name exited on SIGTERM"
      ;;
  esac
done
