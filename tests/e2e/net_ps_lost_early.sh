#!/usr/bin/env bash
# End to end across real processes on loopback: a PS is killed (kill -9) before the first
# checkpoint, so the run cannot go on. Twice: with --checkpoint_dir (nothing in it to restore the
# PS from yet) and without. Checks: the coordinator exits non-zero within 15 s of the kill (not
# after --connect_timeout_s, 60 s here) with an error naming the lost PS, and both worker
# processes exit non-zero within that time too, saying the run failed (rather than joining
# again until the coordinator is gone and then waiting for another).
#   net_ps_lost_early.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"
bound=15

run_round() {  # $1: round name; the rest: extra coordinator flags
  local round=$1
  shift
  local -a ports
  read -r -a ports < <(free_ports 5)
  cat >"$work/$round.spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"],
             "ps": ["127.0.0.1:${ports[1]}", "127.0.0.1:${ports[2]}"],
             "worker": ["127.0.0.1:${ports[3]}", "127.0.0.1:${ports[4]}"]}}
JSON
  local common=(--cluster_spec="$work/$round.spec.json" --users=20000 --items=2000
                --train_examples=2000000 --test_examples=20000 --connect_timeout_s=60)
  for t in 0 1; do
    "$tessera" ps --port "${ports[$((1 + t))]}" --task "$t" >"$work/$round.ps$t.log" 2>&1 &
    pids[$round.ps$t]=$!
  done
  local -a workers=()
  for t in 0 1; do
    "$recsys" "${common[@]}" --role=worker --task="$t" >"$work/$round.worker$t.log" 2>&1 &
    workers+=($!)
    pids[$round.worker$t]=$!
  done
  "$recsys" "${common[@]}" --min_workers=2 "$@" >"$work/$round.coordinator.log" 2>&1 &
  local coordinator=$!
  pids[$round.coordinator]=$coordinator
  for _ in $(seq 300); do
    grep -q "2 of 2 workers connected" "$work/$round.coordinator.log" && break; sleep 0.1
  done
  grep -q "2 of 2 workers connected" "$work/$round.coordinator.log" ||
    { echo "$round: the workers did not join within 30 s"; exit 1; }
  sleep 1  # training is under way
  kill -0 "$coordinator" || { echo "$round: the run ended before the PS was killed"; exit 1; }
  kill -9 "${pids[$round.ps1]}"
  local killed_at
  killed_at=$(date +%s.%N)
  local status=0
  exits_within "$coordinator" "$bound" ||
    { echo "$round: the coordinator was still running $bound s after the kill"; exit 1; }
  wait "$coordinator" || status=$?
  local took
  took=$(python3 -c "import time; print(f'{time.time() - $killed_at:.2f}')")

  [ "$status" != 0 ] || { echo "$round: the coordinator exited 0 without its PS"; exit 1; }
  grep -q "parameter server ps 1 (127.0.0.1:${ports[2]})\|parameter server ps 1 is unavailable" \
    "$work/$round.coordinator.log" || { echo "$round: the error does not name ps 1"; exit 1; }
  # Where the recovery failed for want of a backup and a checkpoint directory, it says what the
  # coordinator saw of the PS, not just "gone".
  if grep -q "could not be restored (it is gone" "$work/$round.coordinator.log"; then
    grep -q "it is gone (its connection closed and its address does not answer" \
      "$work/$round.coordinator.log" || { echo "$round: the error does not say how ps 1 went"; exit 1; }
  fi
  for i in 0 1; do
    local left
    left=$(python3 -c "import time; print(max(0.1, $bound - (time.time() - $killed_at)))")
    exits_within "${workers[$i]}" "$left" ||
      { echo "$round: worker $i was still running $bound s after the kill"; exit 1; }
    status=0
    wait "${workers[$i]}" || status=$?
    [ "$status" != 0 ] || { echo "$round: worker $i exited 0 from a failed run"; exit 1; }
    grep -q "the run failed: parameter server ps 1" "$work/$round.worker$i.log" ||
      { echo "$round: worker $i did not say the run failed"; exit 1; }
  done
  local workers_took
  workers_took=$(python3 -c "import time; print(f'{time.time() - $killed_at:.2f}')")
  kill -9 "${pids[$round.ps0]}" 2>/dev/null || true
  echo "$round: the coordinator failed $took s after the kill, both workers within $workers_took s:"
  tail -n 1 "$work/$round.coordinator.log" | cut -c 1-200  # the error, printed at exit
}

run_round with_checkpoint_dir --checkpoint_dir="$work/ckpt" --checkpoint_every=100000
run_round without_checkpoint_dir
