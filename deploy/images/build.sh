#!/usr/bin/env bash
#! Builds the two Loadstar images with podman from the release binaries:
#! `docker.io/loadstar/loadstar-scorer:<version>` and `docker.io/loadstar/loadstar-agent:<version>`
#! (the names the Helm chart pulls by default; <version> is the workspace's). The base is a
#! build argument (default gcr.io/distroless/cc-debian12:nonroot); with --local-base (the
#! default here, where no registry is reachable) it is localhost/loadstar-base:bookworm from
#! base.sh. Usage: build.sh [--no-cargo] [--base IMAGE] [--save DIR]
#!   --no-cargo  use target/release as it is (CI builds it once)
#!   --base      any glibc base with /etc/ssl/certs, e.g. the distroless default
#!   --save DIR  also write docker-archive tarballs (for `ctr -n k8s.io images import`)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
log() { printf '[images] %s\n' "$*" >&2; }

cargo_build=1; base=""; save=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-cargo) cargo_build=0 ;;
    --base) base="$2"; shift ;;
    --save) save="$2"; shift ;;
    *) sed -n 's/^#! \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
  shift
done

VERSION=$(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="loadstar-scorer"))')
REVISION=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then REVISION="$REVISION-dirty"; fi
CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
SOURCE=$(git remote get-url origin 2>/dev/null || true)
REPO=${LOADSTAR_IMAGE_REPO:-docker.io/loadstar}
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"

if [ -z "$base" ]; then
  bash deploy/images/base.sh
  base=${LOADSTAR_BASE_IMAGE:-localhost/loadstar-base:bookworm}
fi
if [ $cargo_build -eq 1 ]; then
  log "cargo build --release (loadstar-scorer, loadstar-agent)"
  cargo build -q --release --locked -p loadstar-scorer -p loadstar-agent
fi

ctx=$(mktemp -d -t loadstar-images.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
for name in scorer agent; do
  bin="$TARGET/loadstar-$name"
  [ -x "$bin" ] || { log "missing $bin: run without --no-cargo, or cargo build --release"; exit 1; }
  # Symbols and debug info are not shipped (a third of the binary); the binary itself is
  # what cargo built.
  strip -o "$ctx/loadstar-$name" "$bin"
  image="$REPO/loadstar-$name:$VERSION"
  log "building $image from $bin on $base"
  podman build -q --pull=never -f "deploy/images/$name.Containerfile" \
    --build-arg BASE_IMAGE="$base" --build-arg VERSION="$VERSION" \
    --build-arg REVISION="$REVISION" --build-arg CREATED="$CREATED" --build-arg SOURCE="$SOURCE" \
    -t "$image" "$ctx" >/dev/null
  size=$(podman image inspect "$image" --format '{{.Size}}')
  log "$image: $(awk -v s="$size" 'BEGIN{printf "%.1f MB", s/1e6}') uncompressed"
  if [ -n "$save" ]; then
    mkdir -p "$save"
    podman save -q --format docker-archive -o "$save/loadstar-$name.tar" "$image"
    log "saved $save/loadstar-$name.tar"
  fi
done
