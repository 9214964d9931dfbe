# Shared plumbing of the recsys benchmark scripts (source it after `set -euo pipefail`; the run
# functions need RECSYS, TESSERA, WORK, the EXTRA flags array and the PIDS array set):
#   split_args ARGS...  POSITIONAL (the arguments before `--`) and EXTRA (those after it): a
#                       script's positional arguments end at `--`, so its optional ones may be
#                       left out before the recsys flags
#   free_ports N        N loopback ports free now (bound, then released), on one line
#   eps SUMMARY         the examples_per_sec of a run's --summary JSON (the training loop only)
#   use_build DIR       BUILD (DIR, absolute), RECSYS and TESSERA (its recsys and tessera
#                       binaries); exits the script when one is not built
#   run_recsys_net SUMMARY FLAGS...  one networked recsys run on loopback: 2 `tessera ps`, 2
#                       workers and the coordinator with FLAGS (and EXTRA for every process),
#                       one scheduler thread each (five processes share the machine's cores);
#                       logs beside SUMMARY; exits the script when the run fails

split_args() {
  POSITIONAL=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do POSITIONAL+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  EXTRA=("$@")
}

use_build() {
  BUILD=$(cd "$1" && pwd)
  RECSYS=$BUILD/examples/recsys
  TESSERA=$BUILD/cli/tessera
  local bin
  for bin in "$RECSYS" "$TESSERA"; do
    [[ -x $bin ]] || { echo "$0: $bin is not built" >&2; exit 1; }
  done
}

free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

eps() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_sec"])' "$1"; }

run_recsys_net() {
  local summary=$1 log=${1%.json}.log
  shift
  read -r P0 P1 C W0 W1 < <(free_ports 5)
  local spec=$WORK/spec_$C.json
  cat > "$spec" <<EOF
{"cluster": {"ps": ["127.0.0.1:$P0", "127.0.0.1:$P1"],
             "worker": ["127.0.0.1:$W0", "127.0.0.1:$W1"],
             "coordinator": ["127.0.0.1:$C"]}}
EOF
  PIDS=()
  "$TESSERA" ps --port "$P0" --task 0 --threads=1 > "$log.ps0" 2>&1 & PIDS+=($!)
  "$TESSERA" ps --port "$P1" --task 1 --threads=1 > "$log.ps1" 2>&1 & PIDS+=($!)
  local workers=()
  for t in 0 1; do
    "$RECSYS" --cluster_spec="$spec" --role=worker --task=$t --threads=1 "${EXTRA[@]}" \
      > "$log.w$t" 2>&1 &
    workers+=($!)
  done
  local status=0
  "$RECSYS" --cluster_spec="$spec" --min_workers=2 --threads=1 "$@" --summary="$summary" \
    "${EXTRA[@]}" > "$log" 2>&1 || status=$?
  for pid in "${workers[@]}"; do wait "$pid" || true; done
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
  if [[ $status -ne 0 ]]; then
    echo "$0: networked run failed ($status); see $log" >&2
    tail -5 "$log" >&2
    exit 1
  fi
}
