#!/usr/bin/env bash
# The command-line conventions of every binary (README, "Command lines"), run as a user would:
#   - `--help` exits 0 listing every flag the program defines (read from its source files), in
#     groups; `tessera <command> --help` exits 0 with that command's usage;
#   - exit status 0 ok, 2 bad usage or input (an unknown flag, a bad value, an unreadable
#     --flagfile, an unexpected argument, a bad --mode, a malformed TF_CONFIG, a TF_CONFIG task
#     that is a PS), 1 a failure while running (no PS to reach; a port another process has);
#   - --flagfile sets flags from a file, and the summary's "mode" is a value --mode takes;
#   - stdout and stderr redirected to one file keep the order the lines were written in.
#   command_line.sh SOURCE_DIR RECSYS FASHION_MNIST TESSERA
set -euo pipefail
source_dir=$1
recsys=$2
fashion_mnist=$3
tessera=$4
source "$(dirname "$0")/net_lib.sh"

fail() { echo "FAIL: $*"; exit 1; }
# expect CODE WHAT CMD...: runs CMD (output in $work/out, $work/err) and checks its exit status.
expect() {
  local want=$1 what=$2 status=0
  shift 2
  "$@" >"$work/out" 2>"$work/err" || status=$?
  [ "$status" = "$want" ] || { cat "$work/err"; fail "$what: exit status $status, not $want"; }
}
# has FILE TEXT: FILE contains TEXT.
has() { grep -qF -- "$2" "$1" || { cat "$1"; fail "no '$2' in $(basename "$1")"; }; }
# The flags a source file defines.
flags_of() { grep -ho 'ABSL_FLAG([^,]*, *[a-z_0-9]*' "$@" | sed 's/.*, *//'; }

# -- --help lists every flag ---------------------------------------------------------------------
for program in recsys fashion_mnist; do
  binary=${!program}
  expect 0 "$program --help" "$binary" --help
  [ ! -s "$work/err" ] || fail "$program --help wrote to stderr"
  has "$work/out" "usage: $program [flags]"
  for group in "Model, data and schedule:" "Training (the simulation by default):" \
               "Checkpoints and export:" "Networked cluster (--cluster_spec or the TF_CONFIG" \
               "Monitoring:" "Fault injection:" "Flags of every Tessera program:"; do
    has "$work/out" "$group"
  done
  count=0
  for flag in $(flags_of "$source_dir/examples/$program.cc" \
                         "$source_dir/coordinator/training/training_flags.cc") flagfile help; do
    grep -qE "^  --$flag([= ]|$)" "$work/out" || fail "$program --help does not list --$flag"
    count=$((count + 1))
  done
  echo "$program --help: all $count flags"
done
expect 0 "tessera --help" "$tessera" --help
for flag in $(flags_of "$source_dir/cli/main.cc"); do
  grep -qE "^  --$flag([= ]|$)" "$work/out" || fail "tessera --help does not list --$flag"
done
for command in predict serve ps inspect; do
  expect 0 "tessera $command --help" "$tessera" "$command" --help
  has "$work/out" "usage: tessera $command"
done

# -- Exit status 2: bad usage or input ----------------------------------------------------------
small=(--users=500 --items=100 --train_examples=4000 --test_examples=1000)
expect 2 "an unknown flag" "$recsys" --bogus
has "$work/err" "Unknown command line flag 'bogus'"
expect 2 "a value that does not parse" "$recsys" --steps=many
has "$work/err" "Illegal value 'many' specified for flag 'steps'"
expect 2 "an unreadable flagfile" "$fashion_mnist" --flagfile="$work/none"
has "$work/err" "Can't open flagfile"
expect 2 "an unexpected argument" "$recsys" train
has "$work/err" "recsys: unexpected argument 'train'"
expect 2 "a bad --mode" "$recsys" --mode=cloud
has "$work/err" "recsys: --mode must be sim, local or net, not cloud"
expect 2 "a bad --steps" "$recsys" "${small[@]}" --steps=-1
has "$work/err" "--steps must be >= 0"
expect 2 "--mode=net without a cluster" "$recsys" --mode=net
has "$work/err" "--mode=net needs a cluster"
TF_CONFIG='{"cluster": {"ps": ["127.0.0.1:1"]' expect 2 "a malformed TF_CONFIG" "$recsys"
has "$work/err" "recsys: TF_CONFIG: not valid JSON"
TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]},
            "task": {"type": "ps", "index": 0}}' \
  expect 2 "a PS task for a training program" "$fashion_mnist"
