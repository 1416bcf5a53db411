#!/usr/bin/env bash
# Debian and RPM packages: halite-minion (the minion) and halite-master (the master and the
# CLI), with systemd units, example configs under /etc/halite (config files), man pages made
# from the clap definitions (one per program and per command), shell completions and the docs.
#
#   bash scripts/portable.sh --all && bash scripts/package.sh        # release packages
#   bash scripts/package.sh deb --bin-dir target/debug --version 0.1.0 --out DIR
#   bash scripts/portable.sh && bash scripts/package.sh deb --only halite-minion
#
# Binaries come from the portable build (glibc 2.17; scripts/portable.sh) unless --bin-dir
# names a directory holding all three. Output: target/packages/ (or --out).
# DEB_COMPRESSION=gzip makes quicker (larger) .debs, for tests.
set -euo pipefail
cd "$(dirname "$0")/.."

kinds=()
only=""
bin_dir=""
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
out=target/packages
target=${TARGET:-x86_64-unknown-linux-gnu}
while [ $# -gt 0 ]; do
  case "$1" in
    deb|rpm) kinds+=("$1") ;;
    all) kinds+=(deb rpm) ;;
    --bin-dir) bin_dir=$2; shift ;;
    --only) only=$2; shift ;;
    --version) version=$2; shift ;;
    --out) out=$2; shift ;;
    *) echo "usage: $0 [deb|rpm|all] [--only halite-minion|halite-master] [--bin-dir DIR] [--version V] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
[ ${#kinds[@]} -gt 0 ] || kinds=(deb rpm)
case "$only" in
  "") packages=(halite-minion halite-master) ;;
  halite-minion|halite-master) packages=("$only") ;;
  *) echo "--only: halite-minion or halite-master, not $only" >&2; exit 2 ;;
esac
if [ -n "$only" ] && [[ " ${kinds[*]} " == *" rpm "* ]]; then
  echo "--only is for deb: the rpm spec builds both packages" >&2; exit 2
fi

minion_bin=${bin_dir:-target/$target/minion}/halite-minion
master_bin=${bin_dir:-target/$target/release}/halite-master
cli_bin=${bin_dir:-target/$target/release}/halite
needed=()
[[ " ${packages[*]} " == *" halite-minion "* ]] && needed+=("$minion_bin")
[[ " ${packages[*]} " == *" halite-master "* ]] && needed+=("$master_bin" "$cli_bin")
for bin in "${needed[@]}"; do
  [ -x "$bin" ] || { echo "$bin is missing: run scripts/portable.sh --all (or pass --bin-dir)" >&2; exit 1; }
done
case "$target" in
  x86_64-*) deb_arch=amd64 rpm_arch=x86_64 ;;
  aarch64-*) deb_arch=arm64 rpm_arch=aarch64 ;;
  *) echo "unknown target $target" >&2; exit 1 ;;
esac
# The man pages and completions come from running the binaries: another architecture's run
# under qemu's user-mode emulation, with that architecture's C library from Debian.
# Stripping another architecture's binaries takes its binutils.
runner=()
strip_tool=strip
machine=${target%%-*}
if [ "$(uname -m)" != "$machine" ]; then
  command -v "qemu-$machine" >/dev/null && command -v "$machine-linux-gnu-strip" >/dev/null || {
    apt-get update && apt-get install -y qemu-user "libc6-$deb_arch-cross" "binutils-$machine-linux-gnu"; }
  runner=("qemu-$machine" -L "/usr/$machine-linux-gnu")
  strip_tool=$machine-linux-gnu-strip
