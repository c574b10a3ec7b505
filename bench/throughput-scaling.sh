#!/usr/bin/env bash
#! Issue #21's scaling figure: bench/scheduler-throughput.sh at 1 000, 2 500 and 5 000 nodes
#! (pods = 2 x nodes, at least 5 000; simulated agents for every node at 1 Hz throughout),
#! kube-scheduler v1.20.2 and Loadstar in the same run at each size. Writes
#! docs/results/throughput/scaling.csv (one row per size and scheduler: pods/s and CPU ms per
#! pod of the scheduler, kube-apiserver and etcd) and scaling.svg (bench/throughput-plot.py).
#! Usage: bench/throughput-scaling.sh [NODES ...]   (default: 1000 2500 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(1000 2500 5000)
OUT=docs/results/throughput
mkdir -p "$OUT"
csv="$OUT/scaling.csv"
echo "nodes,pods,scheduler,pods_per_second,scheduler_cpu_ms_per_pod,apiserver_cpu_ms_per_pod,etcd_cpu_ms_per_pod" > "$csv"
for n in "${sizes[@]}"; do
  pods=$(( n * 2 > 5000 ? n * 2 : 5000 ))
  log=$(mktemp)
  bash bench/scheduler-throughput.sh "$n" "$pods" 2>&1 | tee "$log" | grep -E "^ratio|pods/s"
  python3 - "$log" "$n" "$pods" >> "$csv" <<'PY'
import json, re, sys
log, n, pods = sys.argv[1], sys.argv[2], sys.argv[3]
for line in open(log):
    m = re.match(r"\[bench\] (kube-scheduler|loadstar): (\{.*\})$", line.strip())
    if m:
        j = json.loads(m.group(2))
        c = j["cpu_ms_per_pod"]
        print(f'{n},{pods},{m.group(1)},{j["pods_per_second"]:.1f},{c["scheduler"]:.3f},{c["apiserver"]:.3f},{c["etcd"]:.3f}')
PY
  rm -f "$log"
done
python3 bench/throughput-plot.py "$csv" "$OUT/scaling.svg"
cat "$csv"
