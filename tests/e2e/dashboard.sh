#!/usr/bin/env bash
# The dashboard in a real browser, as a user runs it (README, "Watch a run"):
#   - `recsys --dashboard_port=P --dashboard_keep_serving` serves the page while it trains: the
#     API answers "training" with a step that grows, then "finished";
#   - headless Chromium renders the page after the run: the PS shards and the workers are listed,
#     the loss curve has points, the status says finished; its screenshot is kept as an artifact;
#   - /metrics is Prometheus text with the run's and the cluster's figures;
#   - SIGTERM ends the process that kept serving, with exit status 0.
#   dashboard.sh RECSYS ARTIFACT_DIR
set -euo pipefail
recsys=$1
artifacts=$2
source "$(dirname "$0")/net_lib.sh"

fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || { head -c 3000 "$1"; echo; fail "no '$2' in $(basename "$1")"; }; }
command -v chromium >/dev/null || fail "chromium is not installed (scripts/setup.sh installs it)"

port=$(free_ports 1)
# ~50,000 small steps: a few seconds of training to watch.
"$recsys" --users=3000 --items=600 --embedding_dim=16 --train_examples=100000 --epochs=8 \
  --test_examples=5000 --batch_size=16 --eval_every=5000 --ps=2 --workers=2 \
  --dashboard_port="$port" --dashboard_keep_serving --summary="$work/summary.json" \
  >"$work/recsys.log" 2>&1 &
pids[recsys]=$!

# While it trains: the API answers, says "training", and its step grows.
api() { curl -sf --max-time 5 "http://127.0.0.1:$port/api/$1"; }
first_step=-1
saw_growth=0
for _ in $(seq 600); do
  if run=$(api run 2>/dev/null); then
    read -r status step < <(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"], r["step"])' <<<"$run")
    if [ "$status" = training ]; then
      [ "$first_step" -lt 0 ] && first_step=$step
      [ "$step" -gt "$first_step" ] && [ "$first_step" -ge 0 ] && saw_growth=1
    fi
    [ "$status" = finished ] && break
  fi
  kill -0 "${pids[recsys]}" 2>/dev/null || fail "recsys exited while it should keep serving"
  sleep 0.1
done
[ "${status:-}" = finished ] || fail "the run did not finish within 60 s (last status: ${status:-none})"
[ "$saw_growth" = 1 ] || fail "the API never showed a training step that grew (first $first_step)"
has "$work/recsys.log" "dashboard at http://127.0.0.1:$port/"

# The API after the run: the whole run and the cluster.
api run >"$work/run.json"
api cluster >"$work/cluster.json"
python3 - "$work/run.json" "$work/cluster.json" "$work/summary.json" <<'PY'
import json, sys
run, cluster, summary = (json.load(open(p)) for p in sys.argv[1:])
assert run["status"] == "finished", run["status"]
assert run["step"] == summary["global_step"], (run["step"], summary["global_step"])
assert len(run["points"]) >= 2, run["points"]
assert all(p["loss"] is not None and p["examples_per_sec"] > 0 for p in run["points"])
assert len(run["evaluations"]) >= 1, run["evaluations"]
nodes = cluster["ps"]
assert len(nodes) == 2 and all(n["reachable"] for n in nodes), nodes
shards = [s for n in nodes for s in n["shards"]]
assert any(s["name"].startswith("user_embedding") for s in shards), shards
assert all(s["rows"] > 0 and s["bytes"] > 0 and s["version"] > 0 for s in shards), shards
assert any(s["hottest_rows"] for s in shards if "embedding" in s["name"]), shards
slots = cluster["workers"]["slots"]
assert len(slots) == 2 and sum(w["completed"] for w in slots) > 0, slots
assert all(w["last_function"] == "eval_step" or
           (w["last_function"] == "train_step" and w["last_step"] >= 0) for w in slots), slots
PY

# The page in a browser: rendered from the API by its script.
browse() {
  timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --user-data-dir="$work/chromium" --window-size=1400,1150 \
    --virtual-time-budget=4000 "$@" "http://127.0.0.1:$port/" 2>>"$work/chromium.log"
}
browse --dump-dom >"$work/page.html"
python3 - "$work/page.html" <<'PY'
import re, sys
page = open(sys.argv[1]).read()
def count(pattern): return len(re.findall(pattern, page))
assert re.search(r'<body[^>]*data-updates="[1-9]', page), "the script never drew the API's data"
assert count(r'<tr class="shard">') >= 4, count(r'<tr class="shard">')
assert count(r'<tr class="worker">') == 2, count(r'<tr class="worker">')
loss = re.search(r'<svg id="loss-chart"[^>]*data-points="(\d+)"', page)
assert loss and int(loss.group(1)) >= 2, "the loss curve has no points"
assert re.search(r'<svg id="loss-chart".*?<polyline points="[^"]+"', page, re.S)
assert re.search(r'id="status" class="finished"', page), "the status is not 'finished'"
PY
mkdir -p "$artifacts"
browse --screenshot="$artifacts/dashboard.png" >/dev/null
[ "$(stat -c %s "$artifacts/dashboard.png")" -gt 20000 ] || fail "the screenshot is (nearly) empty"

# Prometheus.
curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
has "$work/metrics.txt" "# TYPE tessera_training_global_step gauge"
has "$work/metrics.txt" "tessera_ps_shard_updates_total{"
has "$work/metrics.txt" "tessera_worker_closures_completed_total{worker=\"0\"}"

# Serving until told to stop.
kill -TERM "${pids[recsys]}"
exits_within "${pids[recsys]}" 15 || fail "recsys kept running after SIGTERM"
wait "${pids[recsys]}" || fail "recsys exited with status $? after SIGTERM"
echo "ok: dashboard live while training, rendered in Chromium ($artifacts/dashboard.png)"
