#!/usr/bin/env bash
# microvm-guest: builds the guest artefacts of the microvm sandbox backend
# (`make microvm-guest`) from Debian packages, with apt-get from the apt
# sources this host already uses: the kernel of linux-image-amd64 (its
# current version, unpacked to vmlinux), the kernel modules a microVM's init loads (virtio over
# MMIO, the virtio console and block device, erofs for the root
# filesystem's image, 9p, FUSE and virtiofs; Debian's cloud kernel
# has no 9p), and the
# static busybox of busybox-static. The backend writes each VM's initramfs
# from them (infra/sandbox/microvm/init.sh is its /init).
#
# Beside them, the VMM: QEMU 10 of Debian 13 (trixie: qemu-system-x86 and
# the libraries it needs, its firmware from qemu-system-data) and the
# virtiofs daemon of the same release (virtiofsd, started by the wrapper
# ./virtiofsd),
# unpacked into vmm/ with Debian 13's own C library and started through it
# by the wrapper ./qemu-system-x86_64, so Debian 12's libraries are not
# touched. Its emulated CPU runs the guest's commands about twice as fast
# as Debian 12's QEMU 7.2 (docs/microvm.md). The packages come from the
# host's own Debian mirror through a private apt state
# (scripts/debian-trixie.sh).
#
# They go to $CACHE/microvm-guest/<hash>/ (symlink $CACHE/microvm-guest/current),
# <hash> the sha256 of this script and the packages' versions: the same
# versions make the same files, and a folder already built is kept (with
# the one current before it; older ones are removed). Offline, a guest
# already built is kept as it is. $CACHE
# is $THREADBOX_CACHE_DIR, else $DATA_DIR/cache, else /var/cache/threadbox,
# as for the sandbox image's root filesystem (build-offline.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
die() { echo "microvm-guest: $*" >&2; exit 1; }

if [ -n "${THREADBOX_CACHE_DIR:-}" ]; then CACHE="$THREADBOX_CACHE_DIR"
elif [ -n "${DATA_DIR:-}" ]; then CACHE="$DATA_DIR/cache"
else CACHE=/var/cache/threadbox; fi
ROOTS="$CACHE/microvm-guest"

# The modules, in the order the init loads them (each after its dependencies).
MODULES="virtio_ring virtio virtio_mmio virtio_console virtio_blk crc32c_generic libcrc32c erofs netfs fscache 9pnet 9pnet_virtio 9p fuse virtiofs"

# keep_built: without a package index to read (offline, or the mirror is
# down), a guest already built serves as it is; else the build fails.
keep_built() {
  if [ -f "$ROOTS/current/.threadbox-complete" ]; then
    echo "microvm-guest: $1; keeping the guest built before, $(readlink -f "$ROOTS/current")" >&2
    exit 0
  fi
  die "$1"
}

candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2; exit}'; }
if [ -z "$(candidate linux-image-amd64)" ] || [ "$(candidate linux-image-amd64)" = "(none)" ]; then
  apt-get update -qq --error-on=any || keep_built "cannot read this host's package index"
