#!/usr/bin/env bash
# Coverage-guided fuzzing of Loadstar's parsers with AFL++ through `cargo afl`, on the stable
# toolchain. Builds the targets, runs each for SECONDS (default 60) with afl-fuzz in
# non-interactive mode from the committed seed corpus (tests/fuzz/corpus/<target>/), prints per
# target the executions and crashes, and exits non-zero if any target crashed (or could not
# be fuzzed).
#
#   tests/fuzz/run.sh [SECONDS] [--targets a,b,...] [--jobs N] [--minimize-corpus] [--build-only]
#
#   --targets          only these targets (default: all, see TARGETS below)
#   --jobs N           fuzz N targets at a time (default 1; each afl-fuzz uses one core)
#   --minimize-corpus  after fuzzing, afl-cmin each target's queue plus its seeds and write the
#                      result back to tests/fuzz/corpus/<target>/ (review before committing)
#   --build-only       install the tools and build the targets, fuzz nothing
#
# Environment: CARGO_TARGET_DIR (default ~/.cache/loadstar/fuzz-target), LOADSTAR_FUZZ_OUT
# (findings, default /tmp/loadstar-fuzz; never inside the repository), LOADSTAR_FUZZ_NICE
# (niceness of builds and fuzzers, default 15).
#
# Needs: rustup's stable toolchain, make and a C compiler (installed with apt-get when missing
# and running as root). cargo-afl is installed once into ~/.cargo/bin and AFL++ is built once
# per rustc version into ~/.local/share/afl.rs; later runs reuse both.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

TARGETS=(cpu meminfo net_dev diskstats cgroup sampler_values quantity node_report profile_yaml
  pod_json score_request extender)
CARGO_AFL_VERSION=0.18.2 # keep in step with the `afl` crate in tests/fuzz/Cargo.lock

seconds=60
jobs=1
minimize=0
build_only=0
selected=()
while [ $# -gt 0 ]; do
  case "$1" in
    --targets) IFS=, read -r -a selected <<<"$2"; shift 2 ;;
    --targets=*) IFS=, read -r -a selected <<<"${1#--targets=}"; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#--jobs=}"; shift ;;
    --minimize-corpus) minimize=1; shift ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,24p' "$HERE/run.sh" | sed 's/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) seconds="$1"; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#selected[@]} -gt 0 ] || selected=("${TARGETS[@]}")
for t in "${selected[@]}"; do
  [[ " ${TARGETS[*]} " == *" $t "* ]] || { echo "run.sh: unknown target $t" >&2; exit 2; }
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loadstar/fuzz-target}"
OUT="${LOADSTAR_FUZZ_OUT:-/tmp/loadstar-fuzz}"
case "$(realpath -m "$OUT")/" in
  "$(realpath -m "$HERE/..")"/*) echo "run.sh: findings dir $OUT is inside the repository" >&2; exit 2 ;;
esac
NICE=(nice -n "${LOADSTAR_FUZZ_NICE:-15}")
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

log() { printf '[fuzz %(%H:%M:%S)T] %s\n' -1 "$*"; }

# --- tools -----------------------------------------------------------------------------------
ensure_tools() {
  command -v cargo >/dev/null || { echo "run.sh: cargo not found (install rustup stable)" >&2; exit 1; }
  if ! command -v make >/dev/null || ! command -v cc >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing make and a C compiler (apt-get)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential
    else
      echo "run.sh: make and a C compiler are needed to build AFL++" >&2; exit 1
    fi
  fi
  if ! cargo afl --version 2>/dev/null | grep -q "$CARGO_AFL_VERSION"; then
    log "installing cargo-afl $CARGO_AFL_VERSION (once)"
    "${NICE[@]}" cargo install cargo-afl --locked --version "$CARGO_AFL_VERSION"
  fi
  # Builds AFL++ and its LLVM runtime for this rustc, once; "already built" is success.
  local out
  if ! out="$("${NICE[@]}" cargo afl config --build 2>&1)"; then
    if ! grep -q "already built" <<<"$out"; then
      echo "$out" >&2; echo "run.sh: cargo afl config --build failed" >&2; exit 1
    fi
  fi
}

# --- build -----------------------------------------------------------------------------------
build() {
  local bins=()
  for t in "${selected[@]}"; do bins+=(--bin "$t"); done
  log "building ${#selected[@]} targets into $CARGO_TARGET_DIR"
  "${NICE[@]}" cargo afl build --release --features afl "${bins[@]}"
}

stat_of() { # file key
  sed -n "s/^$2 *: *//p" "$1" 2>/dev/null | head -n1
}

fuzz_one() { # target
  local t="$1" dir="$OUT/$1" bin="$CARGO_TARGET_DIR/release/$1" rc=0
  rm -rf "$dir"
  mkdir -p "$dir"
  AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1 \
    AFL_QUIET=1 AFL_NO_CRASH_README=1 \
    "${NICE[@]}" cargo afl fuzz -i "$HERE/corpus/$t" -o "$dir" -V "$seconds" -t 2000 -m none \
    -- "$bin" >"$dir/afl-fuzz.log" 2>&1 || rc=$?
  echo "$rc" >"$dir/afl-fuzz.rc"
}

