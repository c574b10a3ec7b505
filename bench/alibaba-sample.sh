#!/usr/bin/env bash
#! Replays the shipped Alibaba cluster-trace-v2018 sample (scorer/traces/data/alibaba-2018-sample,
#! synthetic, in the real trace's format) through `convert-trace` and the simulator: one run
#! with tables and plots into docs/results/alibaba-sample, and a SEEDS-seed study (tie-breaks
#! re-drawn; the trace is fixed) into docs/results/seeds/alibaba-sample. The same two commands
#! replay a real download: point --input at the extracted tables and pick --machines,
#! --start-s and --window-s (docs/simulator.md, "Real traces").
#! Usage: bench/alibaba-sample.sh [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-10}
cargo build -q --release -p loadstar-scorer
SCORER=target/release/loadstar-scorer
INPUTS=target/alibaba-sample-inputs
PROFILES=loadstar-requests,koordinator-load-aware,loadstar-target-load-packing,loadstar-load-variation-risk-balancing,loadstar-load-ratio,loadstar
"$SCORER" convert-trace --input scorer/traces/data/alibaba-2018-sample \
  --start-s 86400 --window-s 14400 --out "$INPUTS"
run() {
  "$SCORER" simulate --node-file "$INPUTS/nodes.csv" --trace "$INPUTS/trace.csv" \
    --usage "$INPUTS/usage.csv" --duration-s 14400 --profiles "$PROFILES" "$@"
}
run --out docs/results/alibaba-sample
cp "$INPUTS/convert.txt" docs/results/alibaba-sample/
run --seeds "$SEEDS" --out docs/results/seeds/alibaba-sample
