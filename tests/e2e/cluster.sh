#!/usr/bin/env bash
#! Starts a throwaway control plane on loopback — Debian's etcd plus kube-apiserver v1.20.2
#! from the install-deps cache — with TLS, RBAC, a service-account signing key and static
#! tokens for an admin. Source it, then `cluster_up DIR`; `cluster_down` stops it.
#! After cluster_up: KUBE_API_URL, KUBE_ADMIN_KUBECONFIG, KUBE_CA, ETCD_PID, APISERVER_PID,
#! CLUSTER_DIR (with each process's command line, pid file and etcd's URL, for the faults).
#! With CLUSTER_NODE_IP set (tests/e2e/node.sh sets it), the API server also listens on that
#! address and advertises it, so that pods reach it through the `kubernetes` Service, and the
#! ServiceAccount admission plugin is on (a controller manager creates the accounts).
#! Generic ephemeral volumes (alpha in 1.20, GA in 1.23) are on, so that pods keep them, and
#! storage capacity tracking (alpha in 1.20, GA in 1.24: `CSIDriver.spec.storageCapacity`,
#! `storage.k8s.io/v1alpha1` CSIStorageCapacity).

CACHE="${LOADSTAR_CACHE:-$HOME/.cache/loadstar}"
K8S_BIN="${K8S_BIN:-$CACHE/k8s-1.20.2/bin}"

