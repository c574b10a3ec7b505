#!/usr/bin/env bash
#! Issue #21's scaling figure: bench/scheduler-throughput.sh at 1 000, 2 500 and 5 000 nodes
#! (pods = 2 x nodes, at least 5 000; simulated agents for every node at 1 Hz throughout),
#! kube-scheduler v1.20.2 and Loadstar in the same run at each size, ROUNDS rounds per size
#! (default 2: one with each scheduler first, as this host's drift needs). Writes
#! docs/results/throughput/scaling.csv (one row per size, round and scheduler: pods/s, the
#! scheduler's CPU ms per pod with and without ingest, the ingest cores subtracted (the
#! scorer's gRPC threads during the run), kube-apiserver and etcd CPU ms per pod) and
#! scaling.svg (bench/throughput-plot.py: the median of the rounds per size, every round as a
#! dot, the median of the rounds' ratios); scaling.png too when Chromium is installed (else
#! the old PNG is removed, not left to disagree). Each size's whole bench output is kept in
#! a log whose path is printed.
#! Usage: [ROUNDS=2] [SKIP_BUILD=1] bench/throughput-scaling.sh [NODES ...]   (default: 1000 2500 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(1000 2500 5000)
for n in "${sizes[@]}"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "node counts are positive integers, not '$n'" >&2; exit 2; }
done
export ROUNDS=${ROUNDS:-2}
# The A/B mode compares two scorers and writes no rounds against kube-scheduler.
unset AB_SCORERS
OUT=docs/results/throughput
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv="$tmp/scaling.csv"
echo "nodes,pods,round,scheduler,pods_per_second,scheduler_cpu_ms_per_pod,scheduler_cpu_ms_per_pod_without_ingest,ingest_cores_subtracted,apiserver_cpu_ms_per_pod,etcd_cpu_ms_per_pod" > "$csv"
for n in "${sizes[@]}"; do
  pods=$(( n * 2 > 5000 ? n * 2 : 5000 ))
  log=$(mktemp -t "throughput-$n.XXXX.log")
  echo "== $n nodes, $pods pods, $ROUNDS rounds (whole output: $log)"
  if ! ROUNDS_JSONL="$tmp/rounds-$n.jsonl" bash bench/scheduler-throughput.sh "$n" "$pods" > "$log" 2>&1; then
    tail -20 "$log" >&2
    echo "bench/scheduler-throughput.sh $n $pods failed; its output: $log" >&2
    exit 1
  fi
  grep -E "^ratio|^rounds'|pods/s \(start" "$log" || true
  python3 - "$tmp/rounds-$n.jsonl" "$n" "$pods" >> "$csv" <<'PY'
import json, sys
path, n, pods = sys.argv[1], sys.argv[2], sys.argv[3]
rounds = [json.loads(line) for line in open(path) if line.strip()]
if not rounds:
    sys.exit(f"{path}: the bench wrote no rounds")
for r in rounds:
    # Ingest is Loadstar's alone, subtracted by bench/scheduler-throughput.sh.
    for who, j, cores, without in (
        ("kube-scheduler", r["kube"], 0.0, r["kube"]["cpu_ms_per_pod"]["scheduler"]),
        ("loadstar", r["loadstar"], r["ingest_cores_subtracted"], r["cpu_wo_ingest"]),
    ):
        c = j["cpu_ms_per_pod"]
        print(f'{n},{pods},{r["round"]},{who},{j["pods_per_second"]:.1f},{c["scheduler"]:.3f},'
              f'{without:.3f},{cores:.3f},{c["apiserver"]:.3f},{c["etcd"]:.3f}')
PY
done
cp "$csv" "$OUT/scaling.csv"
python3 bench/throughput-plot.py "$OUT/scaling.csv" "$OUT/scaling.svg"
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -n "$browser" ] && "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
     --window-size=900,440 --screenshot="$PWD/$OUT/scaling.png" "file://$PWD/$OUT/scaling.svg" \
     > "$tmp/browser.log" 2>&1; then
  :
else
  rm -f "$OUT/scaling.png"
  echo "no browser rendered $OUT/scaling.png (removed; the SVG stands): ${browser:-none found}" >&2
fi
cat "$OUT/scaling.csv"
