#!/usr/bin/env bash
# Compares builds of the scoring bench (scorer/policy/benches/score.rs) on a noisy machine:
# runs each binary's on-CPU measurement (300 evaluations of the default profile, one pod)
# ROUNDS times, interleaved, and prints min / median per binary (the lower median when
# ROUNDS is even). Builds older than 2026-11-26 ignore LOADSTAR_SCORE_CASES and also run
# their other cases' setups: slower, same figure. Build a binary with
# `cargo bench -p loadstar-policy --bench score --no-run` and copy the printed executable
# aside before changing the code.
# Usage: ROUNDS=6 CASE=5000 bench/score-ab.sh BIN_A BIN_B [...]
set -euo pipefail
ROUNDS=${ROUNDS:-6}
CASE=${CASE:-5000}
[ $# -ge 1 ] || { echo "usage: $0 BIN_A [BIN_B ...]" >&2; exit 2; }
bins=()
for b in "$@"; do bins+=("$(realpath "$b")"); done
set -- "${bins[@]}"
declare -A runs
for _ in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    # A filter matching no benchmark: only the setup (which measures on-CPU time) runs.
    us=$(LOADSTAR_SCORE_CASES="$CASE" "$bin" --bench no-criterion-run 2>&1 |
      sed -n "s|^score_default_profile/$CASE: \([0-9]*\) µs.*|\1|p")
    [ -n "$us" ] || { echo "$bin printed no figure for case $CASE" >&2; exit 1; }
    runs[$bin]="${runs[$bin]:-} $us"
  done
done
for bin in "$@"; do
  # shellcheck disable=SC2086
  printf '%s\n' ${runs[$bin]} | sort -n | awk -v b="$bin" -v all="${runs[$bin]}" \
    '{a[NR] = $1} END {printf "%s: min %d µs, median %d µs over %d runs (%s )\n", b, a[1], a[int((NR + 1) / 2)], NR, all}'
done
