#!/usr/bin/env bash
#! The fault scenarios of issue #17 (tests/tests/e2e_faults.rs) on the throwaway control plane
#! of tests/e2e/run.sh: the leader killed with SIGKILL mid-burst (against an uninterrupted run
#! in the same invocation), kube-apiserver killed and restarted mid-burst, etcd killed and
#! restarted mid-burst, watches expired by an etcd compaction, agents partitioned from the
#! scorer (iptables; root) and healed, and the scorer killed under connected agents. Each
#! prints `[faults] …` lines with its figures.
#! Usage: tests/e2e/faults/run.sh [--full] [test-name-filter…]
#!   default: the CI size, 200 nodes and 1 000 pending pods per burst, 500 agents;
#!   --full:  1 000 nodes, 5 000 pods, 5 000 agents and a 30 s partition (the issue's size).
#! Environment: LOADSTAR_FAULTS_NODES, LOADSTAR_FAULTS_PODS, LOADSTAR_FAULTS_AGENTS,
#! LOADSTAR_FAULTS_APISERVER_DOWN (seconds, default 10), LOADSTAR_FAULTS_PARTITION (seconds,
#! default 20) override the sizes.
set -euo pipefail
cd "$(dirname "$0")/../../.."
if [ "${1:-}" = "--full" ]; then
  shift
  export LOADSTAR_FAULTS_NODES="${LOADSTAR_FAULTS_NODES:-1000}"
  export LOADSTAR_FAULTS_PODS="${LOADSTAR_FAULTS_PODS:-5000}"
  export LOADSTAR_FAULTS_AGENTS="${LOADSTAR_FAULTS_AGENTS:-5000}"
  export LOADSTAR_FAULTS_PARTITION="${LOADSTAR_FAULTS_PARTITION:-30}"
  # 5 000 agents hold 5 000 connections in the test process.
  ulimit -n 65536 2>/dev/null || true
fi
export LOADSTAR_E2E_SUITES=e2e_faults
exec bash tests/e2e/run.sh "$@"
