#!/usr/bin/env bash
# The Python package's CI: builds and installs the wheel the way a user does
# (`pip install ./crates/cairn-py`) into a virtualenv with the pinned test
# tools, then runs the pytest suite (the API, the crash tests, CairnSaver and
# LangGraph's conformance suite with every capability) and mypy --strict.
# Idempotent: reuses the virtualenv and the cargo target dir when present.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=${CAIRN_PY_VENV:-$root/target/py-venv}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r crates/cairn-py/requirements-dev.txt
# The wheel is built by maturin (from PyPI) in pip's isolated build; it
# shares the workspace's target dir, so crates built by earlier steps are reused.
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target} \
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./crates/cairn-py

cd crates/cairn-py
"$venv/bin/python" -m pytest -q
"$venv/bin/python" -m mypy --strict python/cairn examples bench tests
