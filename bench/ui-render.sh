#!/usr/bin/env bash
#! The live view at scale: a release-built standalone scorer with N simulated nodes (default
#! 1 000 and 5 000) reporting every second, the page opened in headless Chromium through
#! chromedriver (tests/tests/ui_browser.rs, the same checks as CI's short run). Prints, per
#! size: time to first contentful paint, to the first frame of tiles and to all tiles; the
#! cost of applying one pushed frame; re-sorting the grid by load.
#! Usage: bench/ui-render.sh [NODES...]   (needs chromium + chromium-driver:
#! tests/e2e/install-deps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
RELEASE_TARGET="${LOADSTAR_RELEASE_TARGET:-$HOME/.cache/loadstar/release-target}"
CARGO_TARGET_DIR="$RELEASE_TARGET" cargo build -q --release -p loadstar-scorer
cargo test -q -p loadstar-tests --test ui_browser --no-run
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1000 5000)
for n in "${sizes[@]}"; do
  echo "== $n nodes"
  LOADSTAR_E2E_SCORER_BIN="$RELEASE_TARGET/release/loadstar-scorer" LOADSTAR_UI_NODES="$n" \
    cargo test -q -p loadstar-tests --test ui_browser -- --ignored --nocapture 2>&1 |
    grep -E '^UI:|test result'
done
