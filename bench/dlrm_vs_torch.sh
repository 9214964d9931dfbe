#!/usr/bin/env bash
# dlrm_vs_torch.sh: Tessera's DLRM (examples/dlrm) against the same model in PyTorch
# (bench/torch_dlrm.py) on one synthetic Criteo-layout data set, one pass each.
#
#   bench/dlrm_vs_torch.sh BUILD_DIR [--examples=N] [--test_examples=M] [--data=PREFIX]
#                          [--threads=T] [--gzip] [-- extra dlrm flags]
#   bench/dlrm_vs_torch.sh build                         # 2M train, 200k test
#   bench/dlrm_vs_torch.sh build --examples=200000 -- --mode=local
#
# The data set comes from `tessera generate criteo` into PREFIX (default
# /tmp/dlrm_vs_torch/criteo_N_M) and is reused when PREFIX.json says it has the sizes asked for.
# Both sides train examples/dlrm.cc's model at its defaults (buckets 100000,
# dim 16, batch 512, Adagrad lr 0.05) and report their test AUC and log-loss and their training
# examples/s (the training loop only: not reading, parsing, hashing or evaluation). PyTorch uses
# --threads threads (default 1); dlrm runs with its own defaults plus the extra flags. Prints
# both, the Bayes-optimal AUC of the planted model, and the ratios; the last line is JSON.
# PyTorch is optional: without an interpreter that imports torch, only dlrm runs (and without a
# built dlrm, only PyTorch).
set -euo pipefail

# examples/dlrm's --summary fields.
DLRM_AUC_FIELD=test_auc
DLRM_LOGLOSS_FIELD=test_logloss
DLRM_EPS_FIELD=examples_per_sec

if [[ $# -lt 1 || $1 == -* ]]; then
  echo "usage: $0 BUILD_DIR [--examples=N] [--test_examples=M] [--data=PREFIX] [--threads=T]" \
       "[--gzip] [-- dlrm flags]" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
shift
EXAMPLES=2000000
TEST_EXAMPLES=200000
DATA=""
THREADS=1
GZIP=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --examples=*) EXAMPLES=${1#*=} ;;
    --test_examples=*) TEST_EXAMPLES=${1#*=} ;;
    --data=*) DATA=${1#*=} ;;
    --threads=*) THREADS=${1#*=} ;;
    --gzip) GZIP=--gzip ;;
    --) shift; break ;;
    *) echo "$0: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
EXTRA=("$@")
DATA=${DATA:-/tmp/dlrm_vs_torch/criteo_${EXAMPLES}_${TEST_EXAMPLES}${GZIP:+_gz}}
TESSERA=$BUILD/cli/tessera
DLRM=$BUILD/examples/dlrm
SRC=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $TESSERA ]] || { echo "$0: $TESSERA is not built" >&2; exit 1; }
echo "command: $0 $BUILD --examples=$EXAMPLES --test_examples=$TEST_EXAMPLES --data=$DATA" \
     "--threads=$THREADS $GZIP${EXTRA[*]:+ -- ${EXTRA[*]}}"

# field FILE NAME: a number of a JSON object file ("null" when absent).
field() {
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("null" if v is None else v)' "$1" "$2"
}

# -- The data set --------------------------------------------------------------------------------
if [[ -f $DATA.json && $(field "$DATA.json" train_examples) == "$EXAMPLES" &&
      $(field "$DATA.json" test_examples) == "$TEST_EXAMPLES" ]]; then
  echo "reusing $DATA (its $DATA.json)"
else
  mkdir -p "$(dirname "$DATA")"
  "$TESSERA" generate criteo --train_examples="$EXAMPLES" --test_examples="$TEST_EXAMPLES" \
    --out="$DATA" $GZIP
fi
TRAIN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train_file"])' "$DATA.json")
TEST=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_file"])' "$DATA.json")
BAYES_AUC=$(field "$DATA.json" bayes_auc)
BAYES_LOGLOSS=$(field "$DATA.json" bayes_log_loss)
echo "data: $TRAIN, $TEST; Bayes-optimal test AUC $BAYES_AUC, log-loss $BAYES_LOGLOSS"

