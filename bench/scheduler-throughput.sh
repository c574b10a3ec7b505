#!/usr/bin/env bash
#! Scheduler throughput, kube-scheduler v1.20.2 vs Loadstar, on one API server in one run:
#! 1 000 kubelet-less nodes, 5 000 pre-created pending pods per scheduler, both clients at
#! --kube-api-qps/--kube-api-burst QPS (default 5000/5000, as Kubernetes' own scheduler_perf
#! sets its client; until 2026-12-01 1000/1000, which capped Loadstar's bindings at
#! PODS / ((PODS − 1000) / 1000) pods/s: 1 111 at 10 000 pods, where 5 000-node runs sat).
#! Each round prints the fastest the client rate limit lets a run bind its pods and flags a
#! run at 90 % of it or more: such a run was held by the limit, not by the scheduler.
#! Loadstar scores 100 % of feasible nodes
#! on real load: simulated agents report for every node (CPU 10–85 %) before it starts. Both
#! schedulers start as warm standbys (caches synced) that take their Lease (kube-scheduler at
#! its next retry, every 0.2 s; Loadstar when its watch of the Lease sees it go) when a
#! placeholder's Lease is deleted at the start mark (`scheduler-bench release-lease`).
#! Prints pods/s from start to all bound, the ratio, p50/p99 latencies, and CPU seconds of the
#! scheduler, kube-apiserver and etcd while scheduling. Release builds. Loadstar's ingest CPU
#! is reported separately: the CPU of the scorer's gRPC threads (`loadstar-grpc`: agent
#! streams are served on their own runtime) during the run, subtracted from the scorer's
#! (that runtime's blocking-pool threads share the name and take their CPU with them when
#! they exit idle; this unauthenticated bench starts none).
#! Also printed, for comparison and for builds before that runtime: the scorer's CPU with
#! every agent reporting and nothing to schedule, for INGEST_SECONDS (default 10) before the
#! start mark and again after the last bind (2 s after, once trailing writes are done).
#! CONSTRAINED percent of the pods carry a hard inter-pod constraint (half required
#! anti-affinity per host, half a hard host spread, in 50 groups), the same pods for both.
#! FLEET_FOR_BOTH=1 gives kube-scheduler's run the same background load as Loadstar's: a
#! second scorer (no Kubernetes) with the same simulated agents streaming to it, so both
#! schedulers share the 2 cores with the fleet's ingest and the load generator (in
#! production these run elsewhere: agents on their nodes). The load generator's own CPU
#! during Loadstar's run is printed either way.
#! ROUNDS=N (default 1) runs both schedulers N times, alternating which goes first (AB, BA,
#! AB, …), each round on fresh pods (the previous round's deleted first) with freshly started
#! schedulers, and prints each round and the median ratio: on a shared host whose speed drifts
#! by more than the effect being measured, one sequential pair is not a measurement. Use an
#! even N: whichever scheduler goes first in a round has run slower here (2026-11-26), and
#! only AB + BA pairs balance that. ROUNDS_JSONL=FILE also writes every round's figures, with
#! the derived ones printed (CPU per pod without ingest, ratio, ceiling), to FILE, one JSON
#! object per line (bench/throughput-scaling.sh reads it; not with AB_SCORERS).
#! Each round also prints Loadstar's ceiling on this machine: the pods/s its API server,
#! etcd and observer CPU per pod allow on the cores that ingest and the load generator leave,
#! with zero scheduler CPU, as a ratio to kube-scheduler's pods/s (no ratio above it is
#! reachable here). The observer (the helper's `wait`: a watch of the pods, which times each
#! bind) lists the pods and makes its watch request before the start mark, and its own CPU
#! per pod is printed; every CPU figure of a run (the load generator's and ingest's too)
#! covers the start mark to the last pod seen bound.
#! PERCENTAGE_OF_NODES_TO_SCORE=P runs Loadstar's embedded config with
#! `percentageOfNodesToScore: P` (0: kube-scheduler's adaptive default, which kube-scheduler
#! runs here: 42 % of 1 000 nodes, 10 % of 5 000); unset, Loadstar's default of 100 %.
#! LOADSTAR_BENCH_PERF=FILE records `perf` of the scorer while it schedules into FILE.<round>,
#! with LOADSTAR_BENCH_PERF_OPTIONS (default `-F 999 -g`, frame pointers: a build with
#! RUSTFLAGS="-C force-frame-pointers=yes"; `-F 199 --call-graph dwarf,16384` unwinds the
#! plain release build, at ~16 KB per sample).
#! LOADSTAR_BENCH_APISERVER_PPROF=FILE takes the API server's own CPU profile (Go's pprof at
#! /debug/pprof/profile, symbolized by the API server: Debian's binary has no symbols for
#! `perf`) for APISERVER_PPROF_SECONDS (default 5; keep it shorter than the run and under
#! the API server's 60 s request timeout) from just after Loadstar's start mark into
#! FILE.<round> (a relative FILE is under the checkout), split by bench/apiserver-split.py
#! (bindings, Events, watches, GC, …) when `go` is installed; read it further with
#! `go tool pprof -top FILE.<round>`.
#! AB_SCORERS="SCORER_A SCORER_B" compares two Loadstar builds instead (no kube-scheduler):
#! each round runs both scorer binaries on fresh pods of the same cluster, in the order AB on
#! odd rounds and BA on even ones, and prints each build's CPU ms/pod w/o ingest, pods/s,
#! ingest (cores), the API server's and etcd's CPU ms/pod and the Scheduled Events written
#! by the last bind (fewer: Events left for after the window) per round, the median of the
#! rounds' B/A ratios, and per AB + BA pair of rounds their geometric mean (which cancels
#! an advantage of going first) and what going second cost: pairs a minute apart see the
#! same host, where separate bench runs (each with its own kube-scheduler rounds) drift
#! apart. It runs builds already made (SKIP_BUILD=1);
#! the helper (pods, agents, the watch) is the one CARGO_TARGET_DIR names. A "binary" may be
#! a wrapper script that sets an environment variable and execs a scorer, to compare a
#! runtime setting without a rebuild.
#! Usage: bench/scheduler-throughput.sh [NODES] [PODS] [QPS] [CONSTRAINED]
set -euo pipefail
if [ -n "${AB_SCORERS:-}" ]; then  # before the cd: paths are the caller's
  read -r -a AB <<<"$AB_SCORERS"
  [ "${#AB[@]}" = 2 ] && [ -x "${AB[0]}" ] && [ -x "${AB[1]}" ] ||
    { echo "AB_SCORERS must name two executable scorer binaries, got: $AB_SCORERS" >&2; exit 2; }
  [ -n "${SKIP_BUILD:-}" ] ||
    { echo "AB_SCORERS compares builds already made: set SKIP_BUILD=1 (and CARGO_TARGET_DIR for the helper)" >&2; exit 2; }
  AB=("$(realpath "${AB[0]}")" "$(realpath "${AB[1]}")")
