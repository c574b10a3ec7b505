#!/usr/bin/env bash
#! What `percentageOfNodesToScore` costs in placements: the simulator replays one generated
#! workload with the default profile `loadstar` (every node) and `loadstar-sampled`, the same
#! profile with `percentageOfNodesToScore: 0` (kube-scheduler's adaptive share: 42 % of 1 000
#! nodes, 10 % of 5 000), and prints the utilisation spread and hot node-minutes of both.
#! The config is the embedded default (scorer/policy/src/default-config.yaml) with the copy
#! added after `loadstar`. 1 000 nodes × 20 000 pods takes about a minute here, 5 000 × 60 000
#! about ten.
#! Usage: bench/sampling-quality.sh [NODES] [PODS] [simulate's options…]   (default 1000 20000;
#! e.g. `--seeds 5` for each figure's mean and 95 % interval over five workloads)
#! SKIP_BUILD=1 runs the binary already in ${CARGO_TARGET_DIR:-target}/release.
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000}
PODS=${2:-20000}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p loadstar-scorer --bin loadstar-scorer
bin=${CARGO_TARGET_DIR:-target}/release/loadstar-scorer
config=$(mktemp --suffix=.yaml)
trap 'rm -f "$config"' EXIT
# Copy the `loadstar` profile as `loadstar-sampled`, right after it: its block runs from its
# `- schedulerName` line to its last line before the next profile's (or a top-level key,
# or the end); the comments and blank lines in between belong to what follows.
awk '
  function leave() {
    if (!inside) return
    sub(/schedulerName: loadstar\n/, "schedulerName: loadstar-sampled\n    percentageOfNodesToScore: 0\n", copy)
    printf "%s%s", copy, held
    copy = ""; held = ""; inside = 0
  }
  /^  - schedulerName: / || /^[^ #]/ { leave(); inside = ($0 == "  - schedulerName: loadstar") }
  inside && /^[[:space:]]*(#|$)/ { held = held $0 "\n"; next }
  inside { printf "%s", held; copy = copy held $0 "\n"; held = ""; print; next }
  { print }
  END { leave() }
' scorer/policy/src/default-config.yaml > "$config"
grep -q 'schedulerName: loadstar-sampled' "$config" || {
  echo "could not copy the loadstar profile out of the default config" >&2
  exit 1
}
"$bin" simulate --config "$config" --profiles loadstar,loadstar-sampled \
  --nodes "$NODES" --pods "$PODS" "${@:3}"