fi
kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
[ -n "$kpkg" ] || keep_built "linux-image-amd64 names no kernel package"
kver=$(candidate "$kpkg")
bver=$(candidate busybox-static)
[ -n "$kver" ] && [ "$kver" != "(none)" ] || die "no version of $kpkg"
[ -n "$bver" ] && [ "$bver" != "(none)" ] || die "no version of busybox-static"
# The VMM's packages, every one of them with its version (nothing of
# Debian 13 is installed: apt resolves them over an empty package database).
tx=$(mktemp -d "${TMPDIR:-/tmp}/microvm-vmm.XXXXXX")
trap 'rm -rf "$tx"' EXIT
# shellcheck source=../scripts/debian-trixie.sh
. "$here/../scripts/debian-trixie.sh"
trixie_apt "$tx" || keep_built "cannot read Debian trixie's package index"
VMM_PACKAGES="qemu-system-x86 qemu-system-data virtiofsd"
vmm_uris=$(apt-get "${TRIXIE_APT[@]}" -qq --print-uris install --download-only --no-install-recommends $VMM_PACKAGES | awk '{print $1, $2}' | sort)
[ -n "$vmm_uris" ] || die "apt resolved no package for $VMM_PACKAGES"
hash=$( (cat "$here/microvm-guest.sh" "$here/../scripts/debian-trixie.sh"; echo "$kpkg=$kver busybox-static=$bver"; echo "$vmm_uris" | awk '{print $2}') | sha256sum | cut -c1-64)
out="$ROOTS/$hash"
echo "microvm-guest: $kpkg $kver, busybox-static $bver -> $out" >&2
if [ -f "$out/.threadbox-complete" ]; then
  echo "microvm-guest: already built" >&2
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/microvm-guest.XXXXXX")
  trap 'rm -rf "$work" "$tx"' EXIT
  chmod 755 "$work"
  # apt-get download runs as _apt where it can: the folder must be its to write.
  chown _apt "$work" 2>/dev/null || true
  (cd "$work" && apt-get download -q "$kpkg=$kver" "busybox-static=$bver" >&2)
  mkdir -p "$work/x"
  # Only the kernel, the modules named and busybox are unpacked.
  for d in "$work"/*.deb; do
    dpkg-deb --fsys-tarfile "$d" | tar -x -C "$work/x" --wildcards './boot/vmlinuz-*' './bin/busybox' \
      $(for m in $MODULES; do printf "*/%s.ko " "$m"; done) 2>/dev/null || true
  done
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/modules"
  # The kernel uncompressed (an ELF with a PVH entry, which QEMU boots
  # directly): an emulated CPU takes seconds to unpack the xz image.
  k=$(ls "$work"/x/boot/vmlinuz-* | head -1)
  off=$(grep -abo $'\xfd7zXZ' "$k" | head -1 | cut -d: -f1)
  [ -n "$off" ] || die "no xz payload in $k"
  tail -c +$((off + 1)) "$k" | xz -dc >"$out.tmp/vmlinux" 2>/dev/null || true
  head -c 4 "$out.tmp/vmlinux" | grep -q ELF || die "could not unpack $k"
  cp "$work/x/bin/busybox" "$out.tmp/busybox"
  for m in $MODULES; do
    f=$(find "$work/x/lib/modules" -name "$m.ko" | head -1)
    [ -n "$f" ] || die "module $m not in $kpkg"
    cp "$f" "$out.tmp/modules/$m.ko"
  done
  printf '%s\n' $MODULES >"$out.tmp/modules/order"
  # The VMM: its packages unpacked.
  (cd "$tx" && apt-get "${TRIXIE_APT[@]}" -q install --download-only -y --no-install-recommends $VMM_PACKAGES >&2)
  mkdir -p "$out.tmp/vmm"
  for d in "$tx"/cache/archives/*.deb; do
    dpkg-deb -x "$d" "$out.tmp/vmm"
  done
  # Kept: the shared libraries, the one QEMU binary, its firmware.
  mkdir -p "$out.tmp/keep/usr/bin" "$out.tmp/keep/usr/share"
  mv "$out.tmp/vmm/usr/lib" "$out.tmp/keep/usr/lib"
  mv "$out.tmp/vmm/usr/bin/qemu-system-x86_64" "$out.tmp/keep/usr/bin/"
  mv "$out.tmp/vmm/usr/libexec/virtiofsd" "$out.tmp/keep/usr/bin/"
  mv "$out.tmp/vmm/usr/share/qemu" "$out.tmp/keep/usr/share/"
  # The microvm machine's firmware is qboot, as Debian 12 links it: the
  # SeaBIOS build Debian 13 links instead takes over a minute to hand an
  # emulated CPU to the kernel.
  ln -sfn qboot.rom "$out.tmp/keep/usr/share/qemu/bios-microvm.bin"
  rm -rf "$out.tmp/vmm"
  mv "$out.tmp/keep" "$out.tmp/vmm"
  lib=/usr/lib/x86_64-linux-gnu
  for f in "$lib/ld-linux-x86-64.so.2" /usr/bin/qemu-system-x86_64 /usr/bin/virtiofsd /usr/share/qemu/bios-microvm.bin; do
    [ -e "$out.tmp/vmm$f" ] || die "VMM: $f missing from $VMM_PACKAGES"
  done
  cat >"$out.tmp/qemu-system-x86_64" <<WRAP
#!/bin/sh
# QEMU of Debian 13, with Debian 13's C library and its own libraries,
# modules and firmware (sandbox/microvm-guest.sh). Its folder is found
# without starting a process (every VM's start runs this), but through a
# link to this file.
f=\$0
[ -L "\$f" ] && f=\$(readlink -f "\$f")
d=\${f%/*}/vmm
QEMU_MODULE_DIR="\$d$lib/qemu" exec "\$d$lib/ld-linux-x86-64.so.2" --library-path "\$d$lib" "\$d/usr/bin/qemu-system-x86_64" -L "\$d/usr/share/qemu" "\$@"
WRAP
  cat >"$out.tmp/virtiofsd" <<WRAP
#!/bin/sh
# virtiofsd of Debian 13, with Debian 13's C library and its own
# libraries (sandbox/microvm-guest.sh); its folder is found as QEMU's
# wrapper finds it.
f=\$0
[ -L "\$f" ] && f=\$(readlink -f "\$f")
d=\${f%/*}/vmm
exec "\$d$lib/ld-linux-x86-64.so.2" --library-path "\$d$lib" "\$d/usr/bin/virtiofsd" "\$@"
WRAP
  chmod 755 "$out.tmp/qemu-system-x86_64" "$out.tmp/virtiofsd"
  "$out.tmp/qemu-system-x86_64" --version | head -1 >&2 || die "the VMM does not start"
  "$out.tmp/virtiofsd" --version >&2 || die "virtiofsd does not start"
  { printf '%s %s\nbusybox-static %s\n' "$kpkg" "$kver" "$bver"; echo "$vmm_uris" | awk '{print $2}'; } >"$out.tmp/packages"
  echo "$hash" >"$out.tmp/.threadbox-complete"
  rm -rf "$out"
  mv "$out.tmp" "$out"
fi
# A new build keeps the one current before it (a server started before
# may still boot VMs from it, LoadGuest resolves the link) and removes
# older ones.
prev=$(readlink "$ROOTS/current" 2>/dev/null || true)
ln -sfn "$hash" "$ROOTS/current"
[ "$prev" = "$hash" ] || for d in "$ROOTS"/*/; do
  d=${d%/}
  case "$(basename "$d")" in
    "$hash" | "$prev" | current) ;;
    *.tmp) [ -n "$(find "$d" -maxdepth 0 -mmin +60)" ] && rm -rf "$d" ;;
    *) [ -f "$d/.threadbox-complete" ] && rm -rf "$d" && echo "microvm-guest: removed an older build, $d" >&2 ;;
  esac
done
echo "microvm-guest: $out ($(du -sh "$out" | cut -f1))" >&2