fi
# Reproducible: every timestamp is the last commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# stage ROOT PACKAGE UNIT_DIR ZSH_DIR: the files of PACKAGE under ROOT (timestamps are set
# once the package's tree is complete, by build_deb and build_rpm).
stage() {
  local root=$1 package=$2 units=$3 zsh=$4 doc=$1/usr/share/doc/$2
  install -d -m 0755 "$root/usr/bin" "$root/$units" "$root/etc/halite" "$doc"
  install -m 0644 dist/debian/copyright "$doc/copyright"
  install -m 0644 README.md docs/operations.md "$doc/"
  printf '%s (%s) unstable; urgency=medium\n\n  * Release %s.\n\n -- halite developers <halite@lists.halite-rpc.org>  %s\n' \
    "$package" "$version" "$version" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n > "$doc/changelog.gz"
  case "$package" in
    halite-minion)
      install -m 0755 "$minion_bin" "$root/usr/bin/halite-minion"
      install -m 0644 docs/modules.md "$doc/"
      man_pages "$root" halite-minion 8
      ;;
    halite-master)
      install -m 0755 "$master_bin" "$root/usr/bin/halite-master"
      install -m 0755 "$cli_bin" "$root/usr/bin/halite"
      install -m 0644 docs/engine-guide.md docs/protocol.md docs/modules.md "$doc/"
      man_pages "$root" halite-master 8
      man_pages "$root" halite 1
      install -d -m 0755 "$root/usr/share/bash-completion/completions" "$root/$zsh" \
        "$root/usr/share/fish/vendor_completions.d"
      "${runner[@]}" "$cli_bin" completions bash > "$root/usr/share/bash-completion/completions/halite"
      "${runner[@]}" "$cli_bin" completions zsh > "$root/$zsh/_halite"
      "${runner[@]}" "$cli_bin" completions fish > "$root/usr/share/fish/vendor_completions.d/halite.fish"
      ;;
  esac
  install -m 0644 "dist/systemd/$package.service" "$root/$units/"
  install -m 0644 "dist/etc/${package#halite-}.toml" "$root/etc/halite/"
  "$strip_tool" --strip-unneeded "$root"/usr/bin/*
  find "$root" -type d -exec chmod 0755 {} +
}

# man_pages ROOT PROGRAM SECTION: the program's page and one per command under it
# (halite-run.1, halite-key-accept.1, ...) from its own clap definition, compressed without a
# name or a time inside (gzip -9n), so the same tree makes the same files.
man_pages() {
  local pages=$work/man/$2
  rm -rf "$pages"
  mkdir -p "$pages"
  "${runner[@]}" "$1/usr/bin/$2" man --dir "$pages"
  [ -f "$pages/$2.$3" ] || { echo "$2 man --dir wrote no $2.$3" >&2; exit 1; }
  install -d -m 0755 "$1/usr/share/man/man$3"
  for page in "$pages"/*."$3"; do
    gzip -9n < "$page" > "$1/usr/share/man/man$3/${page##*/}.gz"
    chmod 0644 "$1/usr/share/man/man$3/${page##*/}.gz"
  done
}

build_deb() {
  local package=$1 root=$work/deb/$1
  stage "$root" "$package" lib/systemd/system usr/share/zsh/vendor-completions
  install -d -m 0755 "$root/DEBIAN"
  local size
  size=$(du -sk --apparent-size "$root" | cut -f1)
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$deb_arch/" -e "s/@SIZE@/$size/" \
    "dist/debian/$package/control" > "$root/DEBIAN/control"
  for script in postinst prerm postrm; do
    install -m 0755 "dist/debian/$package/$script" "$root/DEBIAN/$script"
  done
  (cd "$root" && find etc -type f -printf '/%p\n' | sort) > "$root/DEBIAN/conffiles"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    > "$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group "-Z${DEB_COMPRESSION:-xz}" --build "$root" "$out/${package}_${version}_${deb_arch}.deb" >/dev/null
  echo "$out/${package}_${version}_${deb_arch}.deb"
}

build_rpm() {
  local staged=$work/rpm
  for package in halite-minion halite-master; do
    stage "$staged/$package" "$package" usr/lib/systemd/system usr/share/zsh/site-functions
    rm "$staged/$package/usr/share/doc/$package/changelog.gz"   # rpm keeps its changelog inside
  done
  install -d -m 0700 "$staged/halite-minion/var/lib/halite/minion" "$staged/halite-master/var/lib/halite/master"
  find "$staged" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  # The files are staged as shipped (stripped, man pages compressed): no post-install steps.
  rpmbuild -bb --quiet --target "$rpm_arch" \
    --define "_topdir $work/rpmbuild" --define "staged $staged" --define "halite_version $version" \
    --define "_build_id_links none" --define "use_source_date_epoch_as_buildtime 1" \
    --define "__os_install_post %{nil}" \
    dist/rpm/halite.spec
  find "$work/rpmbuild/RPMS" -name '*.rpm' -exec cp {} "$out/" \; -exec sh -c 'echo "$0/$(basename "$1")"' "$out" {} \;
}

for kind in "${kinds[@]}"; do
  case "$kind" in
    deb)
      command -v dpkg-deb >/dev/null || { echo "dpkg-deb is missing (apt-get install dpkg)" >&2; exit 1; }
      for package in "${packages[@]}"; do
        build_deb "$package"
      done
      ;;
    rpm)
      command -v rpmbuild >/dev/null || { apt-get update && apt-get install -y rpm; }
      build_rpm
      ;;
  esac
done