fi
# Also the caller's: a relative ROUNDS_JSONL names a file where the caller stands.
[ -z "${ROUNDS_JSONL:-}" ] || ROUNDS_JSONL=$(realpath -m "$ROUNDS_JSONL")
cd "$(dirname "$0")/.."
NODES=${1:-1000}
PODS=${2:-5000}
QPS=${3:-5000}
CONSTRAINED=${4:-0}
if [ -n "${PERCENTAGE_OF_NODES_TO_SCORE:-}" ] &&
  ! [[ "$PERCENTAGE_OF_NODES_TO_SCORE" =~ ^([0-9]|[1-9][0-9]|100)$ ]]; then
  echo "PERCENTAGE_OF_NODES_TO_SCORE must be 0 (adaptive) to 100, got $PERCENTAGE_OF_NODES_TO_SCORE" >&2
  exit 2
fi
if [ -n "${LOADSTAR_BENCH_APISERVER_PPROF:-}" ] &&
  ! [[ "${APISERVER_PPROF_SECONDS:-5}" =~ ^[1-9]$|^[1-5][0-9]$ ]]; then
  echo "APISERVER_PPROF_SECONDS must be 1 to 59 (the API server ends longer requests), got $APISERVER_PPROF_SECONDS" >&2
  exit 2
