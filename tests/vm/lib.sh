# shellcheck shell=bash
# What tests/vm/prepare and tests/vm/run share (sourced by both, bash).
#
# The guest's files live in one cache directory, one subdirectory per
# kernel version (Debian 12's linux-image-amd64 names the package):
#
#   $VM_CACHE/current            -> 6.1.0-57-amd64 (the version prepare fetched last)
#   $VM_CACHE/<ver>/root/        the kernel package, extracted (never installed on the host)
#   $VM_CACHE/<ver>/root/boot/vmlinuz-<ver>, and vmlinux-<ver>: its ELF, booted (PVH)
#   $VM_CACHE/<ver>/root/lib/modules/<ver>/   with modules.dep (depmod), bound in the guest
#   $VM_CACHE/<ver>/initramfs-<key>.cpio.gz   busybox, tests/vm/init, the boot modules;
#                                key: a hash of those inputs, rebuilt when one changes
#   $VM_CACHE/kvm-verdict        whether /dev/kvm runs a guest here (tests/vm/run probes once)

VM_CACHE=${SANDBOXD_VM_CACHE:-/var/cache/sandboxd-test-vm}
VM_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Loaded by tests/vm/init in this order: virtio-pci, the 9p transport and
# file system (with netfs and fscache, which 9p needs on Debian's 6.1) and
# overlayfs.
VM_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p overlay"
VM_BUSYBOX=${SANDBOXD_VM_BUSYBOX:-/bin/busybox}
QEMU=${SANDBOXD_VM_QEMU:-qemu-system-x86_64}

vm_say() { echo "tests/vm: $*" >&2; }

# The kernel version prepare fetched last, if its tree is complete.
vm_version() {
  local ver
  ver=$(readlink "$VM_CACHE/current" 2>/dev/null) || return 1
  [ -e "$VM_CACHE/$ver/.extracted" ] || return 1
  printf '%s\n' "$ver"
}

# The kernel to boot from tree $1: boot/vmlinux-<ver>, the ELF inside
# Debian's bzImage, made once, when it carries a PVH entry (Xen's
# PHYS32_ENTRY note, CONFIG_PVH): QEMU starts it directly, without the
# bzImage's real-mode setup and xz decompression, which under TCG take
# most of the boot. The bzImage otherwise. Local only. Prints the path.
vm_kernel() {
  local dir=$1 ver bz elf off
  ver=$(basename "$dir")
  bz=$dir/root/boot/vmlinuz-$ver
  elf=$dir/root/boot/vmlinux-$ver
  if [ ! -s "$elf" ] && [ ! -e "$elf.none" ]; then
    # The payload's xz stream (Debian 12 builds with CONFIG_KERNEL_XZ);
    # xz complains about what follows it, the ELF is whole all the same.
    off=$(LC_ALL=C grep -aboP '\xfd7zXZ\x00' "$bz" | head -n1 | cut -d: -f1)
    if [ -n "$off" ] && tail -c "+$((off + 1))" "$bz" | xz -dcq >"$elf.tmp" 2>/dev/null; [ -n "$off" ] &&
      LC_ALL=C readelf -n "$elf.tmp" 2>/dev/null | grep -q 'Xen.*(0x00000012)'; then
      mv -f "$elf.tmp" "$elf"
    else
      rm -f "$elf.tmp"
      : >"$elf.none" 2>/dev/null || true
    fi
  fi
  if [ -s "$elf" ]; then printf '%s\n' "$elf"; else printf '%s\n' "$bz"; fi
}

