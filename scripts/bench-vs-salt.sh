#!/usr/bin/env bash
# halite and Salt 3008.5 side by side, in one run, on the same machine: the same numbers of
# real minion processes (1, 10, 30), the same measurements; prints how many times faster (or
# smaller) halite is. Salt's harness is ../shared/bench/salt (it installs Salt into a venv on
# first use). Takes about 8 minutes. Results: target/bench-tiers.json, target/salt-results.json,
# target/vs-salt.json.
set -euo pipefail
cd "$(dirname "$0")/.."
salt_bench="${SALT_BENCH_DIR:-../shared/bench/salt}"
[ -x "$salt_bench/run.sh" ] || { echo "no Salt harness at $salt_bench (set SALT_BENCH_DIR)" >&2; exit 1; }

cargo build --release --bins
echo "== halite (real minion processes: 1, 10, 30)"
HALITE_BIN_DIR=target/release ./target/release/bench-tiers
echo "== Salt 3008.5 (real salt-minion processes: 1, 10, 30)"
"$salt_bench/run.sh" --tiers 1,10,30 --swarm 0 --out "$PWD/target/salt-results.json"
echo "== side by side"
python3 scripts/compare-salt.py target/bench-tiers.json target/salt-results.json target/vs-salt.json
