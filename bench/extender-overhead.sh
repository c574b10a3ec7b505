#!/usr/bin/env bash
#! Loadstar as a kube-scheduler extender (issue #18), measured in one run on one API server:
#! kube-scheduler v1.20.2's throughput on NODES kubelet-less nodes and PODS pre-created pods
#! without and then with Loadstar's extender (filter + prioritize, nodeCacheCapable: true,
#! weight 1), both as warm standbys released at a start mark (as in scheduler-throughput.sh);
#! then the extender's own latency per call (client side, keep-alive HTTP/1.1, 300 calls per
#! verb) with NODES node names, and again with LATENCY_NODES names (more nodes and agents are
#! added first). Simulated agents report for every node (CPU 10–85 %). Release builds.
#! Usage: bench/extender-overhead.sh [NODES] [PODS] [QPS] [LATENCY_NODES]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000}
PODS=${2:-5000}
QPS=${3:-1000}
LATENCY_NODES=${4:-5000}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_up loadstar-extbench
log "creating $NODES nodes"
H nodes --count "$NODES"

GRPC_PORT=$(free_port)
EXT_PORT=$(free_port)
RUST_LOG=warn "$SCORER" serve --kubernetes=on --kubeconfig "$KC" --insecure-allow-unauthenticated \
  --listen "127.0.0.1:$GRPC_PORT" --metrics-listen 127.0.0.1:0 \
  --extender-listen "127.0.0.1:$EXT_PORT" --leader-elect=false >"$WORK/loadstar.log" 2>&1 &
LS=$!; PIDS+=("$LS")
H ready --scorer "http://127.0.0.1:$GRPC_PORT" --count 0 --timeout 60
"$HELPER" --kubeconfig "$KC" agents --scorer "http://127.0.0.1:$GRPC_PORT" --count "$NODES" >"$WORK/agents.log" 2>&1 &
AG=$!; PIDS+=("$AG")
log "waiting for $NODES fresh agent reports"
H ready --scorer "http://127.0.0.1:$GRPC_PORT" --count "$NODES" --timeout 120

# run NAME NAMESPACE EXTENDER(yes|no): one warm kube-scheduler over PODS pods; sets RUN_JSON.
run() {
  local name=$1 ns=$2 ext=$3
  log "$name: creating $PODS pending pods"
  H pods --namespace "$ns" --scheduler default-scheduler --count "$PODS" >/dev/null
  placeholder_lease kube-system "$name"
  local cfg="$WORK/$name.yaml"
  cat >"$cfg" <<EOF2
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $KC, qps: $QPS, burst: $QPS}
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: $name
  resourceNamespace: kube-system
  retryPeriod: 0.2s
EOF2
  if [ "$ext" = yes ]; then
    cat >>"$cfg" <<EOF2
extenders:
- urlPrefix: http://127.0.0.1:$EXT_PORT/extender/v1/loadstar
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 1
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 5s
EOF2
  fi
  "$K8S_BIN/kube-scheduler" --config "$cfg" --port=0 --secure-port=0 \
    --logtostderr=true --v=1 >"$WORK/$name.log" 2>&1 &
  local ks=$!; PIDS+=("$ks")
  wait_leader_election "$WORK/$name.log"
  observer_start "$name" --namespace "$ns" --count "$PODS" \
    --pids "scheduler=$ks,apiserver=$APISERVER_PID,etcd=$ETCD_PID,loadstar=$LS"
  release_start "$name" kube-system "$name"
  observer_result "$name"; RUN_JSON=$OBSERVER_JSON
  kill "$ks"; wait "$ks" 2>/dev/null || true
}

# In this shell, not a `$(…)`: the observer's pid and `set -e` stay with it.
run kube-plain bench-plain no; PLAIN_JSON=$RUN_JSON
log "without the extender: $PLAIN_JSON"
run kube-ext bench-ext yes; EXT_JSON=$RUN_JSON
log "with the extender: $EXT_JSON"
LAT1=$(H extender-latency --url "127.0.0.1:$EXT_PORT" --nodes "$NODES" --calls 300)
log "latency at $NODES nodes: $LAT1"
log "adding nodes and agents up to $LATENCY_NODES"
kill "$AG"; wait "$AG" 2>/dev/null || true
H nodes --count "$LATENCY_NODES"
"$HELPER" --kubeconfig "$KC" agents --scorer "http://127.0.0.1:$GRPC_PORT" --count "$LATENCY_NODES" >"$WORK/agents2.log" 2>&1 &
AG=$!; PIDS+=("$AG")
H ready --scorer "http://127.0.0.1:$GRPC_PORT" --count "$LATENCY_NODES" --timeout 300
LAT2=$(H extender-latency --url "127.0.0.1:$EXT_PORT" --nodes "$LATENCY_NODES" --calls 300)
log "latency at $LATENCY_NODES nodes: $LAT2"

python3 - "$PLAIN_JSON" "$EXT_JSON" "$LAT1" "$LAT2" "$NODES" "$PODS" "$LATENCY_NODES" <<'EOF2'
import json, sys
p, e, l1, l2 = (json.loads(a) for a in sys.argv[1:5])
nodes, pods, big = sys.argv[5:8]
print(f"\nkube-scheduler v1.20.2, {nodes} nodes, {pods} pods, without vs with Loadstar's extender")
print(f"{'':28}{'without':>12}{'with':>12}")
def row(name, key, fmt="{:.1f}"):
    print(f"{name:28}{fmt.format(p[key]):>12}{fmt.format(e[key]):>12}")
row("pods/s (start→all bound)", "pods_per_second")
row("start→bound p50 (s)", "start_to_bound_p50_s", "{:.2f}")
row("start→bound p99 (s)", "start_to_bound_p99_s", "{:.2f}")
for proc in ("scheduler", "apiserver", "loadstar"):
    print(f"{'CPU ms/pod ' + proc:28}{p['cpu_ms_per_pod'][proc]:>12.3f}{e['cpu_ms_per_pod'][proc]:>12.3f}")
print(f"\nratio with / without: {e['pods_per_second'] / p['pods_per_second']:.2f}x")
for n, l in ((nodes, l1), (big, l2)):
    for verb in ("filter", "prioritize"):
        v = l[verb]
        print(f"extender {verb:10} at {n:>5} nodes: p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms, max {v['max_ms']:.2f} ms ({v['calls']} calls)")
EOF2
