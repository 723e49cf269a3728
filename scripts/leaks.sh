#!/usr/bin/env bash
# leaks: what a test run may leave on the host, to tell what it left.
#   leaks.sh list         prints the host's current state, a line a thing
#   leaks.sh check FILE   prints what is there now and was not in FILE (a
#                         list taken before the run) and exits 1 if anything
# Looked at: Docker containers and containerd's state folders of their
# tasks (a container removed while its shim was killed keeps one, and each
# slows the next containerd start), the control groups threadbox's backends make
# (below their shared parent folders, which stay for the next instance),
# mounts, loop devices, network namespaces, processes of the programs the
# tests start (sandboxes, VMs, browsers, servers), and the temporary
# folder's entries that tests and sandboxes make. A thing has to be there
# in two looks two seconds apart to count, so that one ending as the run
# ends is not taken for a leak.
set -euo pipefail

list() {
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    docker ps -aq --no-trunc | sed 's/^/container /'
  fi
  # (find fails on a folder that is not there: the other may be.)
  { find /run/docker/containerd/daemon/io.containerd.runtime.v2.task /run/containerd/io.containerd.runtime.v2.task \
    -mindepth 2 -maxdepth 2 -type d 2>/dev/null || true; } | sed 's/^/task /'
  find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d \
    \( -path '/sys/fs/cgroup/threadbox-*/*' -o -path '/sys/fs/cgroup/*/threadbox-*/*' \) 2>/dev/null | sed 's/^/cgroup /'
  # iproute2 makes /run/netns a mount point at its first namespace and
  # never undoes it; the namespaces in it are listed below.
  awk '$5 != "/run/netns" && $5 != "/var/run/netns" {print "mount " $5}' /proc/self/mountinfo
  if command -v losetup >/dev/null 2>&1; then
    losetup -a 2>/dev/null | sed 's/^/loop /'
  fi
  if command -v ip >/dev/null 2>&1; then
    ip netns list 2>/dev/null | awk '{print "netns " $1}'
  fi
  # Processes by program name; a process is its pid and start time, so a
  # pid used again is a new process. Sandboxes, VMs, browsers and servers
  # count wherever they run; common programs (node, python3, sleep, socat)
  # only in the run's own session (LEAKS_SID: scripts/test.sh makes one for
  # the run), so that another shell on the machine, the one that started
  # the run among them, is not taken for the run's.
  for p in /proc/[0-9]*; do
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    stat=$(cat "$p/stat" 2>/dev/null) || continue
    stat=${stat##*) } # the fields after the command's name, from the state on
    case "$comm" in
      qemu-system-*|virtiofsd|runsc*|threadbox*|chromium|chrome|chromedriver|headless_shell|haproxy|postgres|etcd|kube*|containerd*|versitygw) ;;
      node|python3|sleep|socat)
        [ -n "${LEAKS_SID:-}" ] && [ "$(echo "$stat" | awk '{print $4}')" = "$LEAKS_SID" ] || continue ;;
      *) continue ;;
    esac
    echo "process ${p#/proc/}@$(echo "$stat" | awk '{print $20}') $comm"
  done
  # Lock files stay by design: the next build takes the same lock.
  find /tmp -mindepth 1 -maxdepth 1 \( -name 'threadbox*' -o -name 'Test*' -o -name 'Fuzz*' \
    -o -name 'org.chromium.*' -o -name 'st-*' \) ! -name '*.lock' 2>/dev/null | sed 's/^/tmp /'
}

case "${1:-}" in
  list) list | sort -u ;;
  check)
    before=${2:?usage: leaks.sh check FILE}
    one=$(list | sort -u | comm -13 "$before" -)
    [ -z "$one" ] && exit 0
    sleep 2
    left=$(list | sort -u | comm -13 "$before" - | comm -12 - <(printf '%s\n' "$one"))
    [ -z "$left" ] && exit 0
    echo "leaks: the run left these behind:" >&2
    printf '%s\n' "$left" | sed 's/^/  /' >&2
    exit 1 ;;
  *) echo "usage: leaks.sh list | check FILE" >&2; exit 2 ;;
esac
