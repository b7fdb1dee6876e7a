#!/usr/bin/env bash
# cairn serve's checks beyond `cargo test`: the web view in headless
# Chromium (Debian's chromium + playwright-core from npm), the OpenAPI
# document against the running server (schemathesis from PyPI, in a venv).
# (The load test is `tests/load.rs`, run by `cargo test`.) Installs what it
# needs, idempotently, under the target directory.
# With CI=true a missing browser is a failure, not a skip.
#
#   bash .ci/serve.sh            # everything
#   bash .ci/serve.sh browser    # one part: browser | schema
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
deps="$target/serve-deps"
artifacts="$target/serve-artifacts"
mkdir -p "$deps" "$artifacts"
what=${1:-all}

cargo build --locked -p cairn-cli
cairn="$(cd "$target/debug" && pwd)/cairn"

browser() {
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || true
    fi
  fi
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then
      echo "chromium is missing and could not be installed: the browser tests cannot run" >&2
      exit 1
    fi
    echo "notice: chromium is missing; skipping the browser tests (CI=true makes this a failure)"
    return
  fi
  if [ ! -f "$deps/node_modules/playwright-core/package.json" ]; then
    npm install --prefix "$deps" --no-audit --no-fund --silent playwright-core@1.65.1
  fi
  CAIRN_BIN="$cairn" PLAYWRIGHT_DIR="$(cd "$deps" && pwd)" CHROMIUM="$(command -v chromium)" \
    CAIRN_ARTIFACTS="$(cd "$artifacts" && pwd)" \
    node --test crates/cairn-server/tests/browser/
  echo "screenshots: $artifacts"
}

schema() {
  venv="$deps/venv"
  if [ ! -x "$venv/bin/schemathesis" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'schemathesis==4.32.5'
  fi
  home=$(mktemp -d)
  token=schemathesis-token-$RANDOM$RANDOM$RANDOM
  "$cairn" --store "$home" serve --listen 127.0.0.1:0 --token "$token" --hold-ms 50 >"$home/addr" &
  server=$!
  trap 'kill $server 2>/dev/null || true; rm -rf "$home"' RETURN
  while [ ! -s "$home/addr" ]; do
    kill -0 $server 2>/dev/null || { echo "cairn serve did not start" >&2; return 1; }
    sleep 0.1
  done
  base=$(head -1 "$home/addr")
  # Streams never end, so they are left to the SSE tests. Schema-valid
  # requests may still break a session's rules (a second open operation, a
  # result for a call that is not on the branch): positive_data_acceptance
  # cannot hold for such an API and is not checked.
  # Run from the scratch directory: schemathesis keeps a cache in its cwd.
  venv_abs=$(cd "$venv" && pwd)
  artifacts_abs=$(cd "$artifacts" && pwd)
  (cd "$home" && "$venv_abs/bin/schemathesis" run "${base}openapi.json" \
    -H "Authorization: Bearer $token" \
    --exclude-path-regex 'stream' \
    --checks all --exclude-checks positive_data_acceptance \
    --max-examples 25 --seed 1 -w 1 \
    --report junit --report-dir "$artifacts_abs/schemathesis")
}

case "$what" in
  all) browser; schema ;;
  browser) browser ;;
  schema) schema ;;
  *) echo "usage: .ci/serve.sh [browser|schema]" >&2; exit 2 ;;
esac
