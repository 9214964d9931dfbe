#!/usr/bin/env bash
# End to end: the recsys driver trains with checkpoints, resumes from the latest one on another
# layout (3 PS instead of 2, 5 shards instead of 4), exports the model, and `tessera serve`
# answers predictions over HTTP on loopback that match `tessera predict` on the same instances.
#   recsys_checkpoint_serve.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
small=(--users=2000 --items=500 --train_examples=40000 --test_examples=5000)

"$recsys" "${small[@]}" --steps=40 --ps=2 --partitioner=fixed:4 \
  --checkpoint_dir="$work/ckpt" --checkpoint_every=20 >"$work/first.log" 2>&1
ls "$work/ckpt/ckpt-40/manifest.tsr" >/dev/null

# A new run (no --resume) over those checkpoints is refused, naming the directory and the flag,
# and leaves them as they are: the resume below still continues the first run from step 40.
before=$(ls -R "$work/ckpt" | md5sum)
if "$recsys" "${small[@]}" --steps=10 --ps=2 --checkpoint_dir="$work/ckpt" \
  >"$work/refused.log" 2>&1; then
  echo "a new run over existing checkpoints was not refused"; exit 1
fi
grep -q "$work/ckpt already holds 2 checkpoint(s)" "$work/refused.log"
grep -q -- "--overwrite_checkpoints" "$work/refused.log"
[ "$(ls -R "$work/ckpt" | md5sum)" = "$before" ] || { echo "the refused run changed $work/ckpt"; exit 1; }

"$recsys" "${small[@]}" --ps=3 --partitioner=fixed:5 --checkpoint_dir="$work/ckpt" --resume \
  --export_dir="$work/model" --summary="$work/summary.json" >"$work/second.log" 2>&1
grep -q "resumed from $work/ckpt/ckpt-40 at step 40" "$work/second.log"
grep -q '"first_step": 40' "$work/summary.json"
# (Into a file, not `| grep -q`: grep leaving at its match would end the writer with SIGPIPE,
# which pipefail reports as a failure.)
"$tessera" inspect "$work/ckpt/ckpt-79" >"$work/inspect.txt"
grep -q "user_embedding" "$work/inspect.txt"

printf '%s\n' '{"user": 7, "item": 3}' '{"user": 1999, "item": 0}' >"$work/instances.jsonl"
"$tessera" predict --model "$work/model" --input "$work/instances.jsonl" >"$work/predict.jsonl"

"$tessera" serve --model "$work/model" --port 0 >"$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  grep -q "http://127.0.0.1:" "$work/serve.log" && break
  sleep 0.1
done
url=$(grep -o -m1 "http://127.0.0.1:[0-9]*/v1/models/[a-z_]*" "$work/serve.log")
[ -n "$url" ] || { echo "the server did not start:"; cat "$work/serve.log"; exit 1; }
grep -q AVAILABLE <<<"$(curl -sf "$url")"
served=$(curl -sf -X POST "$url:predict" \
  -d '{"instances": [{"user": 7, "item": 3}, {"user": 1999, "item": 0}]}')
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url:predict" -d '{"instances": [{"user": 7}]}')
[ "$code" = 400 ] || { echo "a bad instance got HTTP $code"; exit 1; }

# The served probabilities equal `tessera predict`'s (to 1e-5).
want=$(grep -o '"probability":\[[-0-9.e]*\]' "$work/predict.jsonl" | grep -o '[-0-9.e]*\]' | tr -d ']')
got=$(echo "$served" | grep -o '"probability":\[[-0-9.e]*\]' | grep -o '[-0-9.e]*\]' | tr -d ']')
paste <(echo "$want") <(echo "$got") | awk '{ d = $1 - $2; if (d < 0) d = -d;
  if (d > 1e-5 || NF != 2) { print "prediction mismatch: " $0; bad = 1 } } END { exit bad }'
echo "recsys checkpoint -> resume on 3 PS -> export -> serve: ok"