fi
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_up loadstar-bench
log "creating $NODES nodes"
H nodes --count "$NODES"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cores_between() {  # TICKS0 TICKS1 MS0 MS1
  python3 -c "print(round(($2 - $1) / $(getconf CLK_TCK) / max(($4 - $3) / 1000, 1e-3), 3))"
}

FLEET_NOTE="none"
INGEST_SECONDS=${INGEST_SECONDS:-10}
[ "$INGEST_SECONDS" -ge 1 ] || { log "INGEST_SECONDS must be at least 1"; exit 2; }
ROUNDS=${ROUNDS:-1}
[ "$ROUNDS" -ge 1 ] || { log "ROUNDS must be at least 1"; exit 2; }
LOADSTAR_CONFIG_ARGS=()
SAMPLING_NOTE="Loadstar evaluates 100 % of nodes (its default)"
if [ -n "${PERCENTAGE_OF_NODES_TO_SCORE:-}" ]; then
  { echo "percentageOfNodesToScore: $PERCENTAGE_OF_NODES_TO_SCORE"
    cat scorer/policy/src/default-config.yaml; } >"$WORK/loadstar-config.yaml"
  LOADSTAR_CONFIG_ARGS=(--config "$WORK/loadstar-config.yaml")
  SAMPLING_NOTE="Loadstar runs percentageOfNodesToScore: $PERCENTAGE_OF_NODES_TO_SCORE"
fi
"$K8S_BIN/kubectl" --kubeconfig "$KC" create namespace loadstar >/dev/null

# Deletes the pods of namespace $1 at once (no kubelet here) and waits until they are gone, so
# the next round's schedulers and API server carry the same objects as the first's.
# One DELETE of the whole collection: `kubectl delete pods --all` deletes one pod per call at
# kubectl's client rate limit (5 000 pods took over 10 minutes).
clear_pods() {
  local left i
  for i in $(seq 0 299); do
    # One collection DELETE; on a slow machine the API server may time out on 10 000 pods
    # while it goes on deleting, so it is repeated every 30 s while pods remain.
    if [ $((i % 30)) = 0 ] && ! "$K8S_BIN/kubectl" --kubeconfig "$KC" delete --raw \
        "/api/v1/namespaces/$1/pods?gracePeriodSeconds=0" >/dev/null 2>&1; then
      log "deleting the pods of $1 did not finish in one request; waiting and repeating"
    fi
    left=$("$K8S_BIN/kubectl" --kubeconfig "$KC" get --raw "/api/v1/namespaces/$1/pods?limit=1" |
      python3 -c "import json, sys; print(len(json.load(sys.stdin)['items']))")
    [ "$left" = 0 ] && return 0
    sleep 1
  done
  log "pods of $1 still there after 300 s"; exit 1
}

