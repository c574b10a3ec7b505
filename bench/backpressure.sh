#!/usr/bin/env bash
#! Issue #21's backpressure: does a scorer on a CPU quota stay responsive while AGENTS
#! simulated agents (default 20 000, 1 Hz each) report to it? The release scorer runs on
#! CPU 0 in a cgroup-v1 CPU quota (QUOTA cores, default 0.5); the load generator and the
#! Score probe run on CPU 1 (taskset), so their cost is not the scorer's. Three phases with
#! the same AGENTS nodes, each with `scheduler-bench score-latency` timing 10 Score calls a
#! second (over every node) for PROBE seconds, 15 s after the agents connected:
#!   quiet      the agents reporting every 30 s: the node set, hardly any ingest;
#!   unpaced    the agents at 1 Hz, the scorer asking nothing;
#!   paced      the agents at 1 Hz following the acks (`loadstar-loadgen --follow-pace`),
#!              the scorer pacing them on `--ingest-cpu-budget BUDGET` (default 0.4 core).
#! Prints each phase's Score latency, the reports the scorer accepted, its CPU (as the
#! load generator measures it) and the largest interval it asked for. Needs root (cgroup) and 2 CPUs.
#! Usage: bench/backpressure.sh [AGENTS]   (env: QUOTA, BUDGET, DURATION, PROBE, SKIP_BUILD,
#!        PHASES: which phases to run, default "quiet unpaced paced")
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTS=${1:-20000}
QUOTA=${QUOTA:-0.5}
BUDGET=${BUDGET:-0.4}
DURATION=${DURATION:-40}
PROBE=${PROBE:-20}
# SKIP_BUILD=1 runs the binaries already in ${CARGO_TARGET_DIR:-target}/release (to compare builds).
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p loadstar-scorer --bin loadstar-scorer \
  -p loadstar-testkit --bin loadstar-loadgen -p loadstar-tests --bin scheduler-bench
bin=${CARGO_TARGET_DIR:-target}/release
CG=/sys/fs/cgroup/cpu/loadstar-backpressure
mkdir -p "$CG"
echo 100000 > "$CG/cpu.cfs_period_us"
quota_us=$(python3 -c "print(int($QUOTA * 100000))")
echo "$quota_us" > "$CG/cpu.cfs_quota_us"
port=$((20000 + RANDOM % 20000))
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rmdir "$CG" 2>/dev/null || true; }
trap cleanup EXIT

start_scorer() {  # extra flags…
  taskset -c 0 "$bin/loadstar-scorer" serve --insecure-allow-unauthenticated \
    --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 "$@" > /tmp/loadstar-backpressure.log 2>&1 &
  pid=$!
  echo "$pid" > "$CG/cgroup.procs"
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return; sleep 0.1; done
  echo "scorer did not start" >&2; exit 1
}
stop_scorer() { kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
probe() {  # phase name
  local out
  out=$(taskset -c 1 "$bin/scheduler-bench" --kubeconfig /dev/null score-latency --scorer "http://127.0.0.1:$port" --seconds "$PROBE" --pause-ms 100)
  echo "$1 score $out"
}
load() {  # loadgen flags…
  RUST_LOG=warn taskset -c 1 "$bin/loadstar-loadgen" --scorer "http://127.0.0.1:$port" --agents "$AGENTS" \
    --connections $(( (AGENTS + 99) / 100 )) --duration "$DURATION" --warmup 10 --scorer-pid "$pid" \
    --probe-nodes 50 "$@"
}
phase() {  # name, scorer flags, loadgen flags
  local name=$1 sflags=$2 lflags=$3 lg
  # shellcheck disable=SC2086
  start_scorer $sflags
  lg=$(mktemp)
  # shellcheck disable=SC2086
  load $lflags > "$lg" &
  local lgpid=$!
  sleep 15   # agents connected, scorer loaded (and, paced, slowed down)
  probe "$name"
  wait "$lgpid" || true
  sed "s/^/$name /" "$lg" | grep -E "acks_accepted|acks_rejected|acks_delayed|scorer_cpu|max_paced|visibility_lag_p99|measured_seconds"
  rm -f "$lg"
  stop_scorer
}

echo "== $AGENTS agents; scorer on CPU 0 with a ${QUOTA}-core quota; budget $BUDGET"
for p in ${PHASES:-quiet unpaced paced}; do  # checked before any phase runs
  case $p in quiet|unpaced|paced) ;; *) echo "unknown phase $p (quiet, unpaced, paced)" >&2; exit 2 ;; esac
done
for p in ${PHASES:-quiet unpaced paced}; do
  case $p in
    quiet) phase quiet "" "--interval 30" ;;
    unpaced) phase unpaced "" "" ;;
    paced) phase paced "--ingest-cpu-budget $BUDGET --max-desired-interval-seconds 30" "--follow-pace" ;;
  esac
done
