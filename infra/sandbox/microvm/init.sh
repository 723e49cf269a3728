#!/bin/busybox sh
# The init of a threadbox microVM, run from the initramfs the backend makes
# for each VM: it loads the virtio modules, finds the agent's virtio-serial
# port, makes /tmp and the agent's folder (tmpfs), /dev's terminals and
# shared memory, brings up loopback, sets the process limit, and becomes
# the threadbox agent, which mounts the sandbox image's root filesystem (a
# read-only 9p or virtiofs share, or an erofs image on the VM's block
# device) and the container's folders and serves as PID 1 of
# the new root over that port. Any failure ends init, which ends the VM
# (panic=-1 with -no-reboot), and the host reads why on the serial console.
/bin/busybox --install -s /bin
export PATH=/bin
fail() { echo "threadbox-init: $*" >&2; exit 1; }
mount -t proc proc /proc || fail "mount /proc"
mount -t sysfs sysfs /sys || fail "mount /sys"
mount -t devtmpfs devtmpfs /dev || fail "mount /dev"
while read -r m; do
  insmod "/lib/modules/$m.ko" || fail "insmod $m"
done </lib/modules/order
# TB_TMP, TB_PIDS, TB_FS, TB_ROOT, TB_MOUNTS and the agent's environment as "$@".
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
# restored copy does not do it again: /tmp and the agent's folder as tmpfs
# mounts at their paths in the sandbox, which the agent moves into the new
# root, /dev's terminals and
# shared memory (moved with /dev), the host name, loopback and the process
# limit.
mkdir -p /tmp /opt/threadbox /dev/pts /dev/shm || fail "staging folders"
mount -t tmpfs -o "nosuid,nodev,mode=1777,size=$TB_TMP" tmpfs /tmp || fail "mount /tmp"
mount -t tmpfs -o mode=755,size=64m tmpfs /opt/threadbox || fail "mount /opt/threadbox"
cp /threadbox/agent /opt/threadbox/agent && chmod 555 /opt/threadbox/agent || fail "copy the agent"
mkdir /opt/threadbox/trust || fail "make the trust folder's mount point"
mount -o remount,ro,nosuid,nodev /opt/threadbox || fail "remount /opt/threadbox"
mount -t devpts -o nosuid,noexec,newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts || fail "mount /dev/pts"
ln -sf pts/ptmx /dev/ptmx
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=64m shm /dev/shm || fail "mount /dev/shm"
hostname sandbox
ip link set lo up || fail "loopback"
ulimit -u "$TB_PIDS" || fail "process limit"
# The agent finishes the init in-process (-vm-init): it mounts the root
# filesystem and the container's folders, moves /tmp, its own folder and
# /dev into the new root, moves into it as PID 1 and serves the host over
# the port. A template of warm VMs starts its agent here too, held before
# any 9p share is mounted (QEMU saves no VM with one mounted; a root
# image it mounts and warms before): the host
# saves it once the held line is out, and each copy it restores goes on
# from here when the host writes its word (the clock, which the copy's
# own has fallen behind, and a random seed of the copy's own).
hold=
[ "${TB_HOLD:-}" = 1 ] && hold=-vm-hold
exec env -i "$@" /opt/threadbox/agent -vm-init -vm-fs "${TB_FS:-9p}" -vm-root "${TB_ROOT:-shared}" -vm-shares "$TB_MOUNTS" $hold <&3 >&3 3>&-