# --- kube-scheduler -------------------------------------------------------------------------
run_kube() {  # ROUND: sets KUBE_JSON
  local ns="bench-kube-$1" fs="" fa=""
  if [ "${FLEET_FOR_BOTH:-0}" = 1 ]; then
    local fleet_port; fleet_port=$(free_port)
    RUST_LOG=warn "$SCORER" serve --kubernetes=off --insecure-allow-unauthenticated \
      --listen "127.0.0.1:$fleet_port" --metrics-listen 127.0.0.1:0 >"$WORK/fleet-scorer-$1.log" 2>&1 &
    fs=$!; PIDS+=("$fs")
    H ready --scorer "http://127.0.0.1:$fleet_port" --count 0 --timeout 60
    "$HELPER" --kubeconfig "$KC" agents --scorer "http://127.0.0.1:$fleet_port" --count "$NODES" \
      >"$WORK/fleet-agents-$1.log" 2>&1 &
    fa=$!; PIDS+=("$fa")
    H ready --scorer "http://127.0.0.1:$fleet_port" --count "$NODES" --timeout 120
    FLEET_NOTE="$NODES agents streaming to a second scorer"
    log "background for kube-scheduler: $FLEET_NOTE"
  fi
  log "round $1: creating $PODS pending pods for default-scheduler"
  H pods --namespace "$ns" --scheduler default-scheduler --count "$PODS" \
    --constrained-percent "$CONSTRAINED" >/dev/null
  placeholder_lease kube-system kube-scheduler
  "$K8S_BIN/kube-scheduler" --kubeconfig "$KC" --port=0 --secure-port=0 \
    --kube-api-qps="$QPS" --kube-api-burst="$QPS" \
    --leader-elect=true --leader-elect-resource-lock=leases --leader-elect-retry-period=0.2s \
    --logtostderr=true --v=1 >"$WORK/kube-scheduler-$1.log" 2>&1 &
  local ks=$!; PIDS+=("$ks")
  log "waiting for kube-scheduler's caches to sync"
  wait_leader_election "$WORK/kube-scheduler-$1.log"
  observer_start "kube-$1" --namespace "$ns" --count "$PODS" \
    --pids "scheduler=$ks,apiserver=$APISERVER_PID,etcd=$ETCD_PID"
  log "releasing kube-scheduler's Lease (start mark)"
  release_start "kube-$1" kube-system kube-scheduler
  observer_result "kube-$1"; KUBE_JSON=$OBSERVER_JSON
  kill "$ks"; wait "$ks" 2>/dev/null || true
  if [ -n "$fs" ]; then kill "$fa" "$fs" 2>/dev/null || true; wait "$fa" "$fs" 2>/dev/null || true; fi
  log "kube-scheduler: $KUBE_JSON"
  clear_pods "$ns"
}

