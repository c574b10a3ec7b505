#!/usr/bin/env bash
#! What authentication costs other callers (issue #14): a release `loadstar-scorer serve`
#! authenticating against a throwaway kube-apiserver (TokenReview, SubjectAccessReview,
#! default flags), measured alone and then while STREAMS idle authenticated agent streams
#! are open and LOGINS logins per second with bad tokens arrive. Prints one JSON line: gRPC
#! health and Score p50/p99 in each phase, their p99 ratios, how the failed logins were
#! answered, and the scorer's CPU (cores) and RSS (MiB). Release builds.
#! Usage: bench/auth-load.sh [STREAMS] [LOGINS_PER_SECOND] [SECONDS_PER_PHASE]
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${1:-5000}
LOGINS=${2:-1000}
SECS=${3:-20}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_up loadstar-authbench
GRPC_PORT=$(free_port)
# The admin kubeconfig may create TokenReviews and SubjectAccessReviews, as the scorer's
# RBAC (the Helm chart's ClusterRole, deploy/helm/loadstar/templates/scorer-rbac.yaml) allows.
RUST_LOG=warn "$SCORER" serve --kubernetes=on --kubeconfig "$KC" \
  --listen "127.0.0.1:$GRPC_PORT" --metrics-listen 127.0.0.1:0 --leader-elect=false \
  >"$WORK/loadstar.log" 2>&1 &
LS=$!; PIDS+=("$LS")
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$GRPC_PORT") 2>/dev/null && break
  sleep 0.1
done
log "measuring: $STREAMS idle authenticated streams, $LOGINS failed logins/s, ${SECS}s per phase"
H auth-load --scorer "http://127.0.0.1:$GRPC_PORT" --streams "$STREAMS" \
  --logins-per-second "$LOGINS" --seconds "$SECS" --pid "$LS"
