#!/usr/bin/env bash
# Checks the architecture invariants of ARCHITECTURE.md that a machine can check.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

# halite-protocol is sans-IO: no async runtime, no socket crate in its normal dependencies...
deps=$(cargo tree -p halite-protocol -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
for banned in tokio mio socket2 async-std smol libc-socket zeromq zmq; do
  if grep -qx "$banned" <<<"$deps"; then
    echo "ARCHITECTURE: halite-protocol depends on $banned" >&2
    fail=1
  fi
done
# ...and its source opens no sockets or files and reads no clock.
# (Doc comments are skipped: their examples are tests and may read the clock.)
if grep -rnE 'Instant::now|SystemTime::now|std::net::|std::fs::|File::open|TcpStream|UdpSocket' protocol/src |
  grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'; then
  echo "ARCHITECTURE: halite-protocol does I/O or reads a clock (lines above)" >&2
  fail=1
fi

# transport knows nothing of jobs, storage or modules.
deps=$(cargo tree -p halite-transport -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
for banned in halite-modules halite-master halite-minion halite-client rusqlite sqlx postgres; do
  if grep -qx "$banned" <<<"$deps"; then
    echo "ARCHITECTURE: halite-transport depends on $banned" >&2
    fail=1
  fi
done

# modules know nothing of the network or crypto; the minion never depends on the master.
for pair in "halite-modules halite-transport" "halite-minion halite-master" "halite-client halite-master" "halite-python halite-master"; do
  set -- $pair
  if cargo tree -p "$1" -e normal --prefix none --format '{p}' | awk '{print $1}' | grep -qx "$2"; then
    echo "ARCHITECTURE: $1 depends on $2" >&2
    fail=1
  fi
done

# The SDK engines link carries no command-line machinery (that is the CLI crate's).
sdk=$(cargo tree -p halite-client -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
for banned in clap clap_complete anyhow; do
  if grep -qx "$banned" <<<"$sdk"; then
    echo "ARCHITECTURE: halite-client depends on $banned" >&2
    fail=1
  fi
done

direct=$(cargo tree -p halite-modules -e normal --depth 1 --prefix none --format '{p}' | awk '{print $1}')
for banned in snow ed25519-dalek; do
  if grep -qx "$banned" <<<"$direct"; then
    echo "ARCHITECTURE: halite-modules uses $banned directly" >&2
    fail=1
  fi
done

# Library source as it is compiled outside tests, as "file:line: text": files of tests,
# simulations and binaries are skipped, and each file is cut at its `#[cfg(test)]` module.
library_source() {
  find "$@" -name '*.rs' -not -path '*/bin/*' -not -path '*/sim/*' -not -path '*/tests/*' \
    -not -name '*tests.rs' -not -name 'main.rs' | sort | while read -r file; do
    awk -v file="$file" '
      prev ~ /^[[:space:]]*#\[cfg\(test\)\]/ && /^[[:space:]]*(pub(\([a-z]+\))? )?mod [a-z_]+ \{/ { exit }
      { prev = $0; print file ":" NR ": " $0 }' "$file"
  done
}

# The master reads time only through its clock module (`clock.rs`): the core from the clock
# it is given, everything else from `SystemClock`.
if library_source master/src | grep -v '^master/src/clock.rs:' | grep -vE '^[^:]+:[0-9]+: *//' |
  grep -E 'Instant::now|SystemTime::now|\.elapsed\(\)'; then
  echo "ARCHITECTURE: the master reads a clock outside clock.rs (lines above)" >&2
  fail=1
fi

[ "$fail" = 0 ] && echo "architecture invariants hold"
exit "$fail"
