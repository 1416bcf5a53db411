#!/usr/bin/env bash
# Portable Linux binaries: linked against glibc 2.17 (CentOS/RHEL 7 and everything newer:
# Ubuntu 14.04+, Debian 8+, Amazon Linux 2, Rocky/RHEL 8), with Zig as the cross linker
# (ziglang and cargo-zigbuild from PyPI, in .venv-zig). Checks the highest GLIBC_ symbol
# version each binary needs.
#
#   bash scripts/portable.sh           # the minion, size-optimised (profile `minion`)
#   bash scripts/portable.sh --locked  # the locked-down minion (no code-running functions)
#   bash scripts/portable.sh --all     # every binary as shipped: that minion, the master and the CLI
#   bash scripts/portable.sh --wheel   # the Python SDK's abi3 wheel, tagged manylinux2014
#
# Output: target/x86_64-unknown-linux-gnu/{minion,release}/ (the minion in minion/, the master and
# the CLI in release/). For aarch64, the same command with
# TARGET=aarch64-unknown-linux-gnu (the script adds Rust's standard library for it).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${TARGET:-x86_64-unknown-linux-gnu}
FLOOR=2.17

if ! .venv-zig/bin/cargo-zigbuild --version >/dev/null 2>&1; then
  python3 -m venv .venv-zig
  .venv-zig/bin/pip install --quiet --disable-pip-version-check 'ziglang==0.*' 'cargo-zigbuild==0.*'
fi
export PATH="$PWD/.venv-zig/bin:$PATH"
command -v readelf >/dev/null || { apt-get update && apt-get install -y binutils; }
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"

case "${1:-}" in
  --wheel)
    # maturin drives the same Zig linker; the wheel's extension needs glibc 2.17 like the rest.
    [ -x .venv-zig/bin/maturin ] || .venv-zig/bin/pip install --quiet --disable-pip-version-check 'maturin==1.*'
    rm -f target/wheels/halite-*manylinux2014*.whl
    (cd python && ../.venv-zig/bin/maturin build --release --zig --compatibility manylinux2014 \
      --target "$TARGET" --out ../target/wheels)
    wheel=$(ls target/wheels/halite-*manylinux2014*.whl)
    unpacked=$(mktemp -d)
    trap 'rm -rf "$unpacked"' EXIT
    python3 -m zipfile -e "$wheel" "$unpacked"
    bins=("$unpacked/halite/_native.abi3.so")
    ;;
  --all)
    # What the packages ship (scripts/package.sh): the minion size-optimised, as below.
    cargo zigbuild --profile minion -p halite-minion --bin halite-minion --target "$TARGET.$FLOOR"
    cargo zigbuild --release -p halite-master -p halite-cli --bins --target "$TARGET.$FLOOR"
    bins=("target/$TARGET/minion/halite-minion" "target/$TARGET/release/halite-master" "target/$TARGET/release/halite")
    ;;
  --locked)
    cargo zigbuild --profile minion -p halite-minion --bin halite-minion --no-default-features --target "$TARGET.$FLOOR"
    bins=("target/$TARGET/minion/halite-minion")
    ;;
  *)
    cargo zigbuild --profile minion -p halite-minion --bin halite-minion --target "$TARGET.$FLOOR"
    bins=("target/$TARGET/minion/halite-minion")
    ;;
esac

fail=0
for bin in "${bins[@]}"; do
  # readelf reads any architecture's ELF: the highest glibc symbol version the binary needs.
  need=$(readelf --dyn-syms -W "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  size=$(stat -c %s "$bin")
  if [ "$(printf '%s\n%s\n' "$need" "$FLOOR" | sort -V | tail -1)" != "$FLOOR" ]; then
    echo "$bin needs glibc $need, newer than $FLOOR" >&2
    fail=1
  else
    echo "$bin: needs glibc $need at most (floor $FLOOR), $size bytes"
  fi
done
exit $fail
