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

# modules know nothing of the network or crypto; the minion never depends on the master; the
# store knows neither the master's handlers nor the network.
for pair in "halite-modules halite-transport" "halite-store halite-master" "halite-store halite-master-core" "halite-store halite-transport" "halite-minion halite-master" "halite-minion halite-master-core" "halite-client halite-master" "halite-client halite-master-core" "halite-python halite-master" "halite-python halite-master-core"; do
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

# Libraries return typed errors: no `Result<_, String>` and no `map_err(|e| e.to_string())` in
# library source. Binaries (`src/bin/`, binary-only crates), tests (`tests/`, `sim/`, `*tests.rs`,
# files marked `#![cfg(test)]`, `#[cfg(test)] mod … {` blocks to the end of their file) and
# comments are exempt.
lib_source() {
  local dirs=("$@")
  [ ${#dirs[@]} -gt 0 ] || dirs=(protocol/src transport/src targeting/src modules/src minion/src store/src master-core/src master/src client/src python/src)
  find "${dirs[@]}" -name '*.rs' -not -path '*/bin/*' -not -path '*/tests/*' -not -path '*/sim/*' -not -name '*tests.rs' |
    sort | while read -r f; do
      awk -v f="$f" '
        /^[[:space:]]*#!\[cfg\(test\)\]/ { exit }
        held != "" && /^[[:space:]]*#\[/ { held = held "\n" f ":" NR ":" $0; next }
        held != "" && /^[[:space:]]*(pub(\([a-z]+\))?[[:space:]]+)?mod[[:space:]]+[A-Za-z_0-9]+[[:space:]]*\{/ { exit }
        held != "" { print held; held = "" }
        /^[[:space:]]*#\[cfg\(test\)\]/ { held = f ":" NR ":" $0; next }
        { print f ":" NR ":" $0 }
      ' "$f"
    done
}

# Library source without its comment lines (see `lib_source`).
code() {
  lib_source "$@" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'
}
# `Result<…, String>` whose last argument is `String` (nesting up to three levels deep), the
# same wrapped over lines by rustfmt (`Result<` ending a line, `String,` then `>` closing it),
# and the stringly `map_err`.
string_errors() {
  grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' | perl -ne '
    print if /Result<(?:[^<>;]|<(?:[^<>;]|<(?:[^<>;]|<[^<>;]*>)*>)*>)*,\s*String\s*>/
      || /^[^:]+:\d+:\s*String\s*>/ || /map_err\(\|\w+\|\s*\w+\.to_string\(\)\)/;
    my ($at, $code) = /^([^:]+:\d+):(.*)$/ or next;
    push @window, [$at, $code];
    shift @window if @window > 8;
    if ($code =~ /^\s*>/ && @window >= 3 && $window[-2][1] =~ /^\s*String,?\s*$/
      && grep { $_->[1] =~ /Result<\s*$/ } @window[0 .. $#window - 2]) {
      print "$window[-2][0]: Result<…, String> (wrapped)\n";
    }'
}
if lib_source | string_errors | grep .; then
  echo "ARCHITECTURE: a library returns a String error (lines above); give it a typed error" >&2
  fail=1
fi

# The master reads time only through its clock module (`clock.rs`): the core from the clock
# it is given, everything else from `SystemClock`.
if code master/src master-core/src | grep -v '^master/src/clock.rs:' |
  grep -E 'Instant::now|SystemTime::now|\.elapsed\(\)'; then
  echo "ARCHITECTURE: the master reads a clock outside clock.rs (lines above)" >&2
  fail=1
fi

# The master's core (halite-master-core) depends on no I/O crate, and nothing in it is async:
# time, connection events and store answers come in; sends, store calls and outputs go out.
deps=$(cargo tree -p halite-master-core -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
for banned in tokio mio sqlx sqlx-core rusqlite axum hyper rustls tokio-rustls reqwest; do
  if grep -qx "$banned" <<<"$deps"; then
    echo "ARCHITECTURE: halite-master-core depends on $banned" >&2
    fail=1
  fi
done
if code master-core/src | grep -E '\basync\b|\.await\b'; then
  echo "ARCHITECTURE: halite-master-core holds async code (lines above)" >&2
  fail=1
fi

# The master's state owners (master-core/src/core/) do no I/O, await nothing, read no clock and hold
# no `impl Master`: the loop and the files beside the folder act on them.
if code master-core/src/core |
  grep -E 'impl<[^>]*> Master|\.await|Instant::now|SystemTime::now|\.elapsed\(\)|std::fs|tokio::(net|fs)|Store\b'; then
  echo "ARCHITECTURE: a state owner in master-core/src/core acts (lines above)" >&2
  fail=1
fi

# The owners name no handler and nothing the handlers hand the loop: what they may use of the
# master is the store's records, the ACL rules and the in-process sessions' outlet.
if code master-core/src/core |
  grep -oE 'crate::(\{[^}]*\}|[a-z_]+)' | grep -vxE 'crate::(core|store|acl|local_sessions)' | sort -u | grep .; then
  echo "ARCHITECTURE: a state owner in master-core/src/core names the master's other parts (above)" >&2
  fail=1
fi

# A slot changes state only through its owner, `core/slot_moves.rs` (over the table of
# `core/jobs.rs`): nothing else calls the table's moves.
if code master/src master-core/src | grep -vE '^master(-core)?/src/core/(slot_moves|jobs)\.rs:' |
  grep -E '\.(set_state|correct_final)\('; then
  echo "ARCHITECTURE: a slot moved outside core/slot_moves.rs (lines above)" >&2
  fail=1
fi

# A deployment's, a group's and a member's status moves only through their state machines
# (`deploy/lifecycle.rs`, one table each): nothing else assigns one.
if code master/src master-core/src | grep -vE '^master(-core)?/src/deploy/lifecycle.rs:' |
  grep -E '(deployment|group|member|slot)\.status = '; then
  echo "ARCHITECTURE: a deployment's or group's status set outside deploy/lifecycle.rs (lines above)" >&2
  fail=1
fi

# `impl Master` is the loop's alone (`server/`, one file per duty): a handler works at a desk the
# loop lends it (a struct of borrows named `…Desk`) and returns effects.
loop_files='master/src/server/[a-z_]+\.rs:'
if code master/src | grep -E '^[^:]+:[0-9]+:[[:space:]]*impl\b[^{]*\bMaster[[:space:]]*<' |
  grep -vE "^$loop_files"; then
  echo "ARCHITECTURE: a file outside the loop holds impl Master (lines above): lend the handler a desk (server/desks.rs)" >&2
  fail=1
fi

# Handlers do not await: they ask the store (`outputs/asks.rs`) and the loop alone answers. A
# handler's file is one that declares a desk.
handler_files=$(grep -rlE "^pub(\(crate\))? struct [A-Za-z]+Desk<'a>" master/src master-core/src | sort)
# The key registry's rules are a machine the loop drives (`store_calls/keys.rs` makes its calls).
handler_files="$handler_files master-core/src/keys.rs"
if [ -z "$handler_files" ]; then
  echo "ARCHITECTURE: no handler desks found (did their declarations change?)" >&2
  fail=1
fi
for f in $handler_files; do
  if code "$f" | grep -E '\.await|\basync fn\b'; then
    echo "ARCHITECTURE: a handler awaits (lines above): ask the store through outputs/asks.rs" >&2
    fail=1
  fi
  # Nor reads a clock: its desk is given `now` (`clock::Now`) when lent.
  if code "$f" | grep -E 'dyn Clock|\.clock\.|Clock::'; then
    echo "ARCHITECTURE: a handler reads a clock (lines above): use the now its desk is given" >&2
    fail=1
  fi
done

# The minion's core reads no clock: its loop (`daemon.rs`) gives it `now`.
if code minion/src/core |
  grep -E 'Instant::now|SystemTime::now|\.elapsed\(\)'; then
  echo "ARCHITECTURE: the minion's core reads a clock (lines above)" >&2
  fail=1
fi

# No import cycle among the top-level modules of these crates (scripts/module_cycles.py). The
# checker must itself see a cycle planted in a scratch crate, or it checks nothing.
acyclic=(store/src master-core/src master/src)
if ! python3 scripts/module_cycles.py "${acyclic[@]}"; then
  echo "ARCHITECTURE: an import cycle among top-level modules (above)" >&2
  fail=1
fi
planted=$(mktemp -d)
mkdir -p "$planted/src/a"
printf 'mod a;\nmod b;\n' >"$planted/src/lib.rs"
printf 'pub(crate) use crate::{b::{B}};\npub(crate) struct A;\n' >"$planted/src/a/mod.rs"
printf 'pub(crate) struct B(super::a::A);\n' >"$planted/src/b.rs"
if python3 scripts/module_cycles.py "$planted/src" >/dev/null; then
  echo "ARCHITECTURE: scripts/module_cycles.py misses a planted cycle" >&2
  fail=1
fi
rm -rf "$planted"

# The walks ARCHITECTURE.md lists: every file they name exists, and each walk's steps (the
# files after an arrow, and the first) are at most 8, none twice.
if ! python3 - <<'PY'
import os, re, sys
text = open("ARCHITECTURE.md").read()
para = text[text.index("The walks, "):]
para = " ".join(para[: para.index("\n\n")].split())
ok = True
for name in sorted(set(re.findall(r"`([a-z_/]+\.rs)`", para))):
    if not any(os.path.exists(f"{root}/{name}") for root in ("master/src", "master-core/src")):
        print(f"the walks name {name}, which is in neither master/src nor master-core/src")
        ok = False
for walk in ("A return:", "A publish:"):
    body = para[para.index(walk) + len(walk):]
    body = body.split("A publish:")[0]
    steps = [m for m in re.findall(r"(?:^ |→ )`([a-z_/]+\.rs)`", body)]
    if len(steps) > 8 or len(set(steps)) != len(steps):
        print(f"the walk {walk!r} has {len(steps)} steps, or a file twice: {steps}")
        ok = False
    print(walk, len(steps), "steps")
sys.exit(0 if ok else 1)
PY
then
  echo "ARCHITECTURE: the walks are not as listed (above)" >&2
  fail=1
fi

[ "$fail" = 0 ] && echo "architecture invariants hold"
exit "$fail"
