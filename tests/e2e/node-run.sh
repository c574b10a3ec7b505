#!/usr/bin/env bash
#! The real-node suite (called by .ci/run): the e2e control plane plus a real node
#! (tests/e2e/node.sh: containerd + runc + CNI, kube-controller-manager, kube-scheduler,
#! kubelet, kube-proxy v1.20.2), the images imported into containerd, and
#! tests/tests/e2e_node.rs, which helm-installs the chart onto it and measures. Release
#! binaries go to LOADSTAR_RELEASE_TARGET (default target/). Logs are kept when it fails.
#! `node-run.sh --up` only starts the cluster and the node, prints how to reach them, and
#! waits until Ctrl-C (then tears everything down): a local single-machine cluster to try
#! the chart on.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
log() { printf '[node] %s\n' "$*" >&2; }

bash tests/e2e/install-deps.sh
# shellcheck source=tests/e2e/cluster.sh
source tests/e2e/cluster.sh
# shellcheck source=tests/e2e/node.sh
source tests/e2e/node.sh

WORK=$(mktemp -d -t loadstar-node.XXXXXX)
UP_ONLY=0; [ "${1:-}" = "--up" ] && UP_ONLY=1
cleanup() {
  local rc=$?
  trap - EXIT  # its own `exit` would run it a second time
  [ -z "${IDLE_PID:-}" ] || kill "$IDLE_PID" 2>/dev/null || true
  node_down
  cluster_down
  # --up ends with Ctrl-C or SIGTERM: that is its normal end.
  if [ $UP_ONLY -eq 1 ] && { [ $rc -eq 130 ] || [ $rc -eq 143 ]; }; then rc=0; fi
  if [ $rc -ne 0 ]; then
    log "failed (exit $rc); logs kept in $WORK"
    for f in "$WORK"/cluster/node/logs/*.log "$WORK"/cluster/apiserver.log; do
      [ -f "$f" ] || continue
      log "--- last lines of $f"; tail -n 15 "$f" >&2
    done
  else
    # Mounts the kubelet left (projected tokens) must go before the directory.
    grep " $WORK" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$WORK"
  fi
  exit $rc
}
trap cleanup EXIT INT TERM

log "building the test and the images"
cargo test -q -p loadstar-tests --test e2e_node --no-run
# Release builds go to LOADSTAR_RELEASE_TARGET when set (CI's cache), else target/.
RELEASE_DIR=$(realpath -m "${LOADSTAR_RELEASE_TARGET:-${CARGO_TARGET_DIR:-target}}")/release
(
  if [ -n "${LOADSTAR_RELEASE_TARGET:-}" ]; then export CARGO_TARGET_DIR="$LOADSTAR_RELEASE_TARGET"; fi
  bash deploy/images/build.sh --save "$WORK/images"
  node_images "$WORK/images"
  # The in-pod agent's footprint is compared with the same binary run on the host, streaming
  # to this stub scorer (bench/agent-footprint.sh's setup).
  cargo build --release -q --locked -p loadstar-agent --example stub_scorer
)

export CLUSTER_NODE_IP
CLUSTER_NODE_IP=$(node_ip)
[ -n "$CLUSTER_NODE_IP" ] || { log "no non-loopback address for the node"; exit 1; }
log "control plane in $WORK (advertising $CLUSTER_NODE_IP)"
cluster_up "$WORK/cluster"
log "node: containerd, kube-controller-manager, kube-scheduler, kubelet, kube-proxy"
node_up "$WORK/cluster" "$WORK"/images/*.tar
log "node $NODE_NAME Ready"

if [ $UP_ONLY -eq 1 ]; then
  # The kubelet here evicts at 1 % free disk (node.sh); the scorer must agree, or it sees
  # disk pressure on this often nearly full disk.
  printf 'scorer:\n  config:\n    eviction:\n      hard: {memory.available: 100Mi, nodefs.available: "1%%", nodefs.inodesFree: "1%%"}\n' \
    >"$WORK/node-values.yaml"
  cat >&2 <<EOF
[node] the cluster is up; in another shell:
  export KUBECONFIG=$KUBE_ADMIN_KUBECONFIG PATH=${LOADSTAR_CACHE:-$HOME/.cache/loadstar}/bin:$K8S_BIN:\$PATH
  kubectl get nodes
  helm install loadstar deploy/helm/loadstar -n loadstar --create-namespace \\
    --set 'agent.scorerAddresses={http://\$(LOADSTAR_SCORER_SERVICE_HOST):50051}' \\
    --set scorer.replicas=1 --set scorer.podDisruptionBudget.enabled=false -f $WORK/node-values.yaml
  (images present on the node: the Loadstar images, $BURNER_IMAGE)
[node] Ctrl-C tears it down.
EOF
  # A background sleep and `wait`: bash runs the trap on SIGTERM only once its foreground
  # command ends, which for a plain `sleep` would be up to its whole length.
  sleep infinity & IDLE_PID=$!
  wait "$IDLE_PID"
fi

export LOADSTAR_E2E_ADMIN_KUBECONFIG="$KUBE_ADMIN_KUBECONFIG"
# The harness wants these; this suite runs no scorer binary of its own.
export LOADSTAR_E2E_SCORER_KUBECONFIG="$KUBE_ADMIN_KUBECONFIG"
export LOADSTAR_E2E_SCORER_BIN=/nonexistent
export LOADSTAR_E2E_LOGS="$WORK/cluster/node/logs"
export LOADSTAR_E2E_NODE="$NODE_NAME"
export LOADSTAR_HELM="${LOADSTAR_CACHE:-$HOME/.cache/loadstar}/bin/helm"
export LOADSTAR_E2E_CHART="$ROOT/deploy/helm/loadstar"
export LOADSTAR_E2E_BURNER_IMAGE="$BURNER_IMAGE"
export LOADSTAR_E2E_KUBECTL="$K8S_BIN/kubectl"
# The in-pod agent's footprint is compared with this binary run on the host in the same window.
export LOADSTAR_E2E_AGENT_BIN="$RELEASE_DIR/loadstar-agent"
export LOADSTAR_E2E_STUB_SCORER_BIN="$RELEASE_DIR/examples/stub_scorer"
cargo test -p loadstar-tests --test e2e_node -- --ignored --test-threads=1 --nocapture "$@"