WORK=$(mktemp -d /tmp/dlrm_vs_torch.XXXXXX)
COMMON=(--buckets=100000 --embedding_dim=16 --batch_size=512 --learning_rate=0.05)

# -- Tessera -------------------------------------------------------------------------------------
T_AUC=null T_LOGLOSS=null T_EPS=null
if [[ -x $DLRM ]]; then
  echo "== dlrm (log: $WORK/dlrm.log)"
  "$DLRM" --train_data="$TRAIN" --test_data="$TEST" "${COMMON[@]}" \
    --summary="$WORK/dlrm.json" "${EXTRA[@]}" 2>&1 | tee "$WORK/dlrm.log"
  T_AUC=$(field "$WORK/dlrm.json" "$DLRM_AUC_FIELD")
  T_LOGLOSS=$(field "$WORK/dlrm.json" "$DLRM_LOGLOSS_FIELD")
  T_EPS=$(field "$WORK/dlrm.json" "$DLRM_EPS_FIELD")
else
  echo "== dlrm: $DLRM is not built; PyTorch only"
fi

# -- PyTorch -------------------------------------------------------------------------------------
P_AUC=null P_LOGLOSS=null P_EPS=null
PYTHON=${PYTHON:-}
if [[ -z $PYTHON ]]; then
  # The first interpreter that has torch (a pyenv python3 first on PATH may lack Debian's).
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch, numpy' 2>/dev/null; then PYTHON=$candidate; break; fi
  done
fi
if [[ -n $PYTHON ]]; then
  echo "== PyTorch, $THREADS threads (log: $WORK/torch.log)"
  "$PYTHON" "$SRC/bench/torch_dlrm.py" --train_data="$TRAIN" --test_data="$TEST" \
    "${COMMON[@]}" --threads="$THREADS" 2>&1 | tee "$WORK/torch.log"
  tail -n 1 "$WORK/torch.log" > "$WORK/torch.json"
  P_AUC=$(field "$WORK/torch.json" auc)
  P_LOGLOSS=$(field "$WORK/torch.json" logloss)
  P_EPS=$(field "$WORK/torch.json" train_examples_per_sec)
else
  echo "== PyTorch: no python3 with torch and numpy (apt-get install python3-torch); skipped"
fi

# -- Both ----------------------------------------------------------------------------------------
python3 - "$BAYES_AUC" "$T_AUC" "$T_LOGLOSS" "$T_EPS" "$P_AUC" "$P_LOGLOSS" "$P_EPS" \
          "$EXAMPLES" "$TEST_EXAMPLES" "$THREADS" <<'EOF'
import json, sys
def num(s):
    return None if s == "null" else float(s)
bayes, t_auc, t_ll, t_eps, p_auc, p_ll, p_eps = (num(s) for s in sys.argv[1:8])
def fmt(x, spec):
    return "-" if x is None else format(x, spec)
print(f"{'':10}{'test AUC':>10}{'log-loss':>10}{'examples/s':>12}")
print(f"{'Bayes':10}{fmt(bayes, '.4f'):>10}")
print(f"{'tessera':10}{fmt(t_auc, '.4f'):>10}{fmt(t_ll, '.4f'):>10}{fmt(t_eps, '.0f'):>12}")
print(f"{'pytorch':10}{fmt(p_auc, '.4f'):>10}{fmt(p_ll, '.4f'):>10}{fmt(p_eps, '.0f'):>12}")
both = t_eps is not None and p_eps is not None
ratio = t_eps / p_eps if both else None
auc_gap = t_auc - p_auc if t_auc is not None and p_auc is not None else None
print(f"tessera / pytorch examples/s: {fmt(ratio, '.2f')}; AUC tessera - pytorch: "
      f"{fmt(auc_gap, '+.4f')}")
print(json.dumps({
    "train_examples": int(sys.argv[8]), "test_examples": int(sys.argv[9]),
    "torch_threads": int(sys.argv[10]), "bayes_auc": bayes,
    "tessera_auc": t_auc, "tessera_logloss": t_ll, "tessera_examples_per_sec": t_eps,
    "torch_auc": p_auc, "torch_logloss": p_ll, "torch_examples_per_sec": p_eps,
    "examples_per_sec_ratio": ratio, "auc_difference": auc_gap,
}))
EOF
