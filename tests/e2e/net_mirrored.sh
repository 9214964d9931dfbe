#!/usr/bin/env bash
# End to end across real processes on loopback: Fashion-MNIST under the mirrored strategy, a
# coordinator and 2 worker processes each serving a replica (the ring between the workers, not
# through the coordinator).
#   1. A run trains to the end: every replica exits once the coordinator ends the run; the
#      summary says mirrored, 2 replicas in sync, the global step, and a test accuracy a trained
#      MLP reaches; each worker sent its ring messages over a ring link.
#   2. Worker 1 is killed with kill -9 in the middle of a second run and started again 1 s later
#      (as a supervisor would): the coordinator reports the lost replica, waits for it, restores
#      both replicas from the latest checkpoint and trains to the end.
#   3. The checkpoint the mirrored run left resumes under the parameter-server strategy, in
#      process (the two strategies share the checkpoint format).
#   4. Mismatched strategies fail naming the likely cause: a mirrored coordinator finds no
#      replica listening (a parameter-server worker would connect out instead), and a
#      parameter-server worker finds no coordinator listening (a mirrored one connects out).
#   net_mirrored.sh FASHION_MNIST_BINARY
set -euo pipefail
fashion=$1
source "$(dirname "$0")/net_lib.sh"
read -r -a ports < <(free_ports 4)
write_spec 0 2  # no "ps": the mirrored strategy needs none
common=(--cluster_spec="$work/spec.json" --strategy=mirrored --train_examples=20000
        --connect_timeout_s=60)

# 1. A clean run.
start_workers 2 "$fashion" "${common[@]}" --epochs=2
"$fashion" "${common[@]}" --epochs=2 --summary="$work/clean.json" >"$work/clean.log" 2>&1
wait_workers 2
grep -q "replica 0 at" "$work/clean.log"
# The ring ran over ring links, worker to worker, not over the actor connections.
for t in 0 1; do
  grep -q "ring link to the next replica" "$work/worker$t.log" ||
    { echo "worker $t opened no ring link:"; cat "$work/worker$t.log"; exit 1; }
done
if grep -q "no ring link" "$work"/worker*.log; then grep "no ring link" "$work"/worker*.log; exit 1; fi
python3 - "$work/clean.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
problems = []
if s["strategy"] != "mirrored" or s["mode"] != "net":
    problems.append(f"strategy {s['strategy']} mode {s['mode']}")
if s["replicas_in_sync"] != 2 or s["global_batch_size"] != 256:
    problems.append(f"{s['replicas_in_sync']} replicas, global batch {s['global_batch_size']}")
if s["global_step"] != 158 or s["replicas_lost"] != 0:
    problems.append(f"global step {s['global_step']}, replicas lost {s['replicas_lost']}")
if not s["test_accuracy"] > 0.75:
    problems.append(f"test accuracy {s['test_accuracy']}")
print(f"clean run: {s['global_step']} steps, accuracy {s['test_accuracy']:.4f}, "
      f"{s['examples_per_sec']:.0f} examples/s")
if problems:
    sys.exit("; ".join(problems))
PY

# 2. kill -9 of worker 1 mid-run; it comes back 1 s later.
start_workers 2 "$fashion" "${common[@]}" --epochs=8
"$fashion" "${common[@]}" --epochs=8 --checkpoint_dir="$work/ckpt" --checkpoint_every=50 \
  --summary="$work/killed.json" >"$work/killed.log" 2>&1 &
coordinator=$!
pids[coordinator]=$coordinator
for _ in $(seq 600); do ls "$work"/ckpt/ckpt-100/manifest.tsr >/dev/null 2>&1 && break; sleep 0.05; done
[ -e "$work/ckpt/ckpt-100/manifest.tsr" ] || { echo "no checkpoint at step 100 within 30 s"; exit 1; }
kill -9 "${pids[worker1]}"
wait "${pids[worker1]}" 2>/dev/null || true
echo "killed worker 1"
sleep 1
"$fashion" "${common[@]}" --epochs=8 --role=worker --task=1 >"$work/worker1b.log" 2>&1 &
pids[worker1]=$!
status=0
exits_within "$coordinator" 180 || { echo "the coordinator did not finish within 180 s"; exit 1; }
wait "$coordinator" || status=$?
[ "$status" = 0 ] || { echo "the coordinator failed ($status)"; exit 1; }
wait_workers 2
# The ring was re-formed over new links: worker 1 started again links to worker 0.
grep -q "ring link to the next replica" "$work/worker1b.log" ||
  { echo "worker 1, started again, opened no ring link"; exit 1; }
python3 - "$work/killed.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
losses = s["replica_losses"]
problems = []
if len(losses) != 1 or losses[0]["replicas"] != [1] or losses[0]["action"] != "restored":
    problems.append(f"replica losses {losses}")
elif losses[0]["checkpoint_step"] < 100:
    problems.append(f"restored from step {losses[0]['checkpoint_step']}")
if s["global_step"] != 632 or s["replicas_in_sync"] != 2:
    problems.append(f"global step {s['global_step']}, {s['replicas_in_sync']} replicas")
if not s["test_accuracy"] > 0.75:
    problems.append(f"test accuracy {s['test_accuracy']}")
print(f"killed run: {losses}, accuracy {s['test_accuracy']:.4f}")
if problems:
    sys.exit("; ".join(problems))
PY

# 3. The mirrored checkpoint resumes on parameter servers (2 PS, in process), at its step.
"$fashion" --train_examples=20000 --epochs=9 --checkpoint_dir="$work/ckpt" --resume \
  --summary="$work/ps.json" >"$work/ps.log" 2>&1
grep -q "resumed from .*ckpt-632 at step 632" "$work/ps.log"
python3 - "$work/ps.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"resumed on parameter servers: steps {s['first_step']}..{s['global_step']}, "
      f"accuracy {s['test_accuracy']:.4f}")
if s["first_step"] != 632 or not s["test_accuracy"] > 0.75:
    sys.exit("the parameter-server run did not resume from the mirrored checkpoint")
PY
# 4. Mismatched strategies: nobody listens where the other side expects it.
if "$fashion" "${common[@]}" --epochs=1 --connect_timeout_s=2 >"$work/alone.log" 2>&1; then
  echo "a mirrored coordinator without replicas succeeded"; exit 1
fi
grep -q "strategy=mirrored. running there" "$work/alone.log" ||
  { echo "no hint at the strategy:"; cat "$work/alone.log"; exit 1; }
write_spec 1 2
if "$fashion" --cluster_spec="$work/spec.json" --strategy=ps --role=worker --task=0 \
    --connect_timeout_s=2 >"$work/ps_worker.log" 2>&1; then
  echo "a parameter-server worker without a coordinator succeeded"; exit 1
fi
grep -q "with the parameter-server strategy?" "$work/ps_worker.log" ||
  { echo "no hint at the strategy:"; cat "$work/ps_worker.log"; exit 1; }
echo "net_mirrored: ok"
