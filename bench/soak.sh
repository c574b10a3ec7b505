#!/usr/bin/env bash
#! The soak of issue #17 (tests/tests/e2e_soak.rs) on the e2e control plane: two scorer
#! replicas under leader election, pods created and deleted continuously, agent groups leaving
#! and joining, the leader SIGKILLed every LOADSTAR_SOAK_FAILOVER minutes. Prints per-window
#! scheduling latency, per-process RSS growth, and lost / doubly bound pods (which fail it);
#! writes the 30 s samples to docs/results/soak/soak.csv and plots them to
#! docs/results/soak/soak.svg (bench/soak-plot.py).
#! Usage: bench/soak.sh [MINUTES]   (default 60; environment knobs: see e2e_soak.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
export LOADSTAR_SOAK_MINUTES="${1:-${LOADSTAR_SOAK_MINUTES:-60}}"
OUT="${LOADSTAR_SOAK_OUT:-docs/results/soak}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export LOADSTAR_SOAK_CSV="$OUT/soak.csv"
export LOADSTAR_E2E_SUITES=e2e_soak
bash tests/e2e/run.sh
python3 bench/soak-plot.py "$OUT/soak.csv" "$OUT/soak.svg"
echo "[soak] plot: $OUT/soak.svg"
