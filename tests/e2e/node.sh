#!/usr/bin/env bash
#! A real node for the control plane of tests/e2e/cluster.sh, in the spirit of upstream
#! hack/local-up-cluster.sh: Debian's containerd 1.6 (CRI plugin) with Debian's runc, the
#! cgroupfs driver and CNI bridge + host-local from Debian's containernetworking-plugins, and
#! kube-controller-manager, kube-scheduler (for what Loadstar does not place), kubelet and
#! kube-proxy v1.20.2 built from the same Debian source
#! as the API server. No registry is reachable: the pause image (the Kubernetes source's own
#! build/pause/linux/pause.c, built static), the burner workload and the Loadstar images are
#! imported into containerd's k8s.io namespace, and containerd's sandbox_image is the local
#! pause.
#!
#! Source cluster.sh and this file; `export CLUSTER_NODE_IP=$(node_ip)`; `cluster_up DIR`;
#! `node_up DIR IMAGE_TAR...`; `node_down` stops the node's processes (then cluster_down).
#! After node_up: NODE_NAME, CONTAINERD_SOCK, NODE_POD_CIDR.

NODE_SH_DIR=$(cd -- "$(dirname "${BASH_SOURCE[0]}")" >/dev/null && pwd)
NODE_POD_CIDR=10.245.0.0/24
NODE_CNI_NETWORK=loadstar-e2e  # the conflist's name, which cni-release.py releases
NODE_CLUSTER_CIDR=10.245.0.0/16
PAUSE_IMAGE=localhost/loadstar-e2e/pause:3.4
BURNER_IMAGE=localhost/loadstar-e2e/burner:latest

# The address pods reach this machine by (the API server advertises it).
node_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

# node_images OUT_DIR: builds the pause and burner images with podman and saves each as a
# docker-archive in OUT_DIR (pause.tar, burner.tar). Needs gcc (static glibc) and the release
# build of loadstar-burner at $1/../loadstar-burner or on the cargo target path.
node_images() {
  local out="$1" root ctx
  root=$(cd -- "$NODE_SH_DIR/../.." >/dev/null && pwd)
  mkdir -p "$out"
  ctx=$(mktemp -d -t loadstar-node-images.XXXXXX)
  local src
  src=$(ls -d "${LOADSTAR_CACHE:-$HOME/.cache/loadstar}"/src/kubernetes-1.20*/ | head -1)
  gcc -Os -Wall -Werror -static -DVERSION=v3.4-loadstar -o "$ctx/pause" "$src/build/pause/linux/pause.c"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
  podman build -q -f "$ctx/Containerfile" -t "$PAUSE_IMAGE" "$ctx" >/dev/null
  rm -f "$out/pause.tar"
  podman save -q --format docker-archive -o "$out/pause.tar" "$PAUSE_IMAGE"
  # The burner: a std-only Rust binary on the Loadstar base image.
  local target="${CARGO_TARGET_DIR:-$root/target}/release"
  (cd "$root" && cargo build -q --release -p loadstar-burner)
  strip -o "$ctx/loadstar-burner" "$target/loadstar-burner"
  printf 'ARG BASE_IMAGE=localhost/loadstar-base:bookworm\nFROM ${BASE_IMAGE}\nCOPY loadstar-burner /usr/local/bin/loadstar-burner\nUSER 65532:65532\nENTRYPOINT ["/usr/local/bin/loadstar-burner"]\n' >"$ctx/Containerfile"
  bash "$root/deploy/images/base.sh" >/dev/null
  podman build -q --pull=never -f "$ctx/Containerfile" -t "$BURNER_IMAGE" "$ctx" >/dev/null
  rm -f "$out/burner.tar"
  podman save -q --format docker-archive -o "$out/burner.tar" "$BURNER_IMAGE"
  rm -rf "$ctx"
}

