#!/usr/bin/env bash
# mirrored_fashion_mnist.sh: Fashion-MNIST trained synchronously by the mirrored strategy (2
# replicas in the simulation, each a batch of 128: global batch 256) against the single-thread
# local trainer (batch 128), the same --epochs, interleaved on one machine.
#
#   bench/mirrored_fashion_mnist.sh BUILD_DIR [ROUNDS] [-- extra fashion_mnist flags for every run]
#   bench/mirrored_fashion_mnist.sh build 3 -- --epochs=10
#
# Each round runs `fashion_mnist --mode=local` then `fashion_mnist --strategy=mirrored` and reads
# examples_per_sec (the training loop only) and test_accuracy from each run's --summary JSON.
# Reports each round's ratio mirrored / local and the median; the last line is one JSON object.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [ROUNDS] [-- fashion_mnist flags]" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
ROUNDS=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
[[ "${1:-}" == "--" ]] && shift
EXTRA=("$@")
FASHION=$BUILD/examples/fashion_mnist
[[ -x $FASHION ]] || { echo "$0: $FASHION is not built" >&2; exit 1; }
echo "command: $0 $BUILD $ROUNDS ${EXTRA[*]:+-- ${EXTRA[*]}}"
WORK=$(mktemp -d /tmp/mirrored_fashion_mnist.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

for ((round = 1; round <= ROUNDS; ++round)); do
  for mode in local mirrored; do
    if [[ $mode == local ]]; then flags=(--mode=local); else flags=(--strategy=mirrored); fi
    "$FASHION" "${flags[@]}" "${EXTRA[@]}" --summary="$WORK/$mode.$round.json" \
      >"$WORK/$mode.$round.log" 2>&1 || { cat "$WORK/$mode.$round.log"; exit 1; }
  done
  python3 - "$WORK" "$round" <<'PY'
import json, sys
work, r = sys.argv[1], sys.argv[2]
local = json.load(open(f"{work}/local.{r}.json"))
mirrored = json.load(open(f"{work}/mirrored.{r}.json"))
print(f"round {r}: local {local['examples_per_sec']:.0f} examples/s (accuracy "
      f"{local['test_accuracy']:.4f}), mirrored {mirrored['examples_per_sec']:.0f} examples/s "
      f"(accuracy {mirrored['test_accuracy']:.4f}): {mirrored['examples_per_sec'] / local['examples_per_sec']:.2f}x",
      flush=True)
PY
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for r in range(1, rounds + 1):
    local = json.load(open(f"{work}/local.{r}.json"))
    mirrored = json.load(open(f"{work}/mirrored.{r}.json"))
    rows.append({"local_examples_per_sec": round(local["examples_per_sec"]),
                 "mirrored_examples_per_sec": round(mirrored["examples_per_sec"]),
                 "ratio": round(mirrored["examples_per_sec"] / local["examples_per_sec"], 3),
                 "local_accuracy": local["test_accuracy"],
                 "mirrored_accuracy": mirrored["test_accuracy"]})
print(json.dumps({"benchmark": "mirrored_fashion_mnist", "replicas": mirrored["replicas"],
                  "global_batch_size": mirrored["global_batch_size"],
                  "median_ratio": statistics.median(r["ratio"] for r in rows),
                  "rounds": rows}))
PY
