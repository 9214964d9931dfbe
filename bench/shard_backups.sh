#!/usr/bin/env bash
# shard_backups.sh: what --shard_copies=2 (a backup of every shard, Note [Shard backups] in
# actors/ps/shard_actor.h) costs training. recsys without and with backups, in the simulation
# and across processes (2 `tessera ps`, 2 workers, the coordinator with --closures_per_worker=4,
# free loopback ports), interleaved in each round; examples_per_sec of the training loop from
# each run's --summary JSON. Reports each round's ratios and the medians; the last line is one
# JSON object (the issue's target: >= 0.7x in both).
#
#   bench/shard_backups.sh BUILD_DIR [ROUNDS] [-- extra recsys flags for every run]
#   bench/shard_backups.sh build 3 -- --train_examples=2000000
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [ROUNDS] [-- recsys flags]" >&2
  exit 2
fi
source "$(dirname "$0")/lib.sh"
split_args "$@"
use_build "${POSITIONAL[0]}"
ROUNDS=${POSITIONAL[1]:-3}
echo "command: $0 $BUILD $ROUNDS ${EXTRA[*]:+-- ${EXTRA[*]}}"
WORK=$(mktemp -d /tmp/shard_backups.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT


run_sim() {  # $1: summary file, $2: shard copies
  "$RECSYS" --summary="$1" --shard_copies="$2" "${EXTRA[@]}" > "${1%.json}.log" 2>&1
}

run_net() {  # $1: summary file, $2: shard copies
  run_recsys_net "$1" --closures_per_worker=4 --shard_copies="$2"
}

SIM1=() SIM2=() NET1=() NET2=()
for ((r = 0; r < ROUNDS; r++)); do
  run_sim "$WORK/sim1_$r.json" 1; SIM1+=("$(eps "$WORK/sim1_$r.json")")
  run_sim "$WORK/sim2_$r.json" 2; SIM2+=("$(eps "$WORK/sim2_$r.json")")
  run_net "$WORK/net1_$r.json" 1; NET1+=("$(eps "$WORK/net1_$r.json")")
  run_net "$WORK/net2_$r.json" 2; NET2+=("$(eps "$WORK/net2_$r.json")")
  printf 'round %d: sim %.0f -> %.0f (%.3fx), net %.0f -> %.0f (%.3fx) examples/s\n' "$r" \
    "${SIM1[-1]}" "${SIM2[-1]}" "$(python3 -c "print(${SIM2[-1]}/${SIM1[-1]})")" \
    "${NET1[-1]}" "${NET2[-1]}" "$(python3 -c "print(${NET2[-1]}/${NET1[-1]})")"
done

python3 - "${SIM1[*]}" "${SIM2[*]}" "${NET1[*]}" "${NET2[*]}" "$WORK" <<'EOF'
import json, statistics, sys
sim1, sim2, net1, net2 = ([float(x) for x in a.split()] for a in sys.argv[1:5])
m = statistics.median
sim_ratio = m([b / a for a, b in zip(sim1, sim2)])
net_ratio = m([b / a for a, b in zip(net1, net2)])
out = {"sim_ratio": sim_ratio, "net_ratio": net_ratio, "target": 0.7,
       "target_met": sim_ratio >= 0.7 and net_ratio >= 0.7,
       "sim_rounds": [sim1, sim2], "net_rounds": [net1, net2], "logs": sys.argv[5]}
print("median ratio with / without backups: sim %.3fx, net %.3fx; target >= 0.7x: %s" %
      (sim_ratio, net_ratio, "met" if out["target_met"] else "MISSED"))
print(json.dumps(out))
EOF
