#!/usr/bin/env bash
# End to end for the models of the model language: DLRM on Criteo-layout files (written by
# `tessera generate criteo`, one of them gzip'd) and the two-tower model with its multi-hot
# history each train with checkpoints, resume from the latest one on another layout, export, and
# serve predictions — `tessera predict` and `tessera serve` agree, raw categorical strings and
# id lists included.
#   recommenders_checkpoint_serve.sh DLRM_BINARY TWO_TOWER_BINARY TESSERA_BINARY
set -euo pipefail
dlrm=$1
two_tower=$2
tessera=$3
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Served probabilities equal `tessera predict`'s (to 1e-5) for the instances in $1 (JSON lines).
check_served() {
  local model=$1 instances=$2
  "$tessera" predict --model "$model" --input "$instances" >"$work/predict.jsonl"
  [ "$(wc -l <"$work/predict.jsonl")" = "$(wc -l <"$instances")" ]
  "$tessera" serve --model "$model" --port 0 >"$work/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    grep -q "http://127.0.0.1:" "$work/serve.log" && break
    sleep 0.1
  done
  local url
  url=$(grep -o -m1 "http://127.0.0.1:[0-9]*/v1/models/[a-z_]*" "$work/serve.log")
  [ -n "$url" ] || { echo "the server did not start:"; cat "$work/serve.log"; exit 1; }
  local body
  body="{\"instances\": [$(paste -sd, "$instances")]}"
  curl -sf -X POST "$url:predict" -d "$body" >"$work/served.json"
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  local want got
  want=$(grep -o '"probability":\[[-0-9.e]*\]' "$work/predict.jsonl" | grep -o '[-0-9.e]*\]' | tr -d ']')
  got=$(grep -o '"probability":\[[-0-9.e]*\]' "$work/served.json" | grep -o '[-0-9.e]*\]' | tr -d ']')
  [ -n "$want" ] || { echo "no predictions"; cat "$work/predict.jsonl"; exit 1; }
  paste <(echo "$want") <(echo "$got") | awk '{ d = $1 - $2; if (d < 0) d = -d;
    if (d > 1e-5 || NF != 2) { print "prediction mismatch: " $0; bad = 1 } } END { exit bad }'
}

# --- DLRM on generated Criteo-layout files --------------------------------------------------
"$tessera" generate criteo --train_examples=20000 --test_examples=4000 --out="$work/criteo" \
  >"$work/generate.log" 2>&1
gzip -k "$work/criteo.train.tsv"
small=(--test_data="$work/criteo.test.tsv" --buckets=2000 --embedding_dim=8 --bottom_mlp=16
       --top_mlp=32 --batch_size=256)
"$dlrm" "${small[@]}" --train_data="$work/criteo.train.tsv.gz" --steps=40 --ps=2 \
  --partitioner=fixed:2 --checkpoint_dir="$work/dlrm_ckpt" --checkpoint_every=20 \
  >"$work/dlrm_first.log" 2>&1
ls "$work/dlrm_ckpt/ckpt-40/manifest.tsr" >/dev/null
# The plain file holds the same lines as the gzip'd one: the resume reads it on 3 PS, 3 shards.
"$dlrm" "${small[@]}" --train_data="$work/criteo.train.tsv" --ps=3 --partitioner=fixed:3 \
  --checkpoint_dir="$work/dlrm_ckpt" --resume --export_dir="$work/dlrm_model" \
  --summary="$work/dlrm_summary.json" >"$work/dlrm_second.log" 2>&1
grep -q "resumed from $work/dlrm_ckpt/ckpt-40 at step 40" "$work/dlrm_second.log"
grep -q '"test_auc"' "$work/dlrm_summary.json"
"$tessera" inspect "$work/dlrm_model" >"$work/inspect.txt"
grep -q "C26_table" "$work/inspect.txt"
# Two instances: the dense values as a list, the categorical values as their raw strings (the
# model hashes them as training did), one with missing (empty) fields.
head -2 "$work/criteo.test.tsv" | awk -F'\t' '{
  printf "{\"dense\": ["
  for (k = 2; k <= 14; ++k) printf "%s%s", (k > 2 ? ", " : ""), ($k == "" ? 0 : $k)
  printf "]"
  for (k = 15; k <= 40; ++k) printf ", \"C%d\": \"%s\"", k - 14, $k
  print "}" }' >"$work/dlrm_instances.jsonl"
check_served "$work/dlrm_model" "$work/dlrm_instances.jsonl"
# A malformed line is named with its file and line; --skip_bad_lines counts it and goes on.
head -100 "$work/criteo.test.tsv" >"$work/bad.tsv"
printf '1\t2\tnot-a-number\n' >>"$work/bad.tsv"
if "$dlrm" "${small[@]}" --train_data="$work/bad.tsv" --steps=2 >"$work/bad.log" 2>&1; then
  echo "a malformed line was not refused"; exit 1
fi
grep -q "bad.tsv:101" "$work/bad.log" || { cat "$work/bad.log"; exit 1; }
"$dlrm" "${small[@]}" --train_data="$work/bad.tsv" --steps=2 --skip_bad_lines \
  >"$work/skip.log" 2>&1
grep -q "skipped 1 malformed line" "$work/skip.log"
echo "dlrm: generate -> train (gzip) -> checkpoint -> resume on 3 PS -> export -> serve: ok"

# --- The two-tower model with its multi-hot history -------------------------------------------
tt=(--users=2000 --items=500 --user_buckets=1000 --train_examples=40000 --test_examples=5000)
"$two_tower" "${tt[@]}" --steps=40 --ps=2 --partitioner=fixed:4 \
  --checkpoint_dir="$work/tt_ckpt" --checkpoint_every=20 >"$work/tt_first.log" 2>&1
"$two_tower" "${tt[@]}" --ps=1 --partitioner=fixed:3 --checkpoint_dir="$work/tt_ckpt" --resume \
  --export_dir="$work/tt_model" >"$work/tt_second.log" 2>&1
grep -q "resumed from $work/tt_ckpt/ckpt-40 at step 40" "$work/tt_second.log"
printf '%s\n' '{"user": 7, "item": 3, "history": [3, 17, 250]}' \
  '{"user": "someone new", "item": 3, "history": {"ids": [3, 17], "weights": [2, 0.5]}}' \
  '{"user": 1999, "item": 0, "history": []}' >"$work/tt_instances.jsonl"
check_served "$work/tt_model" "$work/tt_instances.jsonl"
echo "two_tower: train -> checkpoint -> resume on 1 PS -> export -> serve: ok"