# --- Loadstar -------------------------------------------------------------------------------
run_loadstar() {  # ROUND: sets LS_JSON, INGEST_CORES, GEN_CORES
  local ns="bench-loadstar-$1"
  placeholder_lease loadstar loadstar-scorer
  log "round $1: creating $PODS pending pods for loadstar"
  H pods --namespace "$ns" --scheduler loadstar --count "$PODS" \
    --constrained-percent "$CONSTRAINED" >/dev/null
  local port; port=$(free_port)
  RUST_LOG=warn "$SCORER" serve --kubernetes=on --kubeconfig "$KC" --insecure-allow-unauthenticated \
    --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 \
    --kube-api-qps="$QPS" --kube-api-burst="$QPS" \
    --leader-elect-namespace loadstar --leader-elect-identity bench-loadstar \
    --leader-elect-retry-period 0.2 ${LOADSTAR_CONFIG_ARGS[@]+"${LOADSTAR_CONFIG_ARGS[@]}"} \
    >"$WORK/loadstar-$1.log" 2>&1 &
  local ls=$!; PIDS+=("$ls")
  H ready --scorer "http://127.0.0.1:$port" --count 0 --timeout 60
  # The helper itself in the background (not the `H` function, whose `$!` is a subshell), so
  # its pid is the load generator's: its CPU is reported and it is killed on exit.
  "$HELPER" --kubeconfig "$KC" agents --scorer "http://127.0.0.1:$port" --count "$NODES" \
    >"$WORK/agents-$1.log" 2>&1 &
  local ag=$!; PIDS+=("$ag")
  log "waiting for $NODES fresh agent reports"
  H ready --scorer "http://127.0.0.1:$port" --count "$NODES" --timeout 120
  # Ingest alone, reported separately: the standby scorer's CPU while every agent reports
  # and nothing is scheduled (INGEST_SECONDS).
  local t0 t1; t0=$(cpu_ticks "$ls"); sleep "$INGEST_SECONDS"; t1=$(cpu_ticks "$ls")
  INGEST_CORES=$(cores_between "$t0" "$t1" 0 $((INGEST_SECONDS * 1000)))
  log "ingest alone: $INGEST_CORES cores over ${INGEST_SECONDS} s ($NODES agents at 1 Hz)"
  # The load generator's CPU and the scorer's gRPC threads' (ingest) too, over the same window.
  observer_start "loadstar-$1" --namespace "$ns" --count "$PODS" \
    --pids "scheduler=$ls,apiserver=$APISERVER_PID,etcd=$ETCD_PID,generator=$ag,ingest=$ls/loadstar-grpc"
  log "releasing the Lease (start mark)"
  local perf=""; release_start "loadstar-$1" loadstar loadstar-scorer
  if [ -n "${LOADSTAR_BENCH_PERF:-}" ]; then  # optional profile of the scorer while it schedules
    # shellcheck disable=SC2086 # the options are words
    perf record ${LOADSTAR_BENCH_PERF_OPTIONS:--F 999 -g} -p "$ls" -o "$LOADSTAR_BENCH_PERF.$1" >/dev/null 2>&1 &
    perf=$!; PIDS+=("$perf")
  fi
  local pprof=""
  if [ -n "${LOADSTAR_BENCH_APISERVER_PPROF:-}" ]; then  # optional profile of the API server
    "$K8S_BIN/kubectl" --kubeconfig "$KC" get --raw \
      "/debug/pprof/profile?seconds=${APISERVER_PPROF_SECONDS:-5}" \
      >"$LOADSTAR_BENCH_APISERVER_PPROF.$1" 2>"$WORK/pprof-$1.err" &
    pprof=$!; PIDS+=("$pprof")
  fi
  observer_result "loadstar-$1"; LS_JSON=$OBSERVER_JSON
  # Cores over the observer's window (the start mark to the last bind); no `ingest` entry: a
  # scorer without loadstar-grpc threads (-1: ingest is told by the idle windows instead).
  local cores  # in a `$(…)`, so that a failure stops the bench (`set -e`)
  cores=$(python3 -c '
import json, sys
j = json.loads(sys.argv[1]); s = max(j["seconds"], 1e-3); c = j["cpu_seconds"]
print(round(c["generator"] / s, 3), round(c["ingest"] / s, 3) if "ingest" in c else -1)' "$LS_JSON")
  read -r GEN_CORES GRPC_CORES <<<"$cores"
  if [ "$GRPC_CORES" != -1 ]; then
    log "ingest during the run (gRPC threads): $GRPC_CORES cores"
  else
    log "this scorer has no loadstar-grpc threads: its ingest during the run is not measured"
  fi
  log "loadstar: $LS_JSON"
  if [ -n "$perf" ]; then kill -INT "$perf"; wait "$perf" 2>/dev/null || true; fi
  if [ -n "$pprof" ]; then
    if ! wait "$pprof"; then
      log "the API server's profile failed: $(cat "$WORK/pprof-$1.err")"
    elif command -v go >/dev/null; then
      python3 bench/apiserver-split.py "$LOADSTAR_BENCH_APISERVER_PPROF.$1" >&2 ||
        log "could not split the API server's profile (above); the bench goes on"
    else
      log "no go command: split the API server's profile elsewhere with bench/apiserver-split.py"
    fi
  fi
  # Ingest alone again, after the run: the mean of both windows is what is subtracted.
  sleep 2
  t0=$(cpu_ticks "$ls"); sleep "$INGEST_SECONDS"; t1=$(cpu_ticks "$ls")
  INGEST_AFTER=$(cores_between "$t0" "$t1" 0 $((INGEST_SECONDS * 1000)))
  log "ingest alone after the run: $INGEST_AFTER cores over ${INGEST_SECONDS} s"
  INGEST_CORES=$(python3 -c "print(round(($INGEST_CORES + $INGEST_AFTER) / 2, 3))")
  kill "$ag" "$ls" 2>/dev/null || true; wait "$ag" "$ls" 2>/dev/null || true
  clear_pods "$ns"
}

if [ -n "${AB_SCORERS:-}" ]; then
  RESULTS=()
  for r in $(seq 1 "$ROUNDS"); do
    order=(0 1); [ $((r % 2)) = 0 ] && order=(1 0)
    for i in "${order[@]}"; do
      SCORER=${AB[$i]}; label=$([ "$i" = 0 ] && echo a || echo b)
      log "round $r, build ${label^^}: $SCORER"
      run_loadstar "$r-$label"
      RESULTS+=("$(printf '{"round":%d,"build":"%s","loadstar":%s,"grpc_cores":%s}' \
        "$r" "$label" "$LS_JSON" "$GRPC_CORES")")
    done
  done
  printf '%s\n' "${RESULTS[@]}" > "$WORK/ab.jsonl"
  python3 - "$WORK/ab.jsonl" "$NODES" "$PODS" "${AB[0]}" "${AB[1]}" "$SAMPLING_NOTE" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
nodes, pods, a, b, sampling = sys.argv[2:7]
print(f"\nLoadstar A/B: {nodes} nodes, {pods} pods per run; {sampling}\n A = {a}\n B = {b}")
by = {}
if any(r["grpc_cores"] < 0 for r in runs):
    sys.exit("a scorer without the loadstar-grpc threads (a build before 2026-11-27): its ingest "
             "cannot be told apart from scheduling, so CPU per pod would not compare")
for r in runs:
    l = r["loadstar"]
    ingest_ms = r["grpc_cores"] * l["seconds"] * 1000 / int(pods)
    # The API server's and etcd's CPU per pod too: a scheduler's requests are what they serve.
    writes_ms = l["cpu_ms_per_pod"]["apiserver"] + l["cpu_ms_per_pod"]["etcd"]
    # And the Scheduled Events written by the last bind: a build whose Events lag its
    # bindings moves their API cost out of the window, and looks quicker for it.
    by[(r["round"], r["build"])] = (l["cpu_ms_per_pod"]["scheduler"] - ingest_ms, l["pods_per_second"], r["grpc_cores"], writes_ms, l["scheduled_events_at_end"])
print(f"\n{'round (first)':16}{'A CPU ms/pod':>14}{'B CPU ms/pod':>14}{'B/A':>8}{'A pods/s':>10}{'B pods/s':>10}{'A ingest':>10}{'B ingest':>10}{'A api+etcd':>12}{'B api+etcd':>12}{'A Events':>10}{'B Events':>10}")
ratios = []
for n in sorted({k[0] for k in by}):
    (ca, pa, ia, wa, ea), (cb, pb, ib, wb, eb) = by[(n, "a")], by[(n, "b")]
    ratios.append(cb / ca)
    print(f"{n:<3}{'(A)' if n % 2 else '(B)':13}{ca:>14.3f}{cb:>14.3f}{cb / ca:>8.3f}{pa:>10.1f}{pb:>10.1f}{ia:>10.3f}{ib:>10.3f}{wa:>12.3f}{wb:>12.3f}{ea:>10}{eb:>10}")
for label in ("a", "b"):
    cpu = [v[0] for k, v in by.items() if k[1] == label]
    ingest = [v[2] for k, v in by.items() if k[1] == label]
    rates = [v[1] for k, v in by.items() if k[1] == label]
    writes = [v[3] for k, v in by.items() if k[1] == label]
    print(f"build {label.upper()}: CPU ms/pod w/o ingest mean {statistics.mean(cpu):.3f}, median {statistics.median(cpu):.3f};"
          f" ingest (the gRPC threads during the run) mean {statistics.mean(ingest):.3f} cores;"
          f" pods/s mean {statistics.mean(rates):.1f}; API server and etcd CPU ms/pod mean {statistics.mean(writes):.3f}")
print(f"B/A CPU per pod, median of {len(ratios)} paired rounds: {statistics.median(ratios):.3f}"
      f" (range {min(ratios):.3f}-{max(ratios):.3f})")
# An AB round and the BA round after it see the order both ways: the geometric mean of their
# two ratios cancels a penalty (or bonus) of running second; the square root of their
# quotient measures what running second cost (the second run's CPU over the first's).
pairs = [(ratios[i], ratios[i + 1]) for i in range(0, len(ratios) - 1, 2)]
if pairs:
    balanced = [(ab * ba) ** 0.5 for ab, ba in pairs]
    second = [(ab / ba) ** 0.5 for ab, ba in pairs]
    print("B/A CPU per pod, order-balanced (AB and BA rounds' geometric mean): "
          + ", ".join(f"{x:.3f}" for x in balanced)
          + f"; over all pairs {statistics.geometric_mean(balanced):.3f}")
    print("running second costs: " + ", ".join(f"{x:.3f}x" for x in second)
          + " (the second run's CPU per pod over the first's, per pair)")
EOF
  exit 0
fi

RESULTS=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run_kube "$r"; run_loadstar "$r"
  else run_loadstar "$r"; run_kube "$r"; fi
  RESULTS+=("$(printf '{"round":%d,"kube":%s,"loadstar":%s,"ingest_cores":%s,"grpc_cores":%s,"generator_cores":%s}' \
    "$r" "$KUBE_JSON" "$LS_JSON" "$INGEST_CORES" "$GRPC_CORES" "$GEN_CORES")")
done

printf '%s\n' "${RESULTS[@]}" > "$WORK/rounds.jsonl"
python3 - "$WORK/rounds.jsonl" "$NODES" "$PODS" "$QPS" "$CONSTRAINED" "$FLEET_NOTE" "$SAMPLING_NOTE" "${ROUNDS_JSONL:-}" <<'EOF'
import json, os, statistics, sys
rounds = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
nodes, pods, qps, constrained, fleet, sampling, rounds_jsonl = sys.argv[2:9]
print(f"\nScheduler throughput: {nodes} nodes, {pods} pre-created pending pods each, client QPS/burst {qps}, {constrained} % with a hard inter-pod constraint; {sampling}")
def rate_limit_bound(n, qps, burst):
    """The most pods/s a token bucket of `qps` holding `burst` lets n bindings reach from a
    full bucket (None: the burst covers them all)."""
    if n <= burst or qps <= 0:
        return None
    return n / ((n - burst) / qps)
def table(r):
    k, l = r["kube"], r["loadstar"]
    print(f"\n-- round {r['round']} ({'kube-scheduler' if r['round'] % 2 else 'Loadstar'} first)")
    print(f"{'':26}{'kube-scheduler':>16}{'loadstar':>16}")
    def row(name, key, fmt="{:.1f}"):
        print(f"{name:26}{fmt.format(k[key]):>16}{fmt.format(l[key]):>16}")
    row("pods/s (start→all bound)", "pods_per_second")
    row("seconds", "seconds", "{:.2f}")
    row("Scheduled events at end", "scheduled_events_at_end", "{}")
    # None when a run bound nothing; absent in rounds kept from before 2026-12-01.
    if k.get("start_to_first_bound_s") is not None and l.get("start_to_first_bound_s") is not None:
        row("start→first bound (s)", "start_to_first_bound_s", "{:.3f}")
    row("start→bound p50 (s)", "start_to_bound_p50_s", "{:.2f}")
    row("start→bound p99 (s)", "start_to_bound_p99_s", "{:.2f}")
    row("creation→bound p50 (s)", "creation_to_bound_p50_s", "{:.2f}")
    row("creation→bound p99 (s)", "creation_to_bound_p99_s", "{:.2f}")
    # The observer (this bench's pod watch) since 2026-12-01: it shares the host in both runs.
    for proc in ("scheduler", "apiserver", "etcd", "observer"):
        if proc not in k["cpu_seconds"] or proc not in l["cpu_seconds"]:
            continue
        print(f"{'CPU s ' + proc:26}{k['cpu_seconds'][proc]:>16.2f}{l['cpu_seconds'][proc]:>16.2f}")
        print(f"{'CPU ms/pod ' + proc:26}{k['cpu_ms_per_pod'][proc]:>16.3f}{l['cpu_ms_per_pod'][proc]:>16.3f}")
    windows_ms = r["ingest_cores"] * l["seconds"] * 1000 / int(pods)
    # A build with gRPC on its own runtime: its threads' CPU during the run is ingest.
    measured = r.get("grpc_cores", -1) >= 0
    ingest_cores = r["grpc_cores"] if measured else r["ingest_cores"]
    ingest_ms = ingest_cores * l["seconds"] * 1000 / int(pods)
    if measured:
        print(f"{'ingest CPU ms/pod':26}{'-':>16}{ingest_ms:>16.3f}   ({ingest_cores:.3f} cores: the scorer's gRPC threads during the run)")
    print(f"{'ingest CPU ms/pod, idle':26}{'-':>16}{windows_ms:>16.3f}   ({r['ingest_cores']:.3f} cores: mean of the windows before the start mark and after the last bind{'' if measured else '; subtracted below'})")
    print(f"{'CPU ms/pod w/o ingest':26}{k['cpu_ms_per_pod']['scheduler']:>16.3f}{l['cpu_ms_per_pod']['scheduler'] - ingest_ms:>16.3f}")
    print(f"load generator during Loadstar's run: {r['generator_cores']:.3f} cores; background during kube-scheduler's run: {fleet}")
    # What the machine allows: API server and etcd CPU per binding are paid whoever
    # schedules (and the observer's per pod seen bound, where measured), and in Loadstar's
    # run ingest and the load generator hold their cores for the whole run. At zero
    # scheduler CPU the rest of the machine binds at most this fast.
    cores = os.cpu_count() or 1
    writes_ms = l["cpu_ms_per_pod"]["apiserver"] + l["cpu_ms_per_pod"]["etcd"]
    observer_ms = l["cpu_ms_per_pod"].get("observer", 0.0)
    free = cores - ingest_cores - r["generator_cores"]
    if writes_ms > 0:
        ceiling = free / (writes_ms + observer_ms) * 1000
        r["ceiling_ratio"] = ceiling / k["pods_per_second"]
        observed = f" + {observer_ms:.2f} of the observer's" if "observer" in l["cpu_ms_per_pod"] else ""
        print(f"ceiling on {cores} cores at 0 scheduler CPU: {ceiling:.0f} pods/s "
              f"({free:.2f} cores left by ingest and the generator / {writes_ms:.2f} ms of API server and etcd CPU per pod{observed}), "
              f"{r['ceiling_ratio']:.2f}x kube-scheduler's pods/s")
    # Each scheduler writes one binding per pod through a token bucket of QPS tokens a second
    # holding `burst` (both QPS here), full at the start mark: PODS bindings take at least
    # (PODS − burst) / QPS seconds.
    limited = rate_limit_bound(int(pods), float(qps), float(qps))
    if limited is not None:
        print(f"client rate limit (QPS/burst {qps}): at most {limited:.0f} pods/s for {pods} bindings")
        for who, run in (("kube-scheduler", k), ("Loadstar", l)):
            if run["pods_per_second"] >= 0.9 * limited:
                r.setdefault("at_rate_limit", []).append(who)
                print(f"  {who} ran at {run['pods_per_second'] / limited:.0%} of it: this run measured "
                      f"the client rate limit, not the scheduler (raise QPS)")
    r["ratio"] = l["pods_per_second"] / k["pods_per_second"]
    r["ingest_cores_subtracted"] = ingest_cores
    r["cpu_wo_ingest"] = l["cpu_ms_per_pod"]["scheduler"] - ingest_ms
    print(f"round ratio loadstar / kube-scheduler: {r['ratio']:.2f}x")
for r in rounds:
    table(r)
ratios = [r["ratio"] for r in rounds]
if len(rounds) > 1:
    listed = ", ".join("%.2fx" % x for x in ratios)
    cpu = ", ".join("%.3f" % r["cpu_wo_ingest"] for r in rounds)
    print(f"\nrounds' ratios: {listed}; Loadstar CPU ms/pod w/o ingest: {cpu}")
    if all("ceiling_ratio" in r for r in rounds):
        ceilings = ", ".join("%.2fx" % r["ceiling_ratio"] for r in rounds)
        print(f"rounds' ceilings (Loadstar at 0 scheduler CPU / kube-scheduler): {ceilings}")
capped = [r["round"] for r in rounds if r.get("at_rate_limit")]
if capped:
    print(f"\nWARNING: round(s) {', '.join(map(str, capped))} ran at the client rate limit: "
          f"their ratios measure QPS {qps}, not the schedulers")
print(f"\nratio loadstar / kube-scheduler: {statistics.median(ratios):.2f}x"
      + (f" (median of {len(rounds)} rounds)" if len(rounds) > 1 else ""))
# For bench/throughput-scaling.sh: every round's figures with those derived above (the
# ingest cores subtracted, CPU per pod without ingest, ratio, ceiling), a JSON object a line.
if rounds_jsonl:
    with open(rounds_jsonl, "w") as out:
        out.writelines(json.dumps(r) + "\n" for r in rounds)
EOF
