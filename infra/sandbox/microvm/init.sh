#!/bin/busybox sh
# The init of a threadbox microVM, run from the initramfs the backend makes
# for each VM: it loads the virtio modules, mounts the sandbox image's root
# filesystem (a read-only 9p share) and the container's folders (9p shares,
# or a subfolder of each for a warm VM; read-only where the config says
# so), /tmp, /proc, /sys and /dev, brings up loopback, sets the process
# limit, finds the agent's virtio-serial port and becomes the threadbox agent, as PID 1 of the new root, speaking over
# that port. Any failure ends init, which ends the VM (panic=-1 with
# -no-reboot), and the host reads why on the serial console.
/bin/busybox --install -s /bin
export PATH=/bin
fail() { echo "threadbox-init: $*" >&2; exit 1; }
mount -t proc proc /proc || fail "mount /proc"
mount -t sysfs sysfs /sys || fail "mount /sys"
mount -t devtmpfs devtmpfs /dev || fail "mount /dev"
while read -r m; do
  insmod "/lib/modules/$m.ko" || fail "insmod $m"
done </lib/modules/order
# TB_TMP, TB_PIDS, TB_MOUNTS and the agent's environment as "$@".
. /threadbox/config || fail "config"
# A virtio port opens once: one descriptor, read and written, for both
# streams, kept open across the move of /dev into the new root.
port=
i=0
while :; do
  for d in /sys/class/virtio-ports/*; do
    [ "$(cat "$d/name" 2>/dev/null)" = threadbox.agent ] && port=/dev/${d##*/}
  done
  [ -n "$port" ] && [ -e "$port" ] && break
  i=$((i + 1))
  [ $i -lt 400 ] || fail "no agent port"
  sleep 0.05
done
exec 3<>"$port" || fail "agent port"
# What needs no 9p share is made here, before a template's hold, so that a
# restored copy does not do it again: /tmp and the agent's folder as
# tmpfs mounts moved into the new root later, /dev's terminals and shared
# memory (moved with /dev), the host name, loopback, the process limit and
# the mount points of a warm VM's shares.
mkdir -p /stage/tmp /stage/opt /dev/pts /dev/shm || fail "staging folders"
mount -t tmpfs -o "nosuid,nodev,mode=1777,size=$TB_TMP" tmpfs /stage/tmp || fail "mount /tmp"
mount -t tmpfs -o mode=755,size=64m tmpfs /stage/opt || fail "mount /opt/threadbox"
cp /threadbox/agent /stage/opt/agent && chmod 555 /stage/opt/agent || fail "copy the agent"
mkdir /stage/opt/trust || fail "make the trust folder's mount point"
mount -o remount,ro,nosuid,nodev /stage/opt || fail "remount /opt/threadbox"
mount -t devpts -o nosuid,noexec,newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts || fail "mount /dev/pts"
ln -sf pts/ptmx /dev/ptmx
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=64m shm /dev/shm || fail "mount /dev/shm"
hostname sandbox
ip link set lo up || fail "loopback"
ulimit -u "$TB_PIDS" || fail "process limit"
shares=
for m in $TB_MOUNTS; do
  case $m in *:.) ;; *) shares="$shares /shares/${m%%:*}" ;; esac
done
[ -z "$shares" ] || mkdir -p $shares || fail "share mount points"
# A template of warm VMs holds here, before any 9p share is mounted (QEMU
# saves no VM with one mounted): the host saves it once the held line is
# out, and each copy it restores goes on from here when the host writes
# "go SECONDS", its clock, which the copy's own has fallen behind.
if [ "${TB_HOLD:-}" = 1 ]; then
  echo threadbox-init-held >&3 || fail "agent port"
  read -r word now <&3 || fail "agent port"
  [ "$word" = go ] || fail "expected go from the host, got $word"
  date -s "@$now" >/dev/null || fail "set the clock"
fi
opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$opts,ro,cache=loose" root /newroot || fail "mount the root filesystem"
mount -t proc -o nosuid,nodev,noexec proc /newroot/proc || fail "mount /proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /newroot/sys || fail "mount /sys"
mount --move /stage/tmp /newroot/tmp || fail "move /tmp"
mount --move /stage/opt /newroot/opt/threadbox || fail "move /opt/threadbox"
# Each entry: tag:target:mode:sub. A share whose sub is "." is mounted at
# the target; otherwise (a warm VM's) its subfolder sub is, the share's own
# mount let go once it is bound there.
for m in $TB_MOUNTS; do
  tag=${m%%:*}; rest=${m#*:}; target=${rest%%:*}; rest=${rest#*:}; mode=${rest%%:*}; sub=${rest#*:}
  if [ "$sub" = . ]; then
    mount -t 9p -o "$opts,$mode,nosuid,nodev,cache=none" "$tag" "/newroot$target" || fail "mount $target"
  else
    mount -t 9p -o "$opts,$mode,nosuid,nodev,cache=none" "$tag" "/shares/$tag" || fail "mount share $tag"
    mount --bind "/shares/$tag/$sub" "/newroot$target" || fail "mount $target"
    umount "/shares/$tag" || fail "let go of share $tag"
  fi
done
mount --move /dev /newroot/dev || fail "move /dev"
umount /sys /proc
# The host waits for the ready line before it speaks the agent protocol.
echo threadbox-init-ready >&3 || fail "agent port"
exec switch_root /newroot /usr/bin/env -i "$@" /opt/threadbox/agent <&3 >&3 3>&-