# node_up DIR IMAGE_TAR...: starts containerd, imports the images, then the controller
# manager, the kubelet and kube-proxy; waits until the node is Ready.
node_up() {
  local dir="$1"; shift
  local pki="$dir/pki" nd="$dir/node"
  mkdir -p "$nd/containerd" "$nd/cni" "$nd/kubelet" "$nd/logs"
  NODE_NAME=$(hostname | tr 'A-Z' 'a-z')
  CONTAINERD_SOCK="$nd/containerd/containerd.sock"
  export NODE_NAME CONTAINERD_SOCK NODE_POD_CIDR
  # Host-to-container propagation (the agent's view of the host's mounts) needs a shared root.
  mount --make-rshared / 2>/dev/null || true

  cat >"$nd/containerd/config.toml" <<EOF
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine runs without CAP_SYS_RESOURCE, so no process may lower its oom_score_adj
  # (the kubelet asks -998 for sandboxes): clamp to containerd's own, as rootless setups do.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni"
EOF
  cat >"$nd/cni/10-loadstar.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NODE_CNI_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "cni-loadstar0", "isGateway": true, "ipMasq": true,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NODE_POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  # What an earlier run that died before node_down left.
  node_release_cni
  containerd --config "$nd/containerd/config.toml" >"$nd/logs/containerd.log" 2>&1 &
  CONTAINERD_PID=$!
  local deadline=$((SECONDS + 30))
  until ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1; do
    if ((SECONDS > deadline)) || ! kill -0 "$CONTAINERD_PID" 2>/dev/null; then
      echo "containerd did not start:" >&2; tail -20 "$nd/logs/containerd.log" >&2; return 1
    fi
    sleep 0.2
  done
  local tar
  for tar in "$@"; do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import --no-unpack=false "$tar" >/dev/null
  done

  "$K8S_BIN/kube-controller-manager" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=false --leader-elect=false --port=0 --secure-port=0 \
    --controllers='*' --cluster-cidr="$NODE_CLUSTER_CIDR" --allocate-node-cidrs=false \
    --horizontal-pod-autoscaler-downscale-stabilization="${NODE_HPA_DOWNSCALE_STABILIZATION:-45s}" \
    --logtostderr=true --v=1 >"$nd/logs/kube-controller-manager.log" 2>&1 &
  CONTROLLER_MANAGER_PID=$!
  # The default scheduler places what Loadstar does not (its own Deployment, the DaemonSet).
  "$K8S_BIN/kube-scheduler" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" --leader-elect=false \
    --port=0 --secure-port=0 --logtostderr=true --v=1 >"$nd/logs/kube-scheduler.log" 2>&1 &
  DEFAULT_SCHEDULER_PID=$!

  local kport hport
  kport=$(free_port); hport=$(free_port "$kport")
  cat >"$nd/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $CLUSTER_NODE_IP
port: $kport
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
# Only the API server's client certificate (tests/e2e/cluster.sh) may call the kubelet.
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $pki/ca.crt}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failSwapOn: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
# The imported images are the only copies: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
maxPods: 110
EOF
  "$K8S_BIN/kubelet" --config="$nd/kubelet/config.yaml" --kubeconfig="$KUBE_ADMIN_KUBECONFIG" \
    --container-runtime=remote --container-runtime-endpoint="unix://$CONTAINERD_SOCK" \
    --image-service-endpoint="unix://$CONTAINERD_SOCK" \
    --root-dir="$nd/kubelet/root" --cert-dir="$nd/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$CLUSTER_NODE_IP" \
    --logtostderr=true --v=1 >"$nd/logs/kubelet.log" 2>&1 &
  KUBELET_PID=$!

  local proxy_health proxy_metrics
  proxy_health=$(free_port "$kport" "$hport")
  proxy_metrics=$(free_port "$kport" "$hport" "$proxy_health")
  "$K8S_BIN/kube-proxy" --kubeconfig="$KUBE_ADMIN_KUBECONFIG" --proxy-mode=iptables \
    --cluster-cidr="$NODE_CLUSTER_CIDR" --hostname-override="$NODE_NAME" \
    --healthz-bind-address="127.0.0.1:$proxy_health" \
    --metrics-bind-address="127.0.0.1:$proxy_metrics" \
    --conntrack-max-per-core=0 --logtostderr=true --v=1 >"$nd/logs/kube-proxy.log" 2>&1 &
  KUBE_PROXY_PID=$!
  export CONTAINERD_PID CONTROLLER_MANAGER_PID DEFAULT_SCHEDULER_PID KUBELET_PID KUBE_PROXY_PID

  deadline=$((SECONDS + 120))
  until [ "$("$K8S_BIN/kubectl" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" get node "$NODE_NAME" \
            -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; do
    local pid
    for pid in $KUBELET_PID $CONTROLLER_MANAGER_PID $DEFAULT_SCHEDULER_PID $KUBE_PROXY_PID; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "a node process exited; last log lines:" >&2
        tail -n 15 "$nd"/logs/*.log >&2; return 1
      fi
    done
    if ((SECONDS > deadline)); then
      echo "node $NODE_NAME never became Ready; kubelet log:" >&2
      tail -30 "$nd/logs/kubelet.log" >&2; return 1
    fi
    sleep 1
  done
}

# node_shims SOCKET: PIDs of the runc v2 shims serving the containerd at SOCKET.
node_shims() {
  local pid
  for pid in $(pgrep -f containerd-shim-runc-v2 2>/dev/null); do
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null |
      awk -v sock="$1" 'prev == "-address" && $0 == sock {found = 1} {prev = $0} END {exit !found}' &&
      echo "$pid"
  done
  return 0
}

# Releases the CNI attachments of e2e pods whose sandboxes were never stopped through CRI
# (cni-release.py), unless an e2e node's containerd is running: its sandboxes would lose
# their network (concurrent runs share the bridge and are not supported anyway).
node_release_cni() {
  if pgrep -f 'containerd --config .*/node/containerd/config.toml' >/dev/null; then
    echo "an e2e node's containerd is running: CNI leftovers not released" >&2
  else
    python3 "$NODE_SH_DIR/cni-release.py" --network "$NODE_CNI_NETWORK" || true
  fi
}

node_down() {
  local pid
  for pid in "${KUBE_PROXY_PID:-}" "${KUBELET_PID:-}" "${DEFAULT_SCHEDULER_PID:-}" "${CONTROLLER_MANAGER_PID:-}"; do
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  # Pods' containers outlive the kubelet: stop them through containerd, then containerd.
  if [ -n "${CONTAINERD_PID:-}" ] && kill -0 "$CONTAINERD_PID" 2>/dev/null; then
    local c
    for c in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
    done
    sleep 1
    kill "$CONTAINERD_PID" 2>/dev/null || true
    wait "$CONTAINERD_PID" 2>/dev/null || true
  fi
  # Leftover shims of this node's containerd only (a shim's command line names the containerd
  # it serves: `-address SOCKET`), the bridge and kube-proxy's rules.
  [ -n "${CONTAINERD_SOCK:-}" ] && node_shims "$CONTAINERD_SOCK" | xargs -r kill 2>/dev/null || true
  # The pods' sandboxes never went through CRI's StopPodSandbox: release their CNI
  # attachments (namespaces, NAT rules, address leases), or each run leaks them.
  node_release_cni
  ip link delete cni-loadstar0 2>/dev/null || true
  [ -n "${KUBE_PROXY_PID:-}" ] && "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  KUBE_PROXY_PID=""; KUBELET_PID=""; DEFAULT_SCHEDULER_PID=""; CONTROLLER_MANAGER_PID=""; CONTAINERD_PID=""
  return 0
}
