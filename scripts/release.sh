#!/usr/bin/env bash
# Everything a release ships, for x86_64 and aarch64: the portable binaries (glibc 2.17, their
# floor checked by scripts/portable.sh) and the .deb and .rpm packages made from them
# (scripts/package.sh). One command; each step is also a command of its own.
#
#   bash scripts/release.sh                 # both architectures
#   TARGETS=x86_64-unknown-linux-gnu bash scripts/release.sh
#
# Output: target/<target>/{minion,release}/ (binaries) and target/packages/ (amd64 and arm64
# .deb, x86_64 and aarch64 .rpm).
set -euo pipefail
cd "$(dirname "$0")/.."

for target in ${TARGETS:-x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu}; do
  printf '\n==> %s\n' "$target"
  TARGET=$target bash scripts/portable.sh --all    # the minion, the master and the CLI
  TARGET=$target bash scripts/package.sh
done
printf '\n==> target/packages\n'
ls -l target/packages
