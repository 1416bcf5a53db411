#!/usr/bin/env bash
# The cloud-init path on a real guest: a small bootable Debian image (debootstrap, Debian's
# linux-image-amd64 and cloud-init, the halite-minion .deb) booted with qemu under software
# emulation, with a NoCloud seed carrying exactly the user_data `halite key token create
# --user-data` printed. Checks that the guest's minion enrolls with its token, that `halite run
# <id> grains.items` answers with the guest's own grains, and that a software deployment created
# for the server before it booted completes with its outputs. Prints the timings.
#
#   bash scripts/vm-test.sh          # about 10 minutes the first time (the image is cached)
#
# Not part of scripts/test.sh (it needs several minutes of emulated boot); docs/benchmarks.md
# has its last result. The guest's network is qemu's user-mode network: the guest reaches the
# master, listening on the host's loopback, at 10.0.2.2, and nothing else reaches the guest.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in debootstrap:debootstrap qemu-system-x86_64:qemu-system-x86 mkfs.vfat:dosfstools mcopy:mtools mkfs.ext4:e2fsprogs; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update && apt-get install -y "${need[@]}"
fi

cargo build --bins
bins=target/debug
vm=target/vm
mkdir -p "$vm"
rootfs=$vm/rootfs
started=$(date +%s.%N)
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }

# 1. The image: a Debian root with a kernel, cloud-init and systemd-networkd, cached; the
#    minion package installed fresh each run.
if [ ! -f "$rootfs/.complete" ]; then
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=systemd-sysv,udev,kmod,iproute2,ca-certificates \
    bookworm "$rootfs" http://deb.debian.org/debian
  # apt, not debootstrap, resolves the kernel's and cloud-init's dependencies (virtual
  # packages among them).
  chroot "$rootfs" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends linux-image-amd64 cloud-init' >/dev/null
  touch "$rootfs/.complete"
fi
bash scripts/package.sh deb --only halite-minion --bin-dir "$bins" --out "$vm"
deb=$(ls "$vm"/halite-minion_*_amd64.deb | tail -1)
cp "$deb" "$rootfs/tmp/halite-minion.deb"
chroot "$rootfs" sh -c 'dpkg --purge halite-minion >/dev/null 2>&1 || true; rm -rf /var/lib/halite /etc/halite; dpkg -i /tmp/halite-minion.deb >/dev/null'
rm "$rootfs/tmp/halite-minion.deb"
# The image's role: Heat deployments (the policy a vendor bakes in).
cat > "$rootfs/etc/halite/minion.toml" <<'TOML'
[policy]
allow = ["deploy.apply"]
TOML
echo '/dev/vda / ext4 defaults 0 1' > "$rootfs/etc/fstab"
mkdir -p "$rootfs/etc/systemd/network" "$rootfs/etc/cloud/cloud.cfg.d"
printf '[Match]\nName=en* eth*\n[Network]\nDHCP=yes\n' > "$rootfs/etc/systemd/network/80-dhcp.network"
chroot "$rootfs" systemctl enable systemd-networkd >/dev/null 2>&1
# cloud-init reads the NoCloud seed only; the network is systemd-networkd's DHCP.
printf 'datasource_list: [ NoCloud, None ]\nnetwork: {config: disabled}\n' > "$rootfs/etc/cloud/cloud.cfg.d/90-halite-test.cfg"
rm -rf "$rootfs/var/lib/cloud"
kernel=$(ls "$rootfs"/boot/vmlinuz-* | tail -1)
initrd=$(ls "$rootfs"/boot/initrd.img-* | tail -1)
rm -f "$vm/root.raw"
mkfs.ext4 -q -L root -d "$rootfs" "$vm/root.raw" 3G
image_built=$(elapsed "$started")

