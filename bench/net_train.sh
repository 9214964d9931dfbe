#!/usr/bin/env bash
# net_train.sh: recsys end to end, the single-process simulation against the networked cluster
# (issue 7's target: networked >= 0.5x the simulation's examples/s), interleaved on one machine.
#
#   bench/net_train.sh BUILD_DIR [ROUNDS] [-- extra recsys flags for every run]
#   bench/net_train.sh build 3 -- --train_examples=200000
#
# Each round runs, in this order:
#   sim    recsys --summary=...                           (2 PS, 2 workers, one process)
#   net    2 `tessera ps` + 2 `recsys --role=worker` + the coordinator, fresh processes, free
#          loopback ports picked at run time, --closures_per_worker=1
#   net2   the same with --closures_per_worker=4 (CPW2 in the environment overrides it)
# and reads examples_per_sec from each run's --summary JSON (training loop only: not data
# generation, connecting, waiting for workers or evaluation). Figures are medians over rounds;
# the last line is one JSON object.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [ROUNDS] [-- recsys flags]" >&2
  exit 2
fi
source "$(dirname "$0")/lib.sh"
split_args "$@"
use_build "${POSITIONAL[0]}"
ROUNDS=${POSITIONAL[1]:-2}
CPW2=${CPW2:-4}
echo "command: $0 $BUILD $ROUNDS ${EXTRA[*]:+-- ${EXTRA[*]}}"

WORK=$(mktemp -d /tmp/net_train.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT


run_sim() {  # $1: summary file
  "$RECSYS" --summary="$1" "${EXTRA[@]}" > "${1%.json}.log" 2>&1
}

run_net() {  # $1: summary file, $2: closures per worker
  run_recsys_net "$1" --closures_per_worker="$2"
}

SIM=() NET=() NET2=()
for ((r = 0; r < ROUNDS; r++)); do
  run_sim "$WORK/sim_$r.json"
  SIM+=("$(eps "$WORK/sim_$r.json")")
  run_net "$WORK/net_$r.json" 1
  NET+=("$(eps "$WORK/net_$r.json")")
  run_net "$WORK/net2_$r.json" "$CPW2"
  NET2+=("$(eps "$WORK/net2_$r.json")")
  printf 'round %d: sim %.0f, net %.0f (%.3fx), net closures_per_worker=%d %.0f (%.3fx) examples/s\n' \
    "$r" "${SIM[-1]}" "${NET[-1]}" "$(python3 -c "print(${NET[-1]}/${SIM[-1]})")" \
    "$CPW2" "${NET2[-1]}" "$(python3 -c "print(${NET2[-1]}/${SIM[-1]})")"
done

python3 - "${SIM[*]}" "${NET[*]}" "${NET2[*]}" "$WORK" <<'EOF'
import json, statistics, sys
sim, net, net2 = ([float(x) for x in a.split()] for a in sys.argv[1:4])
m = statistics.median
out = {"sim_examples_per_sec": m(sim), "net_examples_per_sec": m(net),
       "net2_examples_per_sec": m(net2), "net_vs_sim": m(net) / m(sim),
       "net2_vs_sim": m(net2) / m(sim), "target_net_vs_sim": 0.5,
       "target_met": m(net) / m(sim) >= 0.5,
       "sim_rounds": sim, "net_rounds": net, "net2_rounds": net2, "logs": sys.argv[4]}
print("median: sim %.0f, net %.0f examples/s (%.3fx), net with more closures per worker %.0f (%.3fx); "
      "target net >= 0.5x sim: %s" % (out["sim_examples_per_sec"], out["net_examples_per_sec"],
      out["net_vs_sim"], out["net2_examples_per_sec"], out["net2_vs_sim"],
      "met" if out["target_met"] else "MISSED"))
print(json.dumps(out))
EOF
