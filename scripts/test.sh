#!/usr/bin/env bash
# The full test suite: unit, property, interoperability (pyzmq) and end-to-end tests.
# Creates .venv with pyzmq on first run; needs python3 with venv (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! .venv/bin/python -c 'import zmq' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check 'pyzmq==27.*'
fi
export HALITE_PYTHON="$PWD/.venv/bin/python"

# The end-to-end tests run the real binaries.
cargo build --workspace --bins

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  # nextest does not run doctests.
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast
fi
