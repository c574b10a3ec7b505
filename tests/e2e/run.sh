#!/usr/bin/env bash
#! The end-to-end suite (called by .ci/run): installs or reuses etcd, kube-apiserver v1.20.2,
#! helm and podman, starts the control plane on loopback in a temp dir, checks the Helm chart
#! (lint; the kustomize base and the rendered chart through a server-side dry run) and
#! `helm install`s it for real; every test then runs under the chart's ServiceAccount and RBAC
#! (missing RBAC fails a test). Suites (LOADSTAR_E2E_SUITES, default "e2e_scheduler
#! e2e_extender e2e_auth e2e_install e2e_observe e2e_diff e2e_faults"): e2e_observe has a real
#! Prometheus scrape the scheduling scorer and two agents with the shipped rules, and runs
#! every Grafana panel's query and kubectl-loadstar; e2e_install runs the scorer *image* under
#! podman with the chart's credentials (built by deploy/images/build.sh unless
#! LOADSTAR_E2E_SCORER_IMAGE names one); e2e_diff is the short differential run against
#! kube-scheduler (LOADSTAR_DIFF_SCENARIOS, default 100; the long run is tests/e2e/diff.sh);
#! e2e_faults kills the leader, kube-apiserver and etcd mid-burst at 200 nodes / 1 000 pods
#! (the full size is tests/e2e/faults/run.sh --full) and runs last, as it restarts the
#! control plane.
#! Everything is torn down on exit. Extra arguments go to each test binary (e.g. a test name).
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
SUITES=${LOADSTAR_E2E_SUITES:-e2e_scheduler e2e_extender e2e_auth e2e_install e2e_observe e2e_diff e2e_faults}
cargo build -q -p loadstar-scorer --bin loadstar-scorer -p loadstar-agent --bin loadstar-agent -p loadstar-cli --bin kubectl-loadstar
for suite in $SUITES; do cargo test -q -p loadstar-tests --test "$suite" --no-run; done
HELM="$CACHE/bin/helm"
CHART=deploy/helm/loadstar
if [[ " $SUITES " == *" e2e_install "* ]] && [ -z "${LOADSTAR_E2E_SCORER_IMAGE:-}" ]; then
  log "building the images (deploy/images/build.sh)"
  bash deploy/images/build.sh
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
  LOADSTAR_E2E_SCORER_IMAGE="${LOADSTAR_IMAGE_REPO:-docker.io/loadstar}/loadstar-scorer:$version"
fi

