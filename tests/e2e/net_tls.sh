#!/usr/bin/env bash
# End to end across real processes on loopback, with mutual TLS made exactly as docs/tls.md
# says (openssl: a cluster CA, one key and certificate per node): 2 `tessera ps`, 2 recsys
# workers and the coordinator train a short run with a checkpoint directory and shard backups
# (each PS node forwarding to the other's backups over its own TLS connection). Checks: the whole
# run, workers included, is over within 30 s (a TLS run used to sit ~110 s after training,
# its connections dropped), the final AUC line and the final checkpoint appear, no PS
# dropped the shards of a coordinator that was "gone", and every shard's backup is at the
# global step with its primary. Then the mirrored strategy over TLS trains
# with its ring on the TLS connections (no plain ring link). Then a TLS-vs-plain mismatch, both ways,
# fails within a few seconds with a message saying which side speaks what.
#   net_tls.sh RECSYS_BINARY TESSERA_BINARY
set -euo pipefail
recsys=$1
tessera=$2
source "$(dirname "$0")/net_lib.sh"

# -- Certificates, as docs/tls.md makes them ------------------------------------------------
cd "$work"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -days 1 -subj '/CN=Tessera cluster CA' -keyout ca.key -out ca.pem 2>/dev/null
cat > node.ext <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
EOF
for node in ps0 ps1 coordinator worker0 worker1; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=$node" -keyout $node.key -out $node.csr 2>/dev/null
  openssl x509 -req -in $node.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -days 1 -extfile node.ext -out $node.pem 2>/dev/null
done
cd - >/dev/null
tls() { echo --tls_cert "$work/$1.pem" --tls_key "$work/$1.key" --tls_ca "$work/ca.pem"; }

read -r -a ports < <(free_ports 8)
cat >"$work/spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[0]}"],
             "ps": ["127.0.0.1:${ports[1]}", "127.0.0.1:${ports[2]}"],
             "worker": ["127.0.0.1:${ports[3]}", "127.0.0.1:${ports[4]}"]}}
JSON
common=(--cluster_spec="$work/spec.json" --users=20000 --items=2000 --train_examples=200000
        --test_examples=20000 --connect_timeout_s=30)

# -- A short TLS run ---------------------------------------------------------------------------
for t in 0 1; do
  # shellcheck disable=SC2046
  "$tessera" ps --port "${ports[$((1 + t))]}" --task "$t" $(tls ps$t) >"$work/ps$t.log" 2>&1 &
  pids[ps$t]=$!
done
start=$(date +%s.%N)
workers=()
for t in 0 1; do
  # shellcheck disable=SC2046
  "$recsys" "${common[@]}" --role=worker --task="$t" $(tls worker$t) >"$work/worker$t.log" 2>&1 &
  workers+=($!)
  pids[worker$t]=$!
done
# shellcheck disable=SC2046
"$recsys" "${common[@]}" --min_workers=2 --checkpoint_dir="$work/ckpt" --shard_copies=2 \
  --summary="$work/summary.json" $(tls coordinator) >"$work/coordinator.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator
status=0
if ! exits_within "$coordinator" 30; then
  echo "the TLS run was not over within 30 s"; kill -9 "$coordinator"; status=124
fi
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the coordinator failed ($status)"; exit 1; }
for i in 0 1; do
  left=$(python3 -c "import time; print(max(0.1, 30 - (time.time() - $start)))")
  exits_within "${workers[$i]}" "$left" ||
    { echo "worker $i was still running 30 s after the start"; exit 1; }
  wait "${workers[$i]}" || { echo "worker $i failed"; exit 1; }
done
took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
tr '\r' '\n' <"$work/coordinator.log" | grep "test AUC" || { echo "no test AUC line"; exit 1; }
ls "$work"/ckpt/ckpt-*/manifest.tsr >/dev/null 2>&1 || { echo "no final checkpoint"; exit 1; }
for t in 0 1; do
  if grep -q "of a coordinator that is gone" "$work/ps$t.log"; then
    echo "ps $t lost the coordinator's connection:"; grep "is gone" "$work/ps$t.log"; exit 1
  fi
done
python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
copies = {}
for shard in s["shards"]:
    copies.setdefault(shard["name"], []).append((shard["ps_task"], shard["step"]))
