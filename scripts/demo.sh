#!/usr/bin/env bash
# Set-up (packages + build), then the main job: the recsys reference model (docs/design.md §5) trained
# asynchronously in the single-process simulation — 2 parameter servers holding the sharded user
# and item embeddings, 2 workers running training steps on their own part of 1M synthetic clicks,
# a coordinator scheduling the steps — then evaluated on 100k held-out clicks next to the
# Bayes-optimal AUC. Extra arguments go to the driver, e.g.
#   scripts/demo.sh --inject_worker_failures=5     # preempt workers mid-step; training carries on
#   scripts/demo.sh --mode=local                   # the single-thread baseline
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${TESSERA_BUILD_DIR:-build}
echo
echo "demo: training the recsys model on 2 parameter servers and 2 workers (in one process)"
exec "$build_dir/examples/recsys" --ps=2 --workers=2 --summary="$build_dir/recsys_summary.json" "$@"
