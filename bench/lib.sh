#!/usr/bin/env bash
#! Shared set-up of the benchmarks that run schedulers against a throwaway API server
#! (scheduler-throughput.sh, extender-overhead.sh). Source it, then `bench_up PREFIX`:
#! installs or reuses the Kubernetes binaries, builds the release scorer and the
#! `scheduler-bench` helper (SCORER, HELPER; `H` runs the helper with the admin
#! kubeconfig; SKIP_BUILD=1 runs those already in ${CARGO_TARGET_DIR:-target}/release, to
#! compare builds), makes WORK, starts etcd and kube-apiserver (KC = admin kubeconfig), and on
#! exit kills every pid in PIDS, stops the cluster and keeps the logs in
#! /tmp/loadstar-bench-logs. Also: `log`, `placeholder_lease NAMESPACE NAME`,
#! `wait_leader_election LOG` (a warm standby has synced its caches).

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
# Lease until the start mark, then the Lease is deleted and they take it (retry 0.2 s).
placeholder_lease() {  # NAMESPACE NAME
  cat <<EOF | "$K8S_BIN/kubectl" --kubeconfig "$KC" apply -f - >/dev/null
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
