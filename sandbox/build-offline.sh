#!/usr/bin/env bash
# build-offline: builds the sandbox image without a registry (`make
# sandbox-image`). debootstrap lays Debian bookworm into a folder from the apt
# mirror this host already uses, the packages of packages.txt are installed
# into it, rootfs-setup.sh adds the sandbox user and folders, and the folder is
# imported as an image with `docker import`.
#
# The image is tagged $SANDBOX_IMAGE (default threadbox-sandbox:latest) and
# labelled threadbox.recipe=<sha256 of the recipe files>; an image whose label
# already matches is not rebuilt. The root filesystem folder is kept in
# $CACHE/sandbox-rootfs/<hash>/ (symlink $CACHE/sandbox-rootfs/current) so the
# `local` (bubblewrap) backend can use the very same files. $CACHE is
# $THREADBOX_CACHE_DIR, else $DATA_DIR/cache, else /var/cache/threadbox.
#
# Flags: --force rebuilds even when the label matches; --rootfs-only stops
# after the folder (no Docker needed). Needs root (debootstrap, chroot).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
IMAGE="${SANDBOX_IMAGE:-threadbox-sandbox:latest}"
SUITE=bookworm
force=false
rootfs_only=false
for a in "$@"; do
  case "$a" in
    --force) force=true ;;
    --rootfs-only) rootfs_only=true ;;
    *) echo "build-offline: unknown flag $a" >&2; exit 2 ;;
  esac
done

