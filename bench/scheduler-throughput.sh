#!/usr/bin/env bash
#! Scheduler throughput, kube-scheduler v1.20.2 vs Loadstar, on one API server in one run:
#! 1 000 kubelet-less nodes, 5 000 pre-created pending pods per scheduler, both clients at
#! --kube-api-qps/--kube-api-burst (default 1000/1000). Loadstar scores 100 % of feasible nodes
#! on real load: simulated agents report for every node (CPU 10–85 %) before it starts. Both
#! schedulers start as warm standbys (caches synced) that take their Lease (retry period
#! 0.2 s) when a placeholder's Lease is deleted at the start mark.
#! Prints pods/s from start to all bound, the ratio, p50/p99 latencies, and CPU seconds of the
#! scheduler, kube-apiserver and etcd while scheduling. Release builds. Loadstar's ingest CPU
#! is reported separately: measured on the standby scorer with every agent reporting, before
#! the start mark (INGEST_SECONDS, default 10), and subtracted pro rata.
#! CONSTRAINED percent of the pods carry a hard inter-pod constraint (half required
#! anti-affinity per host, half a hard host spread, in 50 groups), the same pods for both.
#! FLEET_FOR_BOTH=1 gives kube-scheduler's run the same background load as Loadstar's: a
#! second scorer (no Kubernetes) with the same simulated agents streaming to it, so both
#! schedulers share the 2 cores with the fleet's ingest and the load generator (in
#! production these run elsewhere: agents on their nodes). The load generator's own CPU
#! during Loadstar's run is printed either way.
#! Usage: bench/scheduler-throughput.sh [NODES] [PODS] [QPS] [CONSTRAINED]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000}
PODS=${2:-5000}
QPS=${3:-1000}
CONSTRAINED=${4:-0}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_up loadstar-bench
log "creating $NODES nodes"
H nodes --count "$NODES"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cores_between() {  # TICKS0 TICKS1 MS0 MS1
  python3 -c "print(round(($2 - $1) / $(getconf CLK_TCK) / max(($4 - $3) / 1000, 1e-3), 3))"
}

# --- kube-scheduler -------------------------------------------------------------------------
FLEET_NOTE="none"
if [ "${FLEET_FOR_BOTH:-0}" = 1 ]; then
  FLEET_PORT=$(free_port)
  RUST_LOG=warn "$SCORER" serve --kubernetes=off --insecure-allow-unauthenticated --listen "127.0.0.1:$FLEET_PORT" \
    --metrics-listen 127.0.0.1:0 >"$WORK/fleet-scorer.log" 2>&1 &
  FS=$!; PIDS+=("$FS")
  H ready --scorer "http://127.0.0.1:$FLEET_PORT" --count 0 --timeout 60
  "$HELPER" --kubeconfig "$KC" agents --scorer "http://127.0.0.1:$FLEET_PORT" --count "$NODES" \
    >"$WORK/fleet-agents.log" 2>&1 &
  FA=$!; PIDS+=("$FA")
  H ready --scorer "http://127.0.0.1:$FLEET_PORT" --count "$NODES" --timeout 120
  FLEET_NOTE="$NODES agents streaming to a second scorer"
  log "background for kube-scheduler: $FLEET_NOTE"
fi
log "creating $PODS pending pods for default-scheduler"
H pods --namespace bench-kube --scheduler default-scheduler --count "$PODS" \
  --constrained-percent "$CONSTRAINED" >/dev/null
placeholder_lease kube-system kube-scheduler
"$K8S_BIN/kube-scheduler" --kubeconfig "$KC" --port=0 --secure-port=0 \
  --kube-api-qps="$QPS" --kube-api-burst="$QPS" \
  --leader-elect=true --leader-elect-resource-lock=leases --leader-elect-retry-period=0.2s \
  --logtostderr=true --v=1 >"$WORK/kube-scheduler.log" 2>&1 &
KS=$!; PIDS+=("$KS")
log "waiting for kube-scheduler's caches to sync"
wait_leader_election "$WORK/kube-scheduler.log"
log "releasing kube-scheduler's Lease (start mark)"
START=$(date +%s%3N)
"$K8S_BIN/kubectl" --kubeconfig "$KC" -n kube-system delete lease kube-scheduler >/dev/null
KUBE_JSON=$(H wait --namespace bench-kube --count "$PODS" --start-ms "$START" \
  --pids "scheduler=$KS,apiserver=$APISERVER_PID,etcd=$ETCD_PID")
kill "$KS"; wait "$KS" 2>/dev/null || true
if [ -n "${FS:-}" ]; then
  kill "$FA" "$FS" 2>/dev/null || true; wait "$FA" "$FS" 2>/dev/null || true
fi
log "kube-scheduler: $KUBE_JSON"

# --- Loadstar -------------------------------------------------------------------------------
"$K8S_BIN/kubectl" --kubeconfig "$KC" create namespace loadstar >/dev/null
placeholder_lease loadstar loadstar-scorer
log "creating $PODS pending pods for loadstar"
H pods --namespace bench-loadstar --scheduler loadstar --count "$PODS" \
  --constrained-percent "$CONSTRAINED" >/dev/null
