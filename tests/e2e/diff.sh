#!/usr/bin/env bash
#! The full differential run (issue #13): kube-scheduler v1.20.2 and Loadstar's filters must
#! find identical feasible node sets in every generated scenario. Sets up the same throwaway
#! cluster as run.sh (etcd + kube-apiserver via cluster.sh, the scorer's RBAC and token) and
#! runs only the e2e_diff test; prints each disagreement, a per-feature tally and
#! "N/N scenarios identical".
#! Preemption scenarios follow (nominated node and victims must match too).
#! Usage: tests/e2e/diff.sh [SCENARIOS [PREEMPTION]] [test-binary args...]
#!   (SCENARIOS default 500, PREEMPTION default 150)
#! Environment: LOADSTAR_DIFF_SCENARIOS / LOADSTAR_DIFF_PREEMPTION (instead of the
#! arguments), LOADSTAR_DIFF_SEED (decimal or 0x…), LOADSTAR_DIFF_ONLY=<index> or
#! LOADSTAR_DIFF_ONLY_PREEMPTION=<index> (one scenario of that seed).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
  LOADSTAR_DIFF_SCENARIOS=$1
  shift
  if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
    LOADSTAR_DIFF_PREEMPTION=$1
    shift
  fi
fi
export LOADSTAR_DIFF_SCENARIOS="${LOADSTAR_DIFF_SCENARIOS:-500}"
export LOADSTAR_DIFF_PREEMPTION="${LOADSTAR_DIFF_PREEMPTION:-150}"
export LOADSTAR_E2E_SUITES=e2e_diff
exec bash tests/e2e/run.sh "$@"
