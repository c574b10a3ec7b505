#!/usr/bin/env bash
#! Issue #22's trade-off: can one profile cut CPU spread by ≥ 35 % and hot node-minutes in
#! any resource by ≥ 50 % against requests-only scheduling, on cluster100 *and* on the
#! I/O-heavy `io` scenario? Sweeps the weight of LoadRatio (the seed paper's score, the one
#! that sees network and disk) added to the default profile with LoadVariationRiskBalancing
#! ×4 and MinVariance ×2, over SEEDS seeds each (default 10), and writes
#! docs/results/tradeoff/{cluster100,io}/seeds.{txt,csv} and docs/results/tradeoff/tradeoff.svg.
#! Usage: bench/profile-tradeoff.sh [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-10}
OUT=docs/results/tradeoff
cargo build -q --release -p loadstar-scorer
SCORER=target/release/loadstar-scorer
mkdir -p "$OUT"
CONFIG=$(mktemp -t loadstar-tradeoff.XXXXXX.yaml)
trap 'rm -f "$CONFIG"' EXIT
python3 - "$CONFIG" <<'PY'
import copy, sys, yaml
c = yaml.safe_load(open("scorer/policy/src/default-config.yaml"))
base = next(p for p in c["profiles"] if p["schedulerName"] == "loadstar")
for w in [0, 1, 2, 3, 5]:
    p = copy.deepcopy(base)
    p["schedulerName"] = f"tradeoff-loadratio-{w}"
    for s in p["scores"]:
        if s["name"] == "LoadVariationRiskBalancing":
            s["weight"] = 4
        if s["name"] == "MinVariance":
            s["weight"] = 2
    if w:
        p["scores"].append({"name": "LoadRatio", "weight": w})
    c["profiles"].append(p)
yaml.safe_dump(c, open(sys.argv[1], "w"), sort_keys=False)
PY
PROFILES=loadstar-requests,koordinator-load-aware,loadstar,tradeoff-loadratio-0,tradeoff-loadratio-1,tradeoff-loadratio-2,tradeoff-loadratio-3,tradeoff-loadratio-5
for sc in cluster100 io; do
  echo "== $sc, $SEEDS seeds"
  "$SCORER" simulate --scenario "$sc" --config "$CONFIG" --profiles "$PROFILES" \
    --seeds "$SEEDS" --out "$OUT/$sc" 2>/dev/null
done
python3 bench/tradeoff-plot.py "$OUT"
