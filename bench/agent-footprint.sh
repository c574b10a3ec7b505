#!/usr/bin/env bash
# Footprint of the loadstar-agent release binary: sampling every 1 s for DURATION seconds
# (default 60) while streaming to a stub scorer (or to none: `bench/agent-footprint.sh none`).
# Reports average CPU in millicores after a 3 s warm-up (reported separately), measured two
# ways: nanosecond run time summed over the process's threads (/proc/<pid>/task/*/schedstat)
# and utime + stime from /proc/<pid>/stat (10 ms ticks, so ±0.2 mCPU over 60 s); peak RSS
# (VmHWM) and RSS at the end from
# /proc/<pid>/status, the mean sample duration from the agent's own /metrics, and how long
# SIGTERM takes. Targets: <= 3 mCPU, <= 16 MiB peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-stub}
DURATION=${DURATION:-60}
PORT=${PORT:-50561}
METRICS_PORT=${METRICS_PORT:-19911}
WARMUP=3

cargo build --release -q -p loadstar-agent --bin loadstar-agent --example stub_scorer

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

scorer_args=()
if [ "$MODE" = stub ]; then
  ${CARGO_TARGET_DIR:-target}/release/examples/stub_scorer "127.0.0.1:$PORT" --quiet 2>/dev/null &
  pids+=($!)
  sleep 0.5
  scorer_args=(--scorer "http://127.0.0.1:$PORT")
fi

RUST_LOG=warn ${CARGO_TARGET_DIR:-target}/release/loadstar-agent "${scorer_args[@]}" --interval 1s \
  --metrics-addr "127.0.0.1:$METRICS_PORT" &
AGENT=$!
pids+=("$AGENT")

# utime + stime in clock ticks (fields 14 and 15; the command name may contain spaces).
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# Run time in ns over all threads.
runtime_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'; }
now() { date +%s.%N; }
CLK=$(getconf CLK_TCK)

start=$(now)
sleep "$WARMUP"
t0=$(now); c0=$(ticks "$AGENT"); n0=$(runtime_ns "$AGENT")
sleep "$DURATION"
t1=$(now); c1=$(ticks "$AGENT"); n1=$(runtime_ns "$AGENT")

hwm_kb=$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT/status")
rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$AGENT/status")
threads=$(awk '/^Threads/ {print $2}' "/proc/$AGENT/status")
metrics=$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" || true)
samples=$(awk '/^loadstar_agent_samples_total/ {print $2}' <<<"$metrics")
dur_sum=$(awk '/^loadstar_agent_sample_duration_seconds_sum/ {print $2}' <<<"$metrics")
sent=$(awk '/^loadstar_agent_reports_sent_total/ {s += $2} END {print s + 0}' <<<"$metrics")

stop=$(now)
kill -TERM "$AGENT"
wait "$AGENT" || true
stopped=$(now)

awk -v n0="$n0" -v n1="$n1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v start="$start" -v clk="$CLK" \
    -v hwm="$hwm_kb" -v rss="$rss_kb" -v samples="$samples" -v dsum="$dur_sum" \
    -v sent="$sent" -v threads="$threads" -v mode="$MODE" -v stop="$stop" -v stopped="$stopped" 'BEGIN {
  printf "mode:                 %s scorer, --interval 1s, %.0f s measured after %.0f s warm-up\n", mode, t1 - t0, t0 - start
  printf "warm-up CPU:          %.1f ms (startup and first samples, schedstat)\n", n0 / 1e6
  printf "average CPU:          %.3f mCPU (schedstat run time, all threads)\n", (n1 - n0) / 1e9 / (t1 - t0) * 1000
  printf "average CPU (ticks):  %.2f mCPU (%d ticks of 1/%d s over %.1f s)\n", (c1 - c0) / clk / (t1 - t0) * 1000, c1 - c0, clk, t1 - t0
  printf "peak RSS (VmHWM):     %.1f MiB\n", hwm / 1024
  printf "RSS at end (VmRSS):   %.1f MiB\n", rss / 1024
  printf "threads:              %d\n", threads
  if (samples > 0) printf "mean sample duration: %.0f us over %d samples (%d reports sent)\n", dsum / samples * 1e6, samples, sent
  printf "SIGTERM to exit:      %.0f ms\n", (stopped - stop) * 1000
}'
