#!/usr/bin/env bash
# Ingest capacity of the scorer: N simulated agents, each its own report stream at 1 Hz
# (spread over --connections HTTP/2 connections), against a release `loadstar-scorer serve`
# on loopback. Prints, per N: the scorer's CPU (cores), accepted/rejected/delayed reports,
# ack latency and the p99 lag from a report's sample time to its visibility (WatchNodes), and
# the scorer's peak RSS (also per agent, and anonymous vs file pages). On a machine with 2+
# CPUs the scorer runs on CPU 0 and the load generator on CPU 1 (taskset), so the
# generator's cost is not counted against the scorer.
# The simulated agents ask for acks as the agent does by default (every 10 s; ACK_INTERVAL=0
# for an ack per report, as before 2026-11-27's sparse acks).
# Usage: bench/scorer-ingest.sh [N ...]   (default: 1000 2500 5000 7500 10000)
# SKIP_BUILD=1 runs the binaries already in ${CARGO_TARGET_DIR:-target}/release (to compare builds).
set -euo pipefail
cd "$(dirname "$0")/.."
counts=("$@"); [ ${#counts[@]} -gt 0 ] || counts=(1000 2500 5000 7500 10000)
DURATION=${DURATION:-30}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p loadstar-scorer --bin loadstar-scorer -p loadstar-testkit --bin loadstar-loadgen
bin=${CARGO_TARGET_DIR:-target}/release
port=$((20000 + RANDOM % 20000))
for n in "${counts[@]}"; do
  # The scorer starts from a binary not in the page cache, so runs compare: the code pages it
  # maps (RSS file pages) depend on what the cache holds, by ~1 MB between a freshly written
  # binary and one read back from disk, which would swamp builds compared by RSS. (`sync`
  # first: the cache keeps a just-built binary's dirty pages.)
  sync "$bin/loadstar-scorer"
  dd if="$bin/loadstar-scorer" iflag=nocache count=0 status=none
  pin0=(); pin1=()
  if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then pin0=(taskset -c 0); pin1=(taskset -c 1); fi
  "${pin0[@]}" "$bin/loadstar-scorer" serve --insecure-allow-unauthenticated --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 \
    > /tmp/loadstar-ingest-scorer.log 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  echo "== $n agents"
  RUST_LOG=warn "${pin1[@]}" "$bin/loadstar-loadgen" --scorer "http://127.0.0.1:$port" --agents "$n" \
    --connections $(( (n + 99) / 100 )) --duration "$DURATION" --warmup 5 --scorer-pid "$pid" \
    ${ACK_INTERVAL:+--ack-interval "$ACK_INTERVAL"}
  echo "scorer_peak_rss          $(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status)"
  # Issue #21's memory figure (peak RSS / agents, KiB), and the RSS at the end split into
  # anonymous memory (heap, stacks) and file pages (the binary's code and libraries touched).
  echo "scorer_peak_rss_per_node $(awk -v n="$n" '/VmHWM/ {printf "%.2f kB", $2 / n}' /proc/$pid/status)"
  echo "scorer_rss_anon_file     $(awk '/RssAnon|RssFile/ {printf "%s %s kB  ", $1, $2}' /proc/$pid/status)"
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
done
