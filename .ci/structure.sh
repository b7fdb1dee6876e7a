#!/usr/bin/env bash
# The crate structure's rules, checked (a part of .ci/run; runs alone too):
#   - no import circle between the modules of the core, the agent or the
#     SQL crates (.ci/module-cycles.py says what counts as an import);
#   - no source file under crates/*/src over 800 lines;
#   - no function over 150 lines outside tests (clippy's too_many_lines,
#     whose threshold clippy.toml sets; it counts lines of code, not
#     comments or blank lines, and test code is not built without --tests).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 .ci/module-cycles.py

long=$(find crates/*/src -name '*.rs' -print0 | xargs -0 wc -l | awk '$2 != "total" && $1 > 800')
if [ -n "$long" ]; then
  echo "source files over 800 lines (split them by job):" >&2
  echo "$long" >&2
  exit 1
fi
echo "no source file over 800 lines"

cargo clippy --workspace --lib --bins --locked -- -D clippy::too_many_lines
echo "no function over 150 lines outside tests"
