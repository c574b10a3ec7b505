#!/usr/bin/env bash
#! Shared set-up of the benchmarks that run schedulers against a throwaway API server
#! (scheduler-throughput.sh, extender-overhead.sh). Source it, then `bench_up PREFIX`:
#! installs or reuses the Kubernetes binaries, builds the release scorer and the
#! `scheduler-bench` helper (SCORER, HELPER; `H` runs the helper with the admin
#! kubeconfig; SKIP_BUILD=1 runs those already in ${CARGO_TARGET_DIR:-target}/release, to
#! compare builds), makes WORK, starts etcd and kube-apiserver (KC = admin kubeconfig), and on
#! exit kills every pid in PIDS, stops the cluster and keeps the logs in
#! /tmp/loadstar-bench-logs. Also: `log`, `placeholder_lease NAMESPACE NAME`,
#! `wait_leader_election LOG` (a warm standby has synced its caches), and the observer:
#! `observer_start TAG ARGS…` (a synced `wait` in the background), `release_start TAG
#! NAMESPACE LEASE` (the start mark, then the Lease deleted) and `observer_result TAG` (sets
#! OBSERVER_JSON).

log() { printf '[bench] %s\n' "$*" >&2; }

bench_up() {  # PREFIX
  ROOT=$PWD
  bash tests/e2e/install-deps.sh
  # shellcheck source=tests/e2e/cluster.sh
  source tests/e2e/cluster.sh
  if [ -z "${SKIP_BUILD:-}" ]; then
    log "release builds"
    cargo build -q --release -p loadstar-scorer --bin loadstar-scorer
    cargo build -q --release -p loadstar-tests --bin scheduler-bench
  fi
  SCORER="${CARGO_TARGET_DIR:-$ROOT/target}/release/loadstar-scorer"
  HELPER="${CARGO_TARGET_DIR:-$ROOT/target}/release/scheduler-bench"
  WORK=$(mktemp -d -t "$1.XXXXXX")
  PIDS=()
  trap bench_down EXIT INT TERM
  cluster_up "$WORK/cluster"
  KC="$KUBE_ADMIN_KUBECONFIG"
}

bench_down() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  cluster_down
  mkdir -p /tmp/loadstar-bench-logs
  cp "$WORK"/*.log "$WORK"/cluster/*.log /tmp/loadstar-bench-logs/ 2>/dev/null || true
  rm -rf "$WORK"
}

H() { "$HELPER" --kubeconfig "$KC" "$@"; }

# Schedulers start warm, as a standby that has synced its caches: a placeholder holds their
# Lease until the start mark, then the Lease is deleted and they take it (kube-scheduler at its
# next retry, every 0.2 s; Loadstar when its watch of the Lease sees it go, since 2026-12-01).
placeholder_lease() {  # NAMESPACE NAME
  # Replaced, not applied: the previous round's scheduler wrote the Lease through the API, and
  # `kubectl apply` warned about its missing last-applied annotation in every round.
  "$K8S_BIN/kubectl" --kubeconfig "$KC" -n "$1" delete lease "$2" --ignore-not-found >/dev/null
  cat <<EOF | "$K8S_BIN/kubectl" --kubeconfig "$KC" create -f - >/dev/null
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: $2, namespace: $1}
spec: {holderIdentity: bench-placeholder, leaseDurationSeconds: 3600,
       renewTime: "$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)"}
EOF
}

# Waits until the kube-scheduler logging to LOG tries to take its Lease (caches synced).
wait_leader_election() {  # LOG
  for _ in $(seq 1 300); do
    grep -q "attempting to acquire leader lease" "$1" && return 0
    sleep 0.2
  done
  log "kube-scheduler never reached leader election"; tail -20 "$1" >&2; exit 1
}

# The observer (`scheduler-bench wait`) lists the namespace's pods and makes its watch request
# before the start mark, so listing every pending pod is not in the measured window (it was
# until 2026-12-01: a fixed cost that weighed on the quicker scheduler's shorter run the most).
# Call all three in one shell (not `observer_result` alone in a `$(…)`: a subshell cannot
# wait for its parent's child).
observer_start() {  # TAG WAIT-ARGS…: runs `scheduler-bench wait WAIT-ARGS…` until it is synced
  local tag=$1; shift
  rm -f "$WORK/start-$tag" "$WORK/start-$tag.synced"
  # The helper itself in the background (not the `H` function, whose `$!` is a subshell).
  "$HELPER" --kubeconfig "$KC" wait "$@" --start-file "$WORK/start-$tag" \
    >"$WORK/observer-$tag.json" 2>"$WORK/observer-$tag.err" &
  OBSERVER_PID=$!; PIDS+=("$OBSERVER_PID")
  for _ in $(seq 1 1200); do
    [ -e "$WORK/start-$tag.synced" ] && return 0
    kill -0 "$OBSERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  log "the observer did not sync: $(cat "$WORK/observer-$tag.err")"; exit 1
}
# The start mark, given to the observer, and right after it the Lease the waiting scheduler
# takes, deleted by `scheduler-bench release-lease`: its start, its client's set-up and its
# connection come before the mark. (Until 2026-12-01 the mark was taken, then `kubectl delete`
# started: ~0.1 s of kubectl's start in every run's window, most of it in the shorter run's.)
release_start() {  # TAG NAMESPACE LEASE
  H release-lease --namespace "$2" --name "$3" --start-file "$WORK/start-$1" >/dev/null
}
observer_result() {  # TAG: waits for the observer and sets OBSERVER_JSON
  local rc=0 kept=() pid
  wait "$OBSERVER_PID" || rc=$?
  # Ended: its pid is not killed on exit (it may belong to another process by then).
  for pid in "${PIDS[@]}"; do [ "$pid" = "$OBSERVER_PID" ] || kept+=("$pid"); done
  PIDS=("${kept[@]}")
  if [ "$rc" != 0 ]; then
    log "the observer failed: $(cat "$WORK/observer-$1.err")"; exit 1
  fi
  OBSERVER_JSON=$(cat "$WORK/observer-$1.json")
}