log "starting etcd and kube-apiserver in $WORK"
cluster_up "$WORK/cluster"
log "API server at $KUBE_API_URL"
K() { "$KUBECTL" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" "$@"; }

log "chart: helm lint --strict; kustomize base and rendered chart, server-side dry run"
K apply -f - <<'NS'
apiVersion: v1
kind: Namespace
metadata: {name: loadstar}
NS
"$HELM" lint --strict "$CHART" >"$WORK/logs/helm-lint.log" 2>&1 ||
  { cat "$WORK/logs/helm-lint.log" >&2; exit 1; }
# The kustomize base targets current clusters (PodDisruptionBudget policy/v1, served since
# 1.21); this API server is 1.20, so for this dry run only the budget is sent as v1beta1.
# The chart itself picks the version the cluster serves, and is installed for real below.
"$K8S_BIN/kubectl" kustomize deploy/kustomize |
  sed 's#^apiVersion: policy/v1$#apiVersion: policy/v1beta1#' |
  K apply --dry-run=server -f - >"$WORK/logs/kustomize-dry-run.log"
# Default and non-default values (the ServiceMonitor and PrometheusRule left out: this API server has no
# Prometheus Operator CRDs; tests/tests/chart.rs checks its rendering).
for values in "" "-f $CHART/ci/nondefault-values.yaml --set serviceMonitor.enabled=false --set prometheusRule.enabled=false --set grafanaDashboard.namespace="; do
  # --validate renders with the cluster's own API versions, as helm install does.
  # shellcheck disable=SC2086
  "$HELM" template loadstar "$CHART" --namespace loadstar --kubeconfig "$KUBE_ADMIN_KUBECONFIG" \
    --validate $values >"$WORK/rendered.yaml"
  K apply --dry-run=server -f "$WORK/rendered.yaml" >"$WORK/logs/chart-dry-run.log"
done
log "deploy/kube-scheduler-extender.yaml: kube-scheduler 1.20.2 reads it"
sed "s#/etc/kubernetes/scheduler.conf#$KUBE_ADMIN_KUBECONFIG#" deploy/kube-scheduler-extender.yaml \
  >"$WORK/kube-scheduler-extender.yaml"
"$K8S_BIN/kube-scheduler" --config "$WORK/kube-scheduler-extender.yaml" --port=0 --secure-port=0 \
  --write-config-to "$WORK/kube-scheduler-extender.out.yaml" >"$WORK/logs/ks-config-check.log" 2>&1 ||
  { log "kube-scheduler rejects deploy/kube-scheduler-extender.yaml:"; tail -5 "$WORK/logs/ks-config-check.log" >&2; exit 1; }
grep -q "urlPrefix: http://loadstar-scorer" "$WORK/kube-scheduler-extender.out.yaml"
log "chart: helm install (the suite runs under its ServiceAccount and RBAC)"
"$HELM" install loadstar "$CHART" --namespace loadstar --kubeconfig "$KUBE_ADMIN_KUBECONFIG" \
  >"$WORK/logs/helm-install.log" 2>&1 || { cat "$WORK/logs/helm-install.log" >&2; exit 1; }
status=$("$HELM" status loadstar --namespace loadstar --kubeconfig "$KUBE_ADMIN_KUBECONFIG")
grep -q 'STATUS: deployed' <<<"$status" || { echo "$status" >&2; exit 1; }
K -n loadstar get deployment/loadstar-scorer daemonset/loadstar-agent serviceaccount/loadstar-scorer \
  serviceaccount/loadstar-agent service/loadstar-scorer service/loadstar-scorer-agents >/dev/null
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
# e2e_observe: real agents, the operator CLI, Prometheus and promtool (Debian's prometheus).
export LOADSTAR_E2E_AGENT_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/loadstar-agent"
export LOADSTAR_E2E_CLI_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/kubectl-loadstar"
export LOADSTAR_E2E_LOGS="$WORK/logs"
export LOADSTAR_E2E_CLUSTER_DIR="$CLUSTER_DIR"
# The authentication tests sign an expired token with the cluster's own service-account key.
export LOADSTAR_E2E_SA_SIGNING_KEY="$WORK/cluster/pki/sa.key"
export LOADSTAR_E2E_KUBE_SCHEDULER_BIN="$K8S_BIN/kube-scheduler"
export LOADSTAR_E2E_KUBE_CONTROLLER_MANAGER_BIN="$K8S_BIN/kube-controller-manager"
# e2e_install: the scorer image, and where its pod would find the API server.
export LOADSTAR_E2E_SCORER_IMAGE="${LOADSTAR_E2E_SCORER_IMAGE:-}"
export LOADSTAR_E2E_API_URL="$KUBE_API_URL"
export LOADSTAR_E2E_KUBE_CA="$KUBE_CA"
for suite in $SUITES; do
  log "running $suite"
  case "$suite" in
    # Its progress, disagreements and "N/N scenarios identical" belong in the log.
    e2e_diff|e2e_faults|e2e_soak|e2e_observe) cargo test -p loadstar-tests --test "$suite" -- --ignored --test-threads=1 --nocapture "$@" ;;
    *) cargo test -p loadstar-tests --test "$suite" -- --ignored --test-threads=1 "$@" ;;
  esac
done

log "chart: helm upgrade (a changed value rolls out), then helm uninstall removes everything"
"$HELM" upgrade loadstar "$CHART" --namespace loadstar --kubeconfig "$KUBE_ADMIN_KUBECONFIG" \
  --reuse-values --set scorer.replicas=3 >"$WORK/logs/helm-upgrade.log" 2>&1 ||
  { cat "$WORK/logs/helm-upgrade.log" >&2; exit 1; }
status=$("$HELM" status loadstar --namespace loadstar --kubeconfig "$KUBE_ADMIN_KUBECONFIG")
grep -q 'REVISION: 2' <<<"$status" || { echo "$status" >&2; exit 1; }
replicas=$(K -n loadstar get deployment/loadstar-scorer -o jsonpath='{.spec.replicas}')
[ "$replicas" = 3 ] || { log "helm upgrade left scorer replicas at $replicas, not 3"; exit 1; }
release_objects() {
  K -n loadstar get deployment,daemonset,service,serviceaccount,configmap,pdb,role,rolebinding \
    -l app.kubernetes.io/instance=loadstar -o name 2>/dev/null
  K get clusterrole,clusterrolebinding,priorityclass -l app.kubernetes.io/instance=loadstar \
    -o name 2>/dev/null
}
before=$(release_objects | wc -l)
[ "$before" -ge 8 ] || { log "the release's label selects only $before objects"; exit 1; }
"$HELM" uninstall loadstar --namespace loadstar --kubeconfig "$KUBE_ADMIN_KUBECONFIG" \
  >"$WORK/logs/helm-uninstall.log" 2>&1 || { cat "$WORK/logs/helm-uninstall.log" >&2; exit 1; }
left=$(release_objects)
[ -z "$left" ] || { log "helm uninstall left: $left"; exit 1; }
log "chart: upgraded to revision 2 (3 scorer replicas); uninstall removed all $before objects"