# The initramfs for kernel tree $1 (a version directory), built when the
# inputs changed: busybox (static), tests/vm/init and the modules of
# VM_MODULES, decompressed (busybox's insmod is given plain .ko files
# whatever compression the kernel package uses). Local only: no network.
# Prints the initramfs's path.
vm_initramfs() {
  local dir=$1 ver key out stage m ko mods
  ver=$(basename "$dir")
  mods=$dir/root/lib/modules/$ver
  key=$( { cat "$VM_HERE/init" "$VM_BUSYBOX"; echo "$VM_MODULES"; } | sha256sum | cut -c1-16)
  out=$dir/initramfs-$key.cpio.gz
  if [ -s "$out" ]; then
    printf '%s\n' "$out"
    return 0
  fi
  # The initramfs has no libc: a dynamic busybox would leave no init.
  if [ ! -x "$VM_BUSYBOX" ] || LC_ALL=C readelf -l "$VM_BUSYBOX" 2>/dev/null | grep -q 'program interpreter'; then
    vm_say "$VM_BUSYBOX is missing or not statically linked (scripts/deps installs busybox-static)"
    return 1
  fi
  stage=$(mktemp -d "$dir/.initramfs.XXXXXX") || return 1
  mkdir -p "$stage"/{bin,dev,proc,sys,modules}
  cp "$VM_BUSYBOX" "$stage/bin/busybox"
  cp "$VM_HERE/init" "$stage/init"
  chmod 0755 "$stage/init" "$stage/bin/busybox"
  for m in $VM_MODULES; do
    ko=$(find "$mods/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" | head -n1)
    if [ -z "$ko" ]; then
      # Built into this kernel: nothing to load.
      if grep -q "/$m\.ko\$" "$mods/modules.builtin" 2>/dev/null; then continue; fi
      vm_say "module $m is neither in $mods/kernel nor built in"
      rm -rf "$stage"
      return 1
    fi
    case $ko in
      *.xz) xz -dc "$ko" >"$stage/modules/$m.ko" ;;
      *.zst) zstd -qdc "$ko" >"$stage/modules/$m.ko" ;;
      *.gz) gzip -dc "$ko" >"$stage/modules/$m.ko" ;;
      *) cp "$ko" "$stage/modules/$m.ko" ;;
    esac || { rm -rf "$stage"; return 1; }
    echo "$m" >>"$stage/modules/order"
  done
  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | "$VM_BUSYBOX" cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$stage.cpio.gz" || {
    rm -rf "$stage" "$stage.cpio.gz"
    return 1
  }
  rm -rf "$stage"
  # Atomic: a run that starts meanwhile sees the old file or the new one.
  mv -f "$stage.cpio.gz" "$out"
  find "$dir" -maxdepth 1 -name 'initramfs-*.cpio.gz' ! -name "$(basename "$out")" -delete 2>/dev/null || true
  printf '%s\n' "$out"
}

# The accelerator: kvm only when /dev/kvm runs a guest here. Nested KVM on
# some machines opens /dev/kvm but never runs a guest, so the answer is a
# probe (boot the initramfs with sandboxd_vm.probe: its init prints a line
# and powers off at once) with a short deadline, cached per host kernel,
# QEMU and guest kernel. SANDBOXD_VM_ACCEL=kvm|tcg overrides.
vm_accel() {
  local kernel=$1 initrd=$2 key verdict log
  if [ -n "${SANDBOXD_VM_ACCEL:-}" ]; then
    printf '%s\n' "$SANDBOXD_VM_ACCEL"
    return 0
  fi
  if [ ! -c /dev/kvm ] || [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
    echo tcg
    return 0
  fi
  key="$(uname -r) $("$QEMU" --version | head -n1) $(basename "$kernel")"
  if [ -r "$VM_CACHE/kvm-verdict" ] && [ "$(head -n1 "$VM_CACHE/kvm-verdict")" = "$key" ]; then
    sed -n 2p "$VM_CACHE/kvm-verdict"
    return 0
  fi
  log=$(mktemp)
  verdict=tcg
  # KVM boots this to its first line in well under a second; a host whose
  # KVM does not run guests never prints it.
  timeout -s KILL "${SANDBOXD_VM_KVM_PROBE_S:-15}" "$QEMU" -accel kvm -cpu host -m 256 -smp 1 \
    -kernel "$kernel" -initrd "$initrd" -append "console=ttyS0 panic=-1 loglevel=3 sandboxd_vm.probe" \
    -nographic -serial stdio -monitor none -nic none -no-reboot </dev/null >"$log" 2>&1 || true
  grep -q 'sandboxd-vm: PROBE-OK' "$log" && verdict=kvm
  rm -f "$log"
  { printf '%s\n%s\n' "$key" "$verdict" >"$VM_CACHE/kvm-verdict.$$" &&
    mv -f "$VM_CACHE/kvm-verdict.$$" "$VM_CACHE/kvm-verdict"; } 2>/dev/null || rm -f "$VM_CACHE/kvm-verdict.$$"
  [ "$verdict" = kvm ] || vm_say "/dev/kvm does not run a guest here; using TCG (cached in $VM_CACHE/kvm-verdict)"
  printf '%s\n' "$verdict"
}