step=0
say() { step=$((step + 1)); printf '\n==> [%d] %s\n' "$step" "$*" >&2; }
die() { echo "build-offline: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it)"

# The recipe's hash: every file that shapes the root filesystem.
hash=$(cd "$here" && cat build-offline.sh packages.txt rootfs-setup.sh | sha256sum | cut -c1-64)
short=${hash:0:12}

if [ -n "${THREADBOX_CACHE_DIR:-}" ]; then CACHE="$THREADBOX_CACHE_DIR"
elif [ -n "${DATA_DIR:-}" ]; then CACHE="$DATA_DIR/cache"
else CACHE=/var/cache/threadbox; fi
ROOTS="$CACHE/sandbox-rootfs"
root="$ROOTS/$hash"

echo "build-offline: recipe $short, image $IMAGE, root filesystem $root" >&2

if [ "$rootfs_only" = false ] && [ "$force" = false ]; then
  have=$(docker image inspect "$IMAGE" --format '{{index .Config.Labels "threadbox.recipe"}}' 2>/dev/null || true)
  if [ "$have" = "$hash" ]; then
    echo "build-offline: $IMAGE already carries recipe $short; nothing to do (--force rebuilds)" >&2
    exit 0
  fi
fi

# The mirror: the Debian entries of this host's apt sources (deb822 and
# one-line formats), never a hard-coded host. MIRROR overrides the main one.
read_sources() {
  python3 - "$SUITE" <<'PY'
import glob, re, sys
suite = sys.argv[1]
entries = []  # (uri, suite)
def add(uris, suites, comps):
    if "main" not in comps:
        return
    for u in uris:
        for s in suites:
            if s == suite or s.startswith(suite + "-"):
                entries.append((u.rstrip("/"), s))
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for para in re.split(r"\n\s*\n", open(path).read()):
        f = {}
        for line in para.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            k, v = line.split(":", 1)
            f[k.strip().lower()] = v.split()
        if "deb" not in f.get("types", []) or f.get("enabled", ["yes"])[0] == "no":
            continue
        add(f.get("uris", []), f.get("suites", []), f.get("components", []))
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(line) >= 4 and line[0] == "deb":
            add([line[1]], [line[2]], line[3:])
seen = set()
for u, s in entries:
    if (u, s) not in seen:
        seen.add((u, s))
        print(u, s)
PY
}
sources=$(read_sources)
[ -n "$sources" ] || die "no Debian $SUITE entry in /etc/apt/sources.list(.d); set MIRROR"
MIRROR="${MIRROR:-$(echo "$sources" | awk -v s="$SUITE" '$2 == s {print $1; exit}')}"
[ -n "$MIRROR" ] || die "no mirror for suite $SUITE; set MIRROR"

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

if [ -f "$root/.threadbox-complete" ]; then
  say "root filesystem for recipe $short is cached at $root"
else
  work="$root.tmp"
  rm -rf "$work"
  mkdir -p "$work"
  say "debootstrap $SUITE (minbase) from $MIRROR into $work"
  debootstrap --variant=minbase "$SUITE" "$work" "$MIRROR"

  say "apt sources of the image"
  : >"$work/etc/apt/sources.list"
  echo "$sources" | while read -r uri suite; do
    echo "deb $uri $suite main" >>"$work/etc/apt/sources.list"
  done
  [ -n "$(echo "$sources" | awk -v m="$MIRROR" '$1 == m')" ] || echo "deb $MIRROR $SUITE main" >>"$work/etc/apt/sources.list"
  cat "$work/etc/apt/sources.list" >&2
  cp /etc/resolv.conf "$work/etc/resolv.conf"

  for m in proc sys dev; do
    mount --bind "/$m" "$work/$m"
    mounted+=("$work/$m")
  done
  pkgs=$(grep -v '^#' "$here/packages.txt" | grep -v '^[[:space:]]*$' | tr '\n' ' ')
  say "installing $(echo "$pkgs" | wc -w) packages: $pkgs"
  chroot "$work" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update && apt-get install -y --no-install-recommends -o Dpkg::Progress-Fancy=0 $pkgs"

  say "rootfs-setup.sh"
  cp "$here/rootfs-setup.sh" "$work/tmp/rootfs-setup.sh"
  chroot "$work" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh /tmp/rootfs-setup.sh
  rm -f "$work/tmp/rootfs-setup.sh"
  cleanup
  mounted=()
  : >"$work/etc/resolv.conf"
  echo "$hash" >"$work/.threadbox-complete"
  mv "$work" "$root"
fi
ln -sfn "$hash" "$ROOTS/current"
echo "build-offline: root filesystem: $root ($(du -sh "$root" | cut -f1))" >&2
[ "$rootfs_only" = true ] && exit 0

say "docker import into $IMAGE (and threadbox-sandbox:$short)"
size=$(du -sb "$root" | cut -f1)
progress() {
  # Prints the import's progress in MiB every few seconds.
  if command -v pv >/dev/null 2>&1; then pv -s "$size" -f
  else
    python3 -c '
import sys, time
total, done, last = int(sys.argv[1]), 0, 0.0
out = sys.stdout.buffer
while True:
    b = sys.stdin.buffer.read(1 << 20)
    if not b:
        break
    out.write(b); done += len(b)
    if time.time() - last > 3:
        last = time.time()
        sys.stderr.write("  import: %d / %d MiB\n" % (done >> 20, total >> 20)); sys.stderr.flush()
sys.stderr.write("  import: %d MiB done\n" % (done >> 20))
' "$size"
  fi
}
tar --numeric-owner --exclude=./.threadbox-complete -C "$root" -c . | progress | docker import \
  -c "LABEL threadbox.recipe=$hash" \
  -c "LABEL threadbox.sandbox=true" \
  -c "ENV LANG=C.UTF-8" \
  -c "ENV HOME=/home/agent" \
  -c "ENV MPLBACKEND=Agg" \
  -c "ENV MPLCONFIGDIR=/tmp/.matplotlib" \
  -c "ENV XDG_CACHE_HOME=/tmp/.cache" \
  -c "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  -c "USER 1000:1000" \
  -c "WORKDIR /home/agent/workspace" \
  - "$IMAGE"
docker tag "$IMAGE" "threadbox-sandbox:$short"
say "done: $IMAGE = recipe $short"
docker image inspect "$IMAGE" --format '  id {{.Id}}  size {{.Size}} bytes' >&2
