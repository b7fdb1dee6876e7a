#!/usr/bin/env bash
# The long Postgres fleet run: 8 worker processes on 32 sessions, with
# SIGKILLs, a worker SIGSTOPped past its lease and a server restart, then
# the restart test of a single writer. Both restart the shared server
# (pg_ctlcluster … main restart), so nothing else should be using it.
#
#   crates/cairn-postgres/fleet.sh            # from the repository root
#   CAIRN_TEST_POSTGRES_URL=postgres://... crates/cairn-postgres/fleet.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CAIRN_FLEET=long cargo test -p cairn-postgres --release --test fleet -- --nocapture --test-threads=1
cargo test -p cairn-postgres --release --test postgres -- --ignored --nocapture
