#!/usr/bin/env bash
# The full test suite: unit, property, interoperability (pyzmq) and end-to-end tests.
# Creates .venv with pyzmq on first run; needs python3 with venv (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

# System tools the tests use: debootstrap and dpkg-dev (module tests build a Debian root and a
# local apt repository), zip/unzip/xz-utils (archive tests), python3-venv (pyzmq, pip tests),
# openssl and curl (the gateway's HTTPS test makes a certificate and checks it), faketime (minion
# clock-step tests), prometheus (its promtool checks the metrics the master exposes), postgresql (the
# PostgreSQL store and multi-master tests run on a throwaway
# server, scripts/postgres.sh), lintian and rpm (the packages of scripts/package.sh are checked
# and read back), rabbitmq-server (the real Heat's message bus, python/heat_plugin/tests).
need=()
for tool in debootstrap:debootstrap dpkg-scanpackages:dpkg-dev zip:zip unzip:unzip xz:xz-utils openssl:openssl curl:curl faketime:faketime promtool:prometheus lintian:lintian rpmbuild:rpm; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv python3-pip)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v rabbitmq-server >/dev/null 2>&1 || need+=(rabbitmq-server)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update
  apt-get install -y "${need[@]}"
fi

if ! .venv/bin/python -c 'import zmq' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check 'pyzmq==27.*'
fi
# The gateway's OpenAPI document is checked by openapi-spec-validator and by a client that
# openapi-python-client generates from it (tests/tests/openapi_client.rs).
if [ ! -x .venv/bin/openapi-python-client ] || ! .venv/bin/python -c 'import openapi_spec_validator' 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check 'openapi-spec-validator==0.7.*' 'openapi-python-client==0.26.*'
fi
export HALITE_PYTHON="$PWD/.venv/bin/python"

# heat-agents 13.0.0 (its source distribution holds the hooks) for the differential test of
# deploy.apply; PyYAML is what its 55-heat-config imports. Without network the test says so
# and skips.
heat_agents=target/heat-agents/heat_agents-13.0.0
if [ ! -f "$heat_agents/heat-config-script/install.d/hook-script.py" ]; then
  mkdir -p target/heat-agents
  if .venv/bin/pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      'heat-agents==13.0.0' -d target/heat-agents; then
    tar -xzf target/heat-agents/heat_agents-13.0.0.tar.gz -C target/heat-agents
  fi
fi
# PyYAML (YAML 1.1) and ruamel.yaml (YAML 1.2) read back the CLI's YAML output in its property
# test; PyYAML is also what heat-agents' 55-heat-config imports.
.venv/bin/python -c 'import yaml' 2>/dev/null || .venv/bin/pip install --quiet --disable-pip-version-check 'PyYAML==6.*'
.venv/bin/python -c 'import ruamel.yaml' 2>/dev/null || .venv/bin/pip install --quiet --disable-pip-version-check 'ruamel.yaml==0.18.*'
if [ -f "$heat_agents/heat-config-script/install.d/hook-script.py" ]; then
  export HALITE_HEAT_AGENTS="$PWD/$heat_agents"
fi

# One PostgreSQL server for every test that needs one; each makes its own databases in it.
if [ -z "${HALITE_TEST_POSTGRES:-}" ]; then
  pg_dir=$(mktemp -d /tmp/halite-test-pg.XXXXXX)
  trap 'scripts/postgres.sh stop "$pg_dir"; rm -rf "$pg_dir"' EXIT
  HALITE_TEST_POSTGRES=$(scripts/postgres.sh start "$pg_dir")
  export HALITE_TEST_POSTGRES HALITE_TEST_POSTGRES_CA="$pg_dir/ca.crt"
fi

# The end-to-end tests run the real binaries.
cargo build --workspace --bins

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  # nextest does not run doctests.
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast
fi
# The Python SDK (python/): maturin builds its wheel from this workspace (the dev profile,
# sharing the build above) into .venv, and pytest runs it against the real binaries.
# mypy checks the package's type information (python/tests/test_typing.py).
if [ ! -x .venv/bin/maturin ] || ! .venv/bin/python -c 'import pytest, mypy' 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check 'maturin==1.*' 'pytest==8.*' 'mypy==1.*'
fi
rm -f target/wheels/halite-*.whl
(cd python && ../.venv/bin/maturin build --quiet --profile dev --out ../target/wheels)
.venv/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/halite-*-cp39-abi3-*.whl
HALITE_BIN_DIR="$PWD/target/debug" .venv/bin/python -m pytest -q python/tests

# The Heat plugin (python/heat_plugin) inside a real Heat engine: openstack-heat 27.0.1 from
# PyPI with the test requirements its own test framework (heat/tests) imports, in a venv of
# its own (Heat pins much of the OpenStack stack), with the same halite wheel.
# The real heat-engine and heat-api processes (python/heat_plugin/tests/test_real_heat.py) keep
# Heat's database on the PostgreSQL above, through psycopg2.
if ! .venv-heat/bin/python -c 'import heat.tests.common, pytest, psycopg2' 2>/dev/null; then
  python3 -m venv .venv-heat
  .venv-heat/bin/pip install --quiet --disable-pip-version-check 'openstack-heat==27.0.1' \
    'fixtures==4.*' 'oslotest==6.*' 'testscenarios==0.7.*' 'testtools==2.*' 'testresources==2.*' \
    'ddt==1.*' 'pytest==8.*' 'psycopg2-binary==2.9.*'
fi
.venv-heat/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/halite-*-cp39-abi3-*.whl
HALITE_BIN_DIR="$PWD/target/debug" .venv-heat/bin/python -m pytest -q -p no:warnings python/heat_plugin/tests

# The locked-down minion's function set (--no-default-features): every function that runs
# caller-supplied code or writes caller-supplied files is absent from its registry.
cargo test -p halite-modules --no-default-features --lib