afl_bin_dir() { # where cargo-afl put AFL++'s tools for this rustc
  local release hash
  release="$(rustc -vV | sed -n 's/^release: //p')"
  hash="$(rustc -vV | sed -n 's/^commit-hash: //p')"
  echo "${XDG_DATA_HOME:-$HOME/.local/share}/afl.rs/rustc-$release-${hash:0:7}/afl.rs-$CARGO_AFL_VERSION/afl/bin"
}

minimize_one() { # target
  local t="$1" bin="$CARGO_TARGET_DIR/release/$1" tmp aflbin
  local queue="$OUT/$t/default/queue"
  [ -d "$queue" ] || return 0
  aflbin="$(afl_bin_dir)"
  tmp="$(mktemp -d)"
  mkdir "$tmp/in"
  cp "$HERE/corpus/$t"/* "$tmp/in/"
  for f in "$queue"/id:*; do [ -f "$f" ] && cp "$f" "$tmp/in/q-$(sha1sum "$f" | cut -c1-12)"; done
  # The awk afl-cmin: AFL++ 4.40's Python afl-cmin finds no coverage in these persistent-mode
  # binaries and would keep nothing.
  if AFL_SKIP_CPUFREQ=1 AFL_PATH="$aflbin/../lib/afl" PATH="$aflbin:$PATH" "${NICE[@]}" \
    "$aflbin/afl-cmin.awk" -i "$tmp/in" -o "$tmp/out" -t 2000 -m none -- "$bin" \
    >"$OUT/$t/cmin.log" 2>&1 && [ -n "$(ls -A "$tmp/out" 2>/dev/null)" ]; then
    rm -f "$HERE/corpus/$t"/*
    for f in "$tmp/out"/*; do
      local name; name="$(basename "$f")"
      case "$name" in q-*) name="min-$(sha1sum "$f" | cut -c1-12)" ;; esac
      cp "$f" "$HERE/corpus/$t/$name"
    done
    log "$t: corpus minimised to $(ls "$HERE/corpus/$t" | wc -l) files"
  else
    log "$t: afl-cmin failed or kept nothing, corpus left as is (see $OUT/$t/cmin.log)"
  fi
  rm -rf "$tmp"
}

# Every recorded crash (tests/fuzz/crashes/<target>/) must now run clean: a regression check.
replay_crashes() {
  local t f bad=0
  for t in "${selected[@]}"; do
    for f in "$HERE/crashes/$t"/*; do
      [ -f "$f" ] || continue
      if "$CARGO_TARGET_DIR/release/$t" <"$f" >/dev/null 2>&1; then
        log "$t: recorded crash $(basename "$f") now runs clean"
      else
        log "$t: recorded crash $(basename "$f") STILL FAILS"
        bad=1
      fi
    done
  done
  return "$bad"
}

start=$(date +%s)
ensure_tools
build
built=$(date +%s)
log "tools and build: $((built - start)) s"
[ "$build_only" = 1 ] && exit 0
replay_status=0
replay_crashes || replay_status=1

mkdir -p "$OUT"
log "fuzzing ${#selected[@]} targets for $seconds s each, $jobs at a time; findings in $OUT"
running=0
for t in "${selected[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true
done_at=$(date +%s)

status=0
printf '\n%-16s %14s %8s %6s %10s  %s\n' target execs_done crashes hangs corpus_out notes
for t in "${selected[@]}"; do
  dir="$OUT/$t"
  stats="$dir/default/fuzzer_stats"
  rc="$(cat "$dir/afl-fuzz.rc" 2>/dev/null || echo '?')"
  if [ ! -f "$stats" ]; then
    printf '%-16s %14s %8s %6s %10s  %s\n' "$t" - - - - "afl-fuzz failed (rc $rc): see $dir/afl-fuzz.log"
    status=1
    continue
  fi
  execs="$(stat_of "$stats" execs_done)"
  crashes="$(stat_of "$stats" saved_crashes)"
  [ -n "$crashes" ] || crashes="$(stat_of "$stats" unique_crashes)"
  hangs="$(stat_of "$stats" saved_hangs)"
  [ -n "$hangs" ] || hangs="$(stat_of "$stats" unique_hangs)"
  corpus="$(stat_of "$stats" corpus_count)"
  note=""
  if [ "${crashes:-0}" != 0 ]; then
    note="CRASHED: $dir/default/crashes/ (reproduce: $CARGO_TARGET_DIR/release/$t < FILE)"
    status=1
  elif [ "$rc" != 0 ]; then
    note="afl-fuzz exit $rc: see $dir/afl-fuzz.log"
    status=1
  fi
  printf '%-16s %14s %8s %6s %10s  %s\n' "$t" "$execs" "$crashes" "${hangs:-0}" "$corpus" "$note"
done
echo
log "fuzzing: $((done_at - built)) s; total: $((done_at - start)) s"

if [ "$minimize" = 1 ]; then
  for t in "${selected[@]}"; do minimize_one "$t"; done
fi
[ "$replay_status" = 0 ] || status=1
exit "$status"