has "$work/err" \
  "fashion_mnist: TF_CONFIG: task {\"type\": \"ps\", \"index\": 0} is a parameter server"
TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]},
            "task": {"type": "worker", "index": 1}}' \
  expect 2 "a worker task past the cluster" "$recsys"
has "$work/err" "is not in the cluster: TF_CONFIG has 1 \"worker\" address"
expect 2 "tessera ps with a bad TF_CONFIG" env TF_CONFIG='{"task": {"type": "boss"}}' "$tessera" ps
has "$work/err" "tessera ps: TF_CONFIG: unknown task type \"boss\""

# -- Exit status 0, with flags from a file; the summary's mode is one --mode takes ---------------
printf -- '--users=500\n--items=100\n--train_examples=4000\n--test_examples=1000\n' >"$work/flags"
for mode in local sim; do
  expect 0 "--flagfile, --mode=$mode" "$recsys" --flagfile="$work/flags" --mode="$mode" \
    --summary="$work/$mode.json"
  summary_mode=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['mode'])" \
                 "$work/$mode.json")
  [ "$summary_mode" = "$mode" ] || fail "--mode=$mode wrote mode '$summary_mode'"
  python3 -c "import json, sys; sys.exit(json.load(open(sys.argv[1]))['examples'] != 4000)" \
    "$work/$mode.json" || fail "--flagfile's --train_examples=4000 was not used"
done

# -- stdout and stderr redirected to one file keep their order --------------------------------------
"$recsys" --flagfile="$work/flags" >"$work/both" 2>&1 || fail "recsys into one file failed"
tr '\r' '\n' <"$work/both" >"$work/lines"
first_line() { grep -n -m1 -F -- "$1" "$work/lines" | cut -d: -f1; }
placement=$(first_line "recsys: simulation with")      # stdout, before training
progress=$(first_line "done in")                       # stderr, the progress line's last
closures=$(first_line "recsys: closures scheduled")    # stdout, after training
[ -n "$placement" ] && [ -n "$progress" ] && [ -n "$closures" ] || {
  cat "$work/lines"; fail "a line is missing from the combined output"; }
[ "$placement" -lt "$progress" ] && [ "$progress" -lt "$closures" ] || {
  cat "$work/lines"; fail "stdout and stderr lines out of order ($placement, $progress, $closures)"; }

# -- Exit status 1: a failure while running -------------------------------------------------------
read -r -a ports < <(free_ports 3)
spec="{\"cluster\": {\"chief\": [\"127.0.0.1:${ports[0]}\"], \"ps\": [\"127.0.0.1:${ports[1]}\"],
                     \"worker\": [\"127.0.0.1:${ports[2]}\"]}}"
TF_CONFIG=$spec expect 1 "a coordinator without its PS" \
  "$recsys" "${small[@]}" --connect_timeout_s=1
has "$work/err" "127.0.0.1:${ports[1]}"
# A coordinator whose port another process listens on (a `tessera ps` here) fails at once.
"$tessera" ps --port "${ports[0]}" --threads 1 >"$work/ps.log" 2>&1 &
pids[ps]=$!
for _ in $(seq 100); do grep -q "listening on" "$work/ps.log" && break; sleep 0.05; done
start=$(date +%s.%N)
TF_CONFIG=$spec expect 1 "a coordinator whose port is taken" "$recsys" "${small[@]}"
took=$(python3 -c "import time; print(f'{time.time() - $start:.2f}')")
has "$work/err" "recsys: the coordinator cannot listen on 127.0.0.1:${ports[0]}: another process \
listens on port ${ports[0]}"
has "$work/err" "change the coordinator's (\"chief\") address 127.0.0.1:${ports[0]} in TF_CONFIG"
python3 -c "import sys; sys.exit(float('$took') > 3)" ||
  fail "the taken port was reported after ${took} s"
expect 1 "a second tessera ps on the same port" "$tessera" ps --port "${ports[0]}" --threads 1
has "$work/err" "ps 0 cannot listen on 127.0.0.1:${ports[0]}: another process listens"
kill "${pids[ps]}"; wait "${pids[ps]}" 2>/dev/null || true; unset "pids[ps]"
echo "command lines: --help complete, exit statuses 0 / 2 / 1 as documented" \
     "(a taken port reported in ${took} s)"
