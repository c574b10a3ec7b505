#!/usr/bin/env bash
#! The hostile-client attacks of docs/security.md against a release `loadstar-scorer serve`
#! on loopback, each with 4 simulated agents reporting: 3 000 unread WatchNodes calls on one
#! connection (then again while 10 nodes send ~0.8 MiB reports each second), 500 idle pre-preface connections, two ~4 MB reports then ListNodes from a
#! default client, 30 000 reports on one stream. Prints one JSON line per attack (RSS
#! before/peak/after, health latency during the attack, what the scorer answered) and the
#! scorer log's longest line.
#! Usage: bench/hostile.sh   (figures recorded in bench/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '[hostile] %s\n' "$*" >&2; }

cargo build -q --release -p loadstar-scorer --bin loadstar-scorer
cargo build -q --release -p loadstar-testkit --bin loadstar-loadgen --bin loadstar-attack
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
WORK=$(mktemp -d -t loadstar-hostile.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
ulimit -n 65536 2>/dev/null || true

port=$((20000 + RANDOM % 20000))
SCORER="http://127.0.0.1:$port"
RUST_LOG=info "$BIN/loadstar-scorer" serve --insecure-allow-unauthenticated --listen "127.0.0.1:$port" \
  --metrics-listen 127.0.0.1:0 >"$WORK/scorer.log" 2>&1 &
SPID=$!
PIDS+=("$SPID")
for _ in $(seq 100); do
  grep -q "loadstar-scorer serving" "$WORK/scorer.log" && break
  sleep 0.1
done
RUST_LOG=warn "$BIN/loadstar-loadgen" --scorer "$SCORER" --agents 4 --connections 4 \
  --duration 600 --warmup 0 --probe-nodes 0 >"$WORK/loadgen.log" 2>&1 &
PIDS+=("$!")
sleep 3

attack() {
  log "attack: $*"
  "$BIN/loadstar-attack" --scorer "$SCORER" --scorer-pid "$SPID" "$@"
}
attack watchers --count 3000 --hold 20
attack watchers --count 3000 --hold 20 --large-nodes 10
attack idle --count 500
attack big-reports
attack flood --reports 30000
kill "$SPID" 2>/dev/null || true
longest=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$WORK/scorer.log")
echo "{\"scorer_log_lines\":$(wc -l <"$WORK/scorer.log"),\"longest_log_line_bytes\":$longest}"