GRPC_PORT=$(free_port)
RUST_LOG=warn "$SCORER" serve --kubernetes=on --kubeconfig "$KC" --insecure-allow-unauthenticated \
  --listen "127.0.0.1:$GRPC_PORT" --metrics-listen 127.0.0.1:0 \
  --kube-api-qps="$QPS" --kube-api-burst="$QPS" \
  --leader-elect-namespace loadstar --leader-elect-identity bench-loadstar \
  --leader-elect-retry-period 0.2 >"$WORK/loadstar.log" 2>&1 &
LS=$!; PIDS+=("$LS")
H ready --scorer "http://127.0.0.1:$GRPC_PORT" --count 0 --timeout 60
# The helper itself in the background (not the `H` function, whose `$!` is a subshell), so
# its pid is the load generator's: its CPU is reported and it is killed on exit.
"$HELPER" --kubeconfig "$KC" agents --scorer "http://127.0.0.1:$GRPC_PORT" --count "$NODES" \
  >"$WORK/agents.log" 2>&1 &
AG=$!; PIDS+=("$AG")
log "waiting for $NODES fresh agent reports"
H ready --scorer "http://127.0.0.1:$GRPC_PORT" --count "$NODES" --timeout 120
# Ingest alone, reported separately: the standby scorer's CPU while every agent reports and
# nothing is scheduled (INGEST_SECONDS, default 10).
INGEST_SECONDS=${INGEST_SECONDS:-10}
[ "$INGEST_SECONDS" -ge 1 ] || { log "INGEST_SECONDS must be at least 1"; exit 2; }
t0=$(cpu_ticks "$LS"); sleep "$INGEST_SECONDS"; t1=$(cpu_ticks "$LS")
INGEST_CORES=$(python3 -c "print(round(($t1 - $t0) / $(getconf CLK_TCK) / $INGEST_SECONDS, 3))")
log "ingest alone: $INGEST_CORES cores over ${INGEST_SECONDS} s ($NODES agents at 1 Hz)"
log "releasing the Lease (start mark)"
START=$(date +%s%3N)
AG0=$(cpu_ticks "$AG")
"$K8S_BIN/kubectl" --kubeconfig "$KC" -n loadstar delete lease loadstar-scorer >/dev/null
if [ -n "${LOADSTAR_BENCH_PERF:-}" ]; then  # optional profile of the scorer while it schedules
  perf record -F 999 -g -p "$LS" -o "$LOADSTAR_BENCH_PERF" >/dev/null 2>&1 &
  PERF=$!; PIDS+=("$PERF")
fi
LS_JSON=$(H wait --namespace bench-loadstar --count "$PODS" --start-ms "$START" \
  --pids "scheduler=$LS,apiserver=$APISERVER_PID,etcd=$ETCD_PID")
END=$(date +%s%3N)
GEN_CORES=$(cores_between "$AG0" "$(cpu_ticks "$AG")" "$START" "$END")
log "loadstar: $LS_JSON"
if [ -n "${PERF:-}" ]; then kill -INT "$PERF"; wait "$PERF" 2>/dev/null || true; fi

python3 - "$KUBE_JSON" "$LS_JSON" "$NODES" "$PODS" "$QPS" "$CONSTRAINED" "$INGEST_CORES" "$GEN_CORES" "$FLEET_NOTE" <<'EOF'
import json, sys
k, l = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ingest_cores, gen_cores, fleet = float(sys.argv[7]), float(sys.argv[8]), sys.argv[9]
nodes, pods, qps = sys.argv[3:6]
print(f"\nScheduler throughput: {nodes} nodes, {pods} pre-created pending pods each, client QPS/burst {qps}, {sys.argv[6]} % with a hard inter-pod constraint")
print(f"{'':26}{'kube-scheduler':>16}{'loadstar':>16}")
def row(name, key, fmt="{:.1f}"):
    print(f"{name:26}{fmt.format(k[key]):>16}{fmt.format(l[key]):>16}")
row("pods/s (start→all bound)", "pods_per_second")
row("seconds", "seconds", "{:.2f}")
row("Scheduled events at end", "scheduled_events_at_end", "{}")
row("start→bound p50 (s)", "start_to_bound_p50_s", "{:.2f}")
row("start→bound p99 (s)", "start_to_bound_p99_s", "{:.2f}")
row("creation→bound p50 (s)", "creation_to_bound_p50_s", "{:.2f}")
row("creation→bound p99 (s)", "creation_to_bound_p99_s", "{:.2f}")
for proc in ("scheduler", "apiserver", "etcd"):
    print(f"{'CPU s ' + proc:26}{k['cpu_seconds'][proc]:>16.2f}{l['cpu_seconds'][proc]:>16.2f}")
    print(f"{'CPU ms/pod ' + proc:26}{k['cpu_ms_per_pod'][proc]:>16.3f}{l['cpu_ms_per_pod'][proc]:>16.3f}")
ingest_ms = ingest_cores * l["seconds"] * 1000 / int(pods)
print(f"{'ingest CPU ms/pod':26}{'-':>16}{ingest_ms:>16.3f}   ({ingest_cores:.3f} cores measured before the start mark)")
print(f"{'CPU ms/pod w/o ingest':26}{k['cpu_ms_per_pod']['scheduler']:>16.3f}{l['cpu_ms_per_pod']['scheduler'] - ingest_ms:>16.3f}")
print(f"load generator during Loadstar's run: {gen_cores:.3f} cores; background during kube-scheduler's run: {fleet}")
print(f"\nratio loadstar / kube-scheduler: {l['pods_per_second'] / k['pods_per_second']:.2f}x")
EOF
