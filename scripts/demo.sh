#!/usr/bin/env bash
# Set-up (packages + build), then the main job.
#
# Today the main job is the local baseline: the recsys reference model (DESIGN.md §5) trained by
# the single-process, single-thread local trainer on 1M synthetic clicks, evaluated on 100k held-out
# ones. The parameter-server simulation driver (examples/recsys.cc) replaces it when the
# coordinator lands. Extra arguments go to the trainer, e.g. `scripts/demo.sh --examples=200000`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${TESSERA_BUILD_DIR:-build}
echo
echo "demo: training the recsys reference model with the local (single-thread) trainer"
exec "$build_dir/bench/local_train" --workload=recsys "$@"
