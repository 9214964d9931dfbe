#!/usr/bin/env bash
# End to end across real processes on loopback: 2 `tessera ps`, 3 recsys worker processes and
# the recsys coordinator, on free ports chosen now. While it trains, a chaos loop kill -9's a
# random worker process several times (each comes back after a short delay, as a preempted
# machine would) and one PS process once (restarted at its address; the coordinator restores its
# shards from the latest checkpoint). Checks: every scheduled closure completed, the PS recovery
# is in the summary, every shard PS 0 holds applied each step's gradients exactly once (its
# optimizer step is the global step, however often closures ran again), and the model still
# reaches its test AUC.
# With "standby", the cluster has a `tessera ps --standby` and the killed PS is not restarted:
# the coordinator restores its shards onto the standby instead.
#   net_chaos.sh RECSYS_BINARY TESSERA_BINARY [standby]
set -euo pipefail
recsys=$1
tessera=$2
standby=${3:-}
source "$(dirname "$0")/net_lib.sh"
read -r -a ports < <(free_ports 7)
cat >"$work/spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"],
             "ps": ["127.0.0.1:${ports[1]}", "127.0.0.1:${ports[2]}"],
             "worker": ["127.0.0.1:${ports[3]}", "127.0.0.1:${ports[4]}", "127.0.0.1:${ports[5]}"]
             $([ "$standby" = standby ] && echo ", \"ps_standby\": [\"127.0.0.1:${ports[6]}\"]")}}
JSON
data=(--users=20000 --items=2000 --train_examples=2000000 --test_examples=20000)
common=(--cluster_spec="$work/spec.json" "${data[@]}" --connect_timeout_s=60)

start_ps() { "$tessera" ps --port "${ports[$((1 + $1))]}" --task "$1" >>"$work/ps$1.log" 2>&1 &
             pids[ps$1]=$!; }
declare -A logs=()  # the log of each worker task's current process
start_worker() { logs[$1]="$work/worker$1.$(date +%s%N).log"
                 "$recsys" "${common[@]}" --role=worker --task="$1" >"${logs[$1]}" 2>&1 &
                 pids[worker$1]=$!; }
start_ps 0
start_ps 1
if [ "$standby" = standby ]; then
  "$tessera" ps --port "${ports[6]}" --standby >"$work/standby.log" 2>&1 &
  pids[standby]=$!
fi
for t in 0 1 2; do start_worker "$t"; done
"$recsys" "${common[@]}" --min_workers=3 --checkpoint_dir="$work/ckpt" --checkpoint_every=50 \
  --summary="$work/summary.json" >"$work/coordinator.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator

alive() { kill -0 "$coordinator" 2>/dev/null; }
# Whether worker $1's current process is a member now: its latest membership line says joined.
member() { grep -E "joined the coordinator|joining again" "${logs[$1]}" | tail -n 1 |
           grep -q "joined the coordinator"; }
lost() { grep -c "worker $1 lost" "$work/coordinator.log" || true; }
# Chaos once training is under way (the first checkpoint exists): four kill -9's of a joined
# worker process (each noticed by the coordinator within 2 s, and restarted 0.3 s later), and
# one of PS 1 (restarted after 1 s).
for _ in $(seq 600); do ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 && break; sleep 0.1; done
worker_kills=0
for round in 1 2 3 4 5; do
  alive || break
  if [ "$round" = 2 ]; then
    kill -9 "${pids[ps1]}"; wait "${pids[ps1]}" 2>/dev/null || true; echo "chaos: killed ps 1"
    [ "$standby" = standby ] || { sleep 1; start_ps 1; }
    for _ in $(seq 300); do grep -q "restored on" "$work/coordinator.log" && break; sleep 0.1; done
  else
    t=$((RANDOM % 3))
    was_member=false
    for _ in $(seq 200); do member "$t" && { was_member=true; break; }; sleep 0.05; done
    before=$(lost "$t")
    if ! kill -9 "${pids[worker$t]}"; then
      alive && { echo "worker $t had exited by itself"; exit 1; }
      break  # training is over: the coordinator sent its workers home
    fi
    worker_kills=$((worker_kills + 1))
    killed_at=$(date +%s.%N)
    for _ in $(seq 40); do [ "$(lost "$t")" -gt "$before" ] && break; sleep 0.05; done
    noticed=$(python3 -c "import time; print(f'{time.time() - $killed_at:.2f}')")
    if [ "$(lost "$t")" -le "$before" ] && alive && $was_member; then
      echo "the coordinator did not notice the death of worker $t within 2 s"; exit 1
    fi
    echo "chaos: killed worker $t; noticed after ${noticed} s"
    sleep 0.3; start_worker "$t"
  fi
  sleep 0.7
done

status=0
if ! timeout 180 tail --pid="$coordinator" -f /dev/null; then
  echo "the coordinator did not finish within 180 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
if [ "$status" != 0 ]; then
  echo "the coordinator failed ($status)"; exit 1
fi
tr '\r' '\n' <"$work/coordinator.log" | grep -E "restored|closures|AUC" || true
python3 - "$work/summary.json" "$worker_kills" "127.0.0.1:${ports[$([ "$standby" = standby ] && echo 6 || echo 2)]}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
kills = int(sys.argv[2])
replacement = sys.argv[3]
problems = []
if s["closures_completed"] != s["closures_scheduled"]:
    problems.append(f"completed {s['closures_completed']} of {s['closures_scheduled']} closures")
if kills == 0 or s["worker_failures"] < 1:
    problems.append(f"{kills} worker kills, {s['worker_failures']} failures seen")
if len(s["ps_recoveries"]) != 1 or s["ps_recoveries"][0]["node"] != replacement:
    problems.append(f"ps_recoveries: {s['ps_recoveries']} (expected one, onto {replacement})")
# PS 0 was never lost: exactly-once updates leave each of its shards at the global step.
ps0 = [shard for shard in s["shards"] if shard["ps_task"] == 0]
if not ps0 or any(shard["step"] != s["global_step"] for shard in ps0):
    problems.append(f"PS 0's shard steps {[(x['name'], x['step']) for x in ps0]} "
                    f"!= global step {s['global_step']}")
if s["test_auc"] < 0.66:  # the simulation reaches 0.678 on this data
    problems.append(f"test AUC {s['test_auc']:.4f} < 0.66")
print(f"net chaos: {s['closures_completed']}/{s['closures_scheduled']} closures, "
      f"{s['worker_failures']} worker failures, recoveries {s['ps_recoveries']}, "
      f"{s['duplicate_updates']} repeated updates dropped, "
      f"AUC {s['test_auc']:.4f}")
sys.exit("; ".join(problems) if problems else 0)
PY
