#!/usr/bin/env bash
# checkpoint_training.sh: what checkpointing costs training. recsys in the simulation without
# checkpoints against the same run checkpointing every --checkpoint_every steps in the background
# (the default, Note [Checkpoints without pausing] in coordinator/checkpoint/save_restore.cc), interleaved.
#
#   bench/checkpoint_training.sh BUILD_DIR [ROUNDS] [EVERY] [-- extra recsys flags for every run]
#   bench/checkpoint_training.sh build 5 200 -- --train_examples=4000000
#
# Each round runs `recsys` then `recsys --checkpoint_dir=... --checkpoint_every=EVERY` and reads
# examples_per_sec (the training loop only), checkpoint_pause_seconds (training waiting for cuts)
# and checkpoint_wait_seconds (waiting for a previous checkpoint's files) from each run's
# --summary JSON. Reports each round's ratio and the median; the last line is one JSON object.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [ROUNDS] [EVERY] [-- recsys flags]" >&2
  exit 2
fi
source "$(dirname "$0")/lib.sh"
split_args "$@"
BUILD=$(cd "${POSITIONAL[0]}" && pwd)
ROUNDS=${POSITIONAL[1]:-5}
EVERY=${POSITIONAL[2]:-200}
RECSYS=$BUILD/examples/recsys
[[ -x $RECSYS ]] || { echo "$0: $RECSYS is not built" >&2; exit 1; }
echo "command: $0 $BUILD $ROUNDS $EVERY ${EXTRA[*]:+-- ${EXTRA[*]}}"
WORK=$(mktemp -d /tmp/checkpoint_training.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

for ((round = 1; round <= ROUNDS; ++round)); do
  for mode in plain checkpointing; do
    flags=()
    if [[ $mode == checkpointing ]]; then
      rm -rf "$WORK/ckpt"
      flags=(--checkpoint_dir="$WORK/ckpt" --checkpoint_every="$EVERY")
    fi
    "$RECSYS" "${flags[@]}" "${EXTRA[@]}" --summary="$WORK/$mode.$round.json" \
      >"$WORK/$mode.$round.log" 2>&1 || { cat "$WORK/$mode.$round.log"; exit 1; }
  done
  python3 - "$WORK" "$round" <<'PY'
import json, sys
work, r = sys.argv[1], sys.argv[2]
plain = json.load(open(f"{work}/plain.{r}.json"))
ckpt = json.load(open(f"{work}/checkpointing.{r}.json"))
print(f"round {r}: plain {plain['examples_per_sec']:.0f} examples/s, checkpointing "
      f"{ckpt['examples_per_sec']:.0f} examples/s (cuts {1e3 * ckpt['checkpoint_pause_seconds']:.0f} ms, "
      f"waits {1e3 * ckpt['checkpoint_wait_seconds']:.0f} ms of {ckpt['wall_seconds']:.2f} s): "
      f"{ckpt['examples_per_sec'] / plain['examples_per_sec']:.2f}x", flush=True)
PY
done
python3 - "$WORK" "$ROUNDS" "$EVERY" <<'PY'
import json, statistics, sys
work, rounds, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = []
for r in range(1, rounds + 1):
    plain = json.load(open(f"{work}/plain.{r}.json"))
    ckpt = json.load(open(f"{work}/checkpointing.{r}.json"))
    rows.append({"plain_examples_per_sec": round(plain["examples_per_sec"]),
                 "checkpointing_examples_per_sec": round(ckpt["examples_per_sec"]),
                 "ratio": round(ckpt["examples_per_sec"] / plain["examples_per_sec"], 3),
                 "cut_seconds": round(ckpt["checkpoint_pause_seconds"], 4),
                 "wait_seconds": round(ckpt["checkpoint_wait_seconds"], 4),
                 "wall_seconds": round(ckpt["wall_seconds"], 3)})
print(json.dumps({"benchmark": "checkpoint_training", "checkpoint_every": every,
                  "median_ratio": statistics.median(r["ratio"] for r in rows), "target": 0.9,
                  "rounds": rows}))
PY
