#!/usr/bin/env bash
#! Builds `localhost/loadstar-base:bookworm`, this machine's stand-in for
#! gcr.io/distroless/cc-debian12:nonroot (no registry is reachable here): exactly the Debian
#! bookworm packages that image is made of for a Rust binary — libc6, libgcc-s1, base-files,
#! netbase, tzdata and ca-certificates' bundle — unpacked with `dpkg-deb -x` (no maintainer
#! scripts, no dependencies pulled in: no shell, no perl, no package manager), the same way
#! distroless assembles its images. Usage: base.sh [--force] [--save FILE]
set -euo pipefail
IMAGE=${LOADSTAR_BASE_IMAGE:-localhost/loadstar-base:bookworm}
CACHE="${LOADSTAR_CACHE:-$HOME/.cache/loadstar}/images"
PACKAGES=(base-files netbase tzdata libc6 libgcc-s1 ca-certificates)
log() { printf '[base] %s\n' "$*" >&2; }

force=0; save=""
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --save) save="$2"; shift ;;
    *) echo "usage: $0 [--force] [--save FILE]" >&2; exit 2 ;;
  esac
  shift
done

mkdir -p "$CACHE"
if [ $force -eq 0 ] && podman image exists "$IMAGE"; then
  log "$IMAGE exists (--force rebuilds)"
elif [ $force -eq 0 ] && [ -f "$CACHE/base.tar" ]; then
  log "loading $IMAGE from $CACHE/base.tar"
  podman load -q -i "$CACHE/base.tar" >/dev/null
else
  work=$(mktemp -d -t loadstar-base.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  root="$work/rootfs"
  mkdir -p "$root" "$work/debs"
  log "downloading ${PACKAGES[*]} (bookworm)"
  # apt-get download drops privileges to _apt, which needs to write the directory.
  chmod 755 "$work"; chmod 777 "$work/debs"
  (cd "$work/debs" && apt-get download -q "${PACKAGES[@]}" >/dev/null)
  mkdir -p "$root/var/lib/dpkg/status.d"
  for deb in "$work"/debs/*.deb; do
    pkg=$(dpkg-deb -f "$deb" Package)
    dpkg-deb -x "$deb" "$root"
    # What is installed, where image scanners (trivy, grype) look for it in distroless.
    dpkg-deb -f "$deb" >"$root/var/lib/dpkg/status.d/$pkg"
    log "  $pkg $(dpkg-deb -f "$deb" Version)"
  done
  # ca-certificates' postinst would build the bundle; do what update-ca-certificates does.
  mkdir -p "$root/etc/ssl/certs"
  cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
  # Documentation, manuals, translations and iconv modules: nothing a Rust binary reads.
  rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,common-licenses} \
    "$root"/usr/lib/x86_64-linux-gnu/gconv "$root"/usr/share/ca-certificates
  # Users as in distroless: root, nobody and nonroot (65532), no login shells.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
  printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n' >"$root/etc/nsswitch.conf"
  mkdir -p "$root/tmp" "$root/home/nonroot" "$root/root"
  chmod 1777 "$root/tmp"; chown 65532:65532 "$root/home/nonroot"; chmod 700 "$root/root"
  for forbidden in bin/sh bin/bash usr/bin/dpkg usr/bin/apt; do
    if [ -e "$root/$forbidden" ]; then log "unexpected $forbidden in the base"; exit 1; fi
  done
  log "importing $IMAGE ($(du -sh "$root" | cut -f1))"
  tar --numeric-owner --sort=name -C "$root" -cf "$work/rootfs.tar" .
  podman import -q \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    "$work/rootfs.tar" "$IMAGE" >/dev/null
  podman save -q --format docker-archive -o "$CACHE/base.tar" "$IMAGE"
fi
if [ -n "$save" ]; then podman save -q --format docker-archive -o "$save" "$IMAGE"; fi
podman image inspect "$IMAGE" --format '{{.Size}}' | awk -v i="$IMAGE" '{printf "[base] %s: %.1f MB\n", i, $1/1e6}' >&2
