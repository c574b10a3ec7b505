#!/usr/bin/env bash
#! The end-to-end suite (called by .ci/run): installs or reuses etcd and kube-apiserver
#! v1.20.2, starts them on loopback in a temp dir, checks deploy/ with a server-side dry run,
#! creates the scorer's ServiceAccount and RBAC for real, mints that account's token, and runs
#! the ignored e2e tests with the scorer binary under it (missing RBAC fails a test), then the
#! short differential run against kube-scheduler (e2e_diff: LOADSTAR_DIFF_SCENARIOS, default
#! 100; the long run is tests/e2e/diff.sh). LOADSTAR_E2E_SUITES picks the test binaries
#! (default "e2e_scheduler e2e_extender e2e_auth e2e_diff"). Everything is torn down on exit. Extra arguments go to
#! each test binary (e.g. a test name).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
log() { printf '[e2e] %s\n' "$*" >&2; }

bash tests/e2e/install-deps.sh
# shellcheck source=tests/e2e/cluster.sh
source tests/e2e/cluster.sh
KUBECTL="$K8S_BIN/kubectl"

WORK=$(mktemp -d -t loadstar-e2e.XXXXXX)
cleanup() {
  local rc=$?
  cluster_down
  if [ $rc -ne 0 ]; then
    log "failed (exit $rc); logs kept in $WORK"
    for f in "$WORK"/logs/*.log; do
      [ -f "$f" ] || continue
      log "--- last lines of $f"; tail -20 "$f" >&2
    done
  else
    rm -rf "$WORK"
  fi
  exit $rc
}
trap cleanup EXIT INT TERM
mkdir -p "$WORK/logs"

log "building the scorer and the e2e tests"
SUITES=${LOADSTAR_E2E_SUITES:-e2e_scheduler e2e_extender e2e_auth e2e_diff}
cargo build -q -p loadstar-scorer --bin loadstar-scorer
for suite in $SUITES; do cargo test -q -p loadstar-tests --test "$suite" --no-run; done

log "starting etcd and kube-apiserver in $WORK"
cluster_up "$WORK/cluster"
log "API server at $KUBE_API_URL"
K() { "$KUBECTL" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" "$@"; }

log "deploy/: server-side dry run"
K apply -f deploy/scorer-namespace.yaml
K apply --dry-run=server -f deploy/scorer-rbac.yaml -f deploy/scorer.yaml
log "deploy/kube-scheduler-extender.yaml: kube-scheduler 1.20.2 reads it"
sed "s#/etc/kubernetes/scheduler.conf#$KUBE_ADMIN_KUBECONFIG#" deploy/kube-scheduler-extender.yaml \
  >"$WORK/kube-scheduler-extender.yaml"
"$K8S_BIN/kube-scheduler" --config "$WORK/kube-scheduler-extender.yaml" --port=0 --secure-port=0 \
  --write-config-to "$WORK/kube-scheduler-extender.out.yaml" >"$WORK/logs/ks-config-check.log" 2>&1 ||
  { log "kube-scheduler rejects deploy/kube-scheduler-extender.yaml:"; tail -5 "$WORK/logs/ks-config-check.log" >&2; exit 1; }
grep -q "urlPrefix: http://loadstar-scorer" "$WORK/kube-scheduler-extender.out.yaml"
log "deploy/: ServiceAccount and RBAC for real"
K apply -f deploy/scorer-rbac.yaml
# RBAC objects are served from the authorizer's cache: wait until the account can bind.
deadline=$((SECONDS + 30))
until [ "$(K auth can-i create pods --subresource=binding -A \
          --as=system:serviceaccount:loadstar:loadstar-scorer 2>/dev/null)" = yes ]; do
  if ((SECONDS > deadline)); then log "RBAC never allowed the scorer to bind pods"; exit 1; fi
  sleep 0.2
done
TOKEN=$(sa_token loadstar loadstar-scorer)
write_kubeconfig "$WORK/scorer.kubeconfig" "$TOKEN"

export LOADSTAR_E2E_ADMIN_KUBECONFIG="$KUBE_ADMIN_KUBECONFIG"
export LOADSTAR_E2E_SCORER_KUBECONFIG="$WORK/scorer.kubeconfig"
export LOADSTAR_E2E_SCORER_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/loadstar-scorer"
export LOADSTAR_E2E_LOGS="$WORK/logs"
# The authentication tests sign an expired token with the cluster's own service-account key.
export LOADSTAR_E2E_SA_SIGNING_KEY="$WORK/cluster/pki/sa.key"
export LOADSTAR_E2E_KUBE_SCHEDULER_BIN="$K8S_BIN/kube-scheduler"
for suite in $SUITES; do
  log "running $suite"
  case "$suite" in
    # Its progress, disagreements and "N/N scenarios identical" belong in the log.
    e2e_diff) cargo test -p loadstar-tests --test e2e_diff -- --ignored --test-threads=1 --nocapture "$@" ;;
    *) cargo test -p loadstar-tests --test "$suite" -- --ignored --test-threads=1 "$@" ;;
  esac
done