# free_port [AVOID...]: a port free on every address and not one of AVOID, drawn below the
# kernel's ephemeral range. A port the kernel hands out for bind(0) comes from that range, so
# an outgoing connection could take it between this check and the server's bind (CI saw
# kube-apiserver fail with "bind: address already in use" so); below the range only another
# server could.
free_port() {
  python3 - "$@" <<'EOF'
import random
import socket
import sys

avoid = {int(a) for a in sys.argv[1:]}
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
top = max(10_001, low - 1)
for _ in range(500):
    port = random.randint(10_000, top)
    if port in avoid:
        continue
    s = socket.socket()
    try:
        s.bind(("", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    sys.exit(0)
sys.exit("free_port: no free port found below the ephemeral range")
EOF
}

# e2e_ca CN PREFIX: a two-day CA, PREFIX.key and PREFIX.crt.
e2e_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
    -keyout "$2.key" -out "$2.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    >/dev/null 2>&1
}

# cluster_up DIR: everything lives in DIR (certificates, etcd data, logs, kubeconfigs).
cluster_up() {
  local dir="$1"
  mkdir -p "$dir/pki" "$dir/etcd"
  local pki="$dir/pki"
  # A CA and a serving certificate for 127.0.0.1 (rustls needs a real CA and a SAN).
  e2e_ca loadstar-e2e-ca "$pki/ca"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" >/dev/null 2>&1
  local san="IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  local bind=127.0.0.1 advertise=127.0.0.1 admission_off=ServiceAccount,TaintNodesByCondition
  if [ -n "${CLUSTER_NODE_IP:-}" ]; then
    # 10.96.0.1: the `kubernetes` Service's ClusterIP, which pods use.
    san="$san,IP:$CLUSTER_NODE_IP,IP:10.96.0.1"
    bind=0.0.0.0; advertise=$CLUSTER_NODE_IP; admission_off=TaintNodesByCondition
  fi
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$san" >"$pki/ext.cnf"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/ext.cnf" -out "$pki/apiserver.crt" >/dev/null 2>&1
  local node_flags=()
  if [ -n "${CLUSTER_NODE_IP:-}" ]; then
    # The API server's client certificate towards kubelets (logs, exec), from the same CA.
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout "$pki/kubelet-client.key" -out "$pki/kubelet-client.csr" >/dev/null 2>&1
    printf 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n' >"$pki/client.cnf"
    openssl x509 -req -in "$pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
      -CAcreateserial -days 2 -extfile "$pki/client.cnf" -out "$pki/kubelet-client.crt" >/dev/null 2>&1
    node_flags=(--kubelet-client-certificate="$pki/kubelet-client.crt"
      --kubelet-client-key="$pki/kubelet-client.key"
      --kubelet-preferred-address-types=InternalIP,Hostname)
    # The aggregation layer (Loadstar's metrics.k8s.io): a front-proxy CA of its own and the
    # client certificate the API server presents to aggregated APIs, as kubeadm sets them up;
    # requests go straight to the APIService's endpoints (no kube-proxy needed on the host).
    e2e_ca front-proxy-ca "$pki/front-proxy-ca"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=front-proxy-client" \
      -keyout "$pki/front-proxy-client.key" -out "$pki/front-proxy-client.csr" >/dev/null 2>&1
    openssl x509 -req -in "$pki/front-proxy-client.csr" -CA "$pki/front-proxy-ca.crt" \
      -CAkey "$pki/front-proxy-ca.key" -CAcreateserial -days 2 -extfile "$pki/client.cnf" \
      -out "$pki/front-proxy-client.crt" >/dev/null 2>&1
    node_flags+=(--requestheader-client-ca-file="$pki/front-proxy-ca.crt"
      --requestheader-allowed-names=front-proxy-client
      --requestheader-username-headers=X-Remote-User
      --requestheader-group-headers=X-Remote-Group
      --requestheader-extra-headers-prefix=X-Remote-Extra-
      --proxy-client-cert-file="$pki/front-proxy-client.crt"
      --proxy-client-key-file="$pki/front-proxy-client.key"
      --enable-aggregator-routing=true)
  fi
  openssl genrsa -out "$pki/sa.key" 2048 >/dev/null 2>&1
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" >/dev/null 2>&1
  local admin_token
  admin_token=$(openssl rand -hex 16)
  echo "$admin_token,admin,admin,\"system:masters\"" >"$pki/tokens.csv"

  local etcd_port etcd_peer api_port
  etcd_port=$(free_port); etcd_peer=$(free_port "$etcd_port")
  api_port=$(free_port "$etcd_port" "$etcd_peer")
  local -a etcd_cmd api_cmd
  etcd_cmd=(etcd --name e2e --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "e2e=http://127.0.0.1:$etcd_peer" \
    --unsafe-no-fsync --quota-backend-bytes=4294967296)
  api_cmd=("$K8S_BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$bind" --advertise-address="$advertise" --secure-port="$api_port" \
    --insecure-port=0 \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --token-auth-file="$pki/tokens.csv" --authorization-mode=RBAC \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --disable-admission-plugins="$admission_off" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --cert-dir="$dir/certs" "${node_flags[@]}" \
    --max-requests-inflight=2000 --max-mutating-requests-inflight=1000 \
    --feature-gates=GenericEphemeralVolume=true,CSIStorageCapacity=true \
    --runtime-config=storage.k8s.io/v1alpha1=true \
    --logtostderr=true --v=1)
  # Each process's command line, pid and (etcd) client URL, for the fault scenarios
  # (tests/e2e/faults/control-plane.sh kills and restarts them).
  printf '%q ' "${etcd_cmd[@]}" >"$dir/etcd.cmd"
  printf '%q ' "${api_cmd[@]}" >"$dir/apiserver.cmd"
  echo "http://127.0.0.1:$etcd_port" >"$dir/etcd.url"
  echo "https://127.0.0.1:$api_port" >"$dir/apiserver.url"
  "${etcd_cmd[@]}" >"$dir/etcd.log" 2>&1 &
  ETCD_PID=$!
  echo "$ETCD_PID" >"$dir/etcd.pid"
  "${api_cmd[@]}" >"$dir/apiserver.log" 2>&1 &
  APISERVER_PID=$!
  echo "$APISERVER_PID" >"$dir/apiserver.pid"
  CLUSTER_DIR=$dir
  KUBE_API_URL="https://127.0.0.1:$api_port"
  KUBE_CA="$pki/ca.crt"
  KUBE_ADMIN_KUBECONFIG="$dir/admin.kubeconfig"
  write_kubeconfig "$KUBE_ADMIN_KUBECONFIG" "$admin_token"
  export KUBE_API_URL KUBE_CA KUBE_ADMIN_KUBECONFIG ETCD_PID APISERVER_PID CLUSTER_DIR
  local deadline=$((SECONDS + 90))
  until "$K8S_BIN/kubectl" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" get --raw /readyz >/dev/null 2>&1; do
    if ((SECONDS > deadline)) || ! kill -0 "$APISERVER_PID" 2>/dev/null; then
      echo "kube-apiserver did not become ready; last log lines:" >&2
      tail -30 "$dir/apiserver.log" >&2
      return 1
    fi
    sleep 0.5
  done
  # The default namespace and RBAC bootstrap roles appear shortly after /readyz.
  until "$K8S_BIN/kubectl" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" get namespace default >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then echo "namespace default never appeared" >&2; return 1; fi
    sleep 0.5
  done
}

# write_kubeconfig FILE TOKEN: a kubeconfig for the running API server with a bearer token.
write_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $KUBE_API_URL
    certificate-authority: $KUBE_CA
users:
- name: user
  user:
    token: $2
contexts:
- name: e2e
  context: {cluster: e2e, user: user}
current-context: e2e
EOF
}

# sa_token NAMESPACE NAME: a bound service-account token from the TokenRequest API.
sa_token() {
  local req='{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["https://kubernetes.default.svc.cluster.local"],"expirationSeconds":86400}}'
  echo "$req" | "$K8S_BIN/kubectl" --kubeconfig "$KUBE_ADMIN_KUBECONFIG" create --raw \
    "/api/v1/namespaces/$1/serviceaccounts/$2/token" -f - |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["token"])'
}

cluster_down() {
  local pid name
  for pid in "${APISERVER_PID:-}" "${ETCD_PID:-}"; do
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  # A process a fault scenario restarted is not our child: its pid file names it.
  for name in apiserver etcd; do
    [ -n "${CLUSTER_DIR:-}" ] && [ -f "$CLUSTER_DIR/$name.pid" ] || continue
    pid=$(cat "$CLUSTER_DIR/$name.pid")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  APISERVER_PID=""; ETCD_PID=""
  return 0
}