problems = [f"{name}: {held}" for name, held in copies.items()
            if len(held) != 2 or len({task for task, _ in held}) != 2 or
            any(step not in (0, s["global_step"]) for _, step in held)]
if len(copies) < 6 or problems:
    sys.exit(f"backed up over TLS, expected a primary and a backup at the global step "
             f"{s['global_step']} for each shard: {problems or copies}")
PY
echo "net tls: 2 PS (each backing up the other), 2 workers and the coordinator over mutual TLS, all done in $took s"

# -- The mirrored strategy over TLS: the ring stays on the encrypted actor connections ------------
mirrored=(--cluster_spec="$work/spec.json" --strategy=mirrored --users=2000 --items=200
          --train_examples=20000 --test_examples=2000 --connect_timeout_s=30)
for t in 0 1; do
  # shellcheck disable=SC2046
  "$recsys" "${mirrored[@]}" --role=worker --task="$t" $(tls worker$t) >"$work/mworker$t.log" 2>&1 &
  pids[worker$t]=$!
done
# shellcheck disable=SC2046
"$recsys" "${mirrored[@]}" $(tls coordinator) >"$work/mcoordinator.log" 2>&1 ||
  { echo "the mirrored TLS run failed"; cat "$work/mcoordinator.log"; exit 1; }
wait_workers 2
if grep -q "ring link" "$work"/mworker*.log; then
  echo "a ring link (plain TCP) was opened under TLS:"; grep "ring link" "$work"/mworker*.log; exit 1
fi
tr '\r' '\n' <"$work/mcoordinator.log" | grep -q "test AUC" || { echo "no mirrored test AUC"; exit 1; }
echo "net tls: the mirrored ring over TLS, no ring link"

# -- TLS against plain TCP, both ways ----------------------------------------------------------
# $1: the log; the rest: the command. It must fail within 5 s, saying TLS and plain TCP.
mismatch() {
  local log=$1
  shift
  local begin status=0
  begin=$(date +%s.%N)
  timeout 20 "$@" >"$log" 2>&1 || status=$?
  local seconds
  seconds=$(python3 -c "import time; print(f'{time.time() - $begin:.1f}')")
  [ "$status" != 0 ] || { echo "a mismatched node connected: $*"; exit 1; }
  [ "$status" != 124 ] || { echo "a mismatched node still tried after 20 s: $*"; exit 1; }
  python3 -c "import sys; sys.exit(float('$seconds') >= 5)" ||
    { echo "a mismatch took $seconds s to fail"; cat "$log"; exit 1; }
  grep -q "TLS.*plain TCP\|plain TCP.*TLS" "$log" ||
    { echo "a mismatch failed without saying TLS vs plain:"; cat "$log"; exit 1; }
  echo "mismatch failed in $seconds s: $(grep -o "cannot connect.*" "$log" | head -n 1)"
}
cat >"$work/plain_spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[5]}"],
             "ps": ["127.0.0.1:${ports[6]}"], "worker": ["127.0.0.1:${ports[7]}"]}}
JSON
"$tessera" ps --port "${ports[6]}" --task 0 >"$work/plain_ps.log" 2>&1 &
pids[plain_ps]=$!
for _ in $(seq 100); do grep -q listening "$work/plain_ps.log" && break; sleep 0.05; done
small=(--users=200 --items=20 --train_examples=2000 --test_examples=200 --connect_timeout_s=30)
# shellcheck disable=SC2046
mismatch "$work/tls_to_plain.log" "$recsys" --cluster_spec="$work/plain_spec.json" "${small[@]}" \
  $(tls coordinator)
# The TLS PS of the run above is still up.
cat >"$work/tls_spec.json" <<JSON
{"cluster": {"coordinator": ["127.0.0.1:${ports[5]}"],
             "ps": ["127.0.0.1:${ports[1]}"], "worker": ["127.0.0.1:${ports[7]}"]}}
JSON
mismatch "$work/plain_to_tls.log" "$recsys" --cluster_spec="$work/tls_spec.json" "${small[@]}"
grep -q "the peer speaks TLS and this node plain TCP" "$work/plain_ps.log" ||
  { echo "the plain PS did not say a TLS peer knocked"; exit 1; }
grep -q "the peer speaks plain TCP and this node TLS" "$work/ps0.log" ||
  { echo "the TLS PS did not say a plain peer knocked"; exit 1; }