# 2. A master on the host's loopback, a config and a deployment for the server not yet booted.
work=$(mktemp -d)
master_pid=""
qemu_pid=""
cleanup() {
  [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null || true
  [ -n "$master_pid" ] && kill "$master_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'listen = "127.0.0.1:%s"\nstate_dir = "%s/master"\nlog = "info"\n' "$port" "$work" > "$work/master.toml"
"$bins/halite-master" --config "$work/master.toml" 2> "$work/master.log" &
master_pid=$!
halite() { "$bins/halite" --config "$work/master.toml" "$@"; }
for _ in $(seq 100); do halite key list >/dev/null 2>&1 && break; sleep 0.1; done
server=vm-halite-1
cat > "$work/greet.sh" <<'SH'
#!/bin/sh
echo "deploying to $(hostname)"
printf '%s from %s' "$greeting" "$(hostname)" > "$heat_outputs_path.result"
SH
config_id=$(halite config create greet --file "$work/greet.sh" --input greeting=hello --output result --out json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
deployment_id=$(halite deployment create "$config_id" "$server" --input greeting=bonjour --out json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

# 3. The NoCloud seed: exactly the user_data the CLI printed, the guest reaching the master at
#    10.0.2.2 (qemu's alias for the host's loopback).
halite key token create --minion "$server" --ttl 1h --user-data --master-address "10.0.2.2:$port" > "$work/user-data"
printf 'instance-id: %s\nlocal-hostname: %s\n' "$server" "$server" > "$work/meta-data"
rm -f "$vm/seed.img"
mkfs.vfat -n CIDATA -C "$vm/seed.img" 1024 >/dev/null
mcopy -i "$vm/seed.img" "$work/user-data" "$work/meta-data" ::/

# 4. Boot.
booted=$(date +%s.%N)
qemu-system-x86_64 -m 1024 -smp 2 -nographic -no-reboot \
  -kernel "$kernel" -initrd "$initrd" -append "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet" \
  -drive "file=$vm/root.raw,format=raw,if=virtio" -drive "file=$vm/seed.img,format=raw,if=virtio" \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
  -serial "file:$vm/console.log" -monitor none > /dev/null 2>&1 &
qemu_pid=$!

wait_until() { # wait_until SECONDS WHAT COMMAND...
  local limit=$1 what=$2
  shift 2
  for _ in $(seq $((limit * 2))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    kill -0 "$qemu_pid" 2>/dev/null || { echo "the guest stopped; its console: $vm/console.log" >&2; exit 1; }
    sleep 0.5
  done
  echo "timed out waiting for $what; the guest's console: $vm/console.log" >&2
  exit 1
}
connected() { halite minions list --out json | python3 -c "import json,sys; sys.exit(0 if any(m['id']=='$server' and m['connected'] for m in json.load(sys.stdin)) else 1)"; }
wait_until 900 "the guest's minion to enroll" connected
enrolled=$(elapsed "$booted")

# 5. The guest's own grains, and the deployment it was given before it existed.
grains=$(halite run "$server" grains.items --out json)
echo "$grains" | python3 -c "
import json, sys
result = json.load(sys.stdin)['minions']['$server']
assert result['state'] == 'returned', result
grains = result['return']
assert grains['hostname'] == '$server', grains
assert grains['kernel'] == 'Linux' and grains['os'] == 'Debian', grains
print('guest grains: hostname', grains['hostname'], '| os', grains['os'], grains.get('osrelease', ''))
"
halite deployment wait "$deployment_id" --timeout 10m >/dev/null
complete=$(elapsed "$booted")
halite deployment show "$deployment_id" --out json | python3 -c "
import json, sys
d = json.load(sys.stdin)
assert d['status'] == 'COMPLETE', d
assert d['output_values']['result'] == 'bonjour from $server', d['output_values']
print('deployment', d['status'], '| result:', d['output_values']['result'])
"
tokens=$(halite key list --out json)
echo "$tokens" | python3 -c "import json,sys; keys=json.load(sys.stdin); assert any(k['id']=='$server' and k['state']=='accepted' for k in keys), keys"

echo "image built or reused: ${image_built} s; boot -> enrolled: ${enrolled} s; boot -> deployment COMPLETE: ${complete} s"
