#!/usr/bin/env bash
# End to end, in real processes on loopback: DLRM on Criteo-layout files across a networked
# cluster (2 `tessera ps`, 2 worker processes, the coordinator), each process opening the same
# files. The first to open a file writes its line index beside it; the workers read only the
# batches they are handed, so each stays far below the training file's size in memory (its peak
# RSS, from /proc); the evaluation runs on the workers; the export serves.
#   net_dlrm_files.sh DLRM_BINARY TESSERA_BINARY
set -euo pipefail
dlrm=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"

"$tessera" generate criteo --train_examples=400000 --test_examples=5000 --out="$work/criteo" \
  >"$work/generate.log" 2>&1
file_mib=$(( $(stat -c %s "$work/criteo.train.tsv") / 1048576 ))
half_mib=$(( file_mib / 2 ))

read -r -a ports < <(free_ports 5)
cat >"$work/spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"],
             "ps": ["127.0.0.1:${ports[1]}", "127.0.0.1:${ports[2]}"],
             "worker": ["127.0.0.1:${ports[3]}", "127.0.0.1:${ports[4]}"]}}
JSON
common=(--cluster_spec="$work/spec.json" --train_data="$work/criteo.train.tsv"
        --test_data="$work/criteo.test.tsv" --buckets=5000 --embedding_dim=8 --bottom_mlp=16
        --top_mlp=32 --steps=60 --connect_timeout_s=60)
start_ps "$tessera" 2
start_workers 2 "$dlrm" "${common[@]}"
"$dlrm" "${common[@]}" --min_workers=2 --export_dir="$work/model" \
  --summary="$work/summary.json" >"$work/coordinator.log" 2>&1
wait_workers 2

grep -q "dlrm: test logloss" "$work/coordinator.log"
ls "$work/criteo.train.tsv.tsidx" "$work/criteo.test.tsv.tsidx" >/dev/null
python3 - "$work/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["steps"] == 60, summary["steps"]
# 60 training steps and the test set's 10 evaluation batches, all run on the workers.
assert summary["closures_completed"] == 70, summary["closures_completed"]
assert 0.5 < summary["test_auc"] < 1, summary["test_auc"]
PY
for t in 0 1; do
  peak=$(sed -n "s/^worker $t: peak memory \([0-9.]*\) MiB$/\1/p" "$work/worker$t.log")
  [ -n "$peak" ] || { echo "worker $t printed no peak memory"; exit 1; }
  echo "worker $t peak $peak MiB (training file $file_mib MiB; limit $half_mib MiB)"
  awk -v p="$peak" -v q="$half_mib" 'BEGIN { exit !(p > 0 && p < q) }'
done
stop_ps 2

"$tessera" inspect "$work/model" >"$work/inspect.txt"
grep -q "C1_table" "$work/inspect.txt"
echo "dlrm across processes on files: ok"
