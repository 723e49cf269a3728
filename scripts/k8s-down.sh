#!/usr/bin/env bash
# k8s-down: tears down what scripts/k8s-up.sh started, and only
# that: the processes whose pids its state folder lists, the pods' containers
# of its own containerd (and their shims), the mounts under its folders and
# the network namespaces it made. Docker's containerd is never touched.
#   --keep-logs  leaves $K8S_STATE/logs (for a failed bring-up)
set -uo pipefail
STATE="${K8S_STATE:-/run/threadbox-k8s}"
CACHE="${K8S_CACHE:-/var/cache/threadbox-k8s}"
keep_logs=false
[ "${1:-}" = "--keep-logs" ] && keep_logs=true
[ -d "$STATE" ] || exit 0
say() { echo "k8s-down: $*" >&2; }

# stop NAME [SECONDS]: SIGTERM the recorded pid, then SIGKILL after SECONDS.
stop() {
  local f="$STATE/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq $(( ${2:-10} * 5 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    # The recorded pid is nsenter's or socat's own (nsenter execs).
    for _ in $(seq 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$f"
}

say "stopping the cluster"
stop kubelet 10
stop kube-scheduler 5
stop kube-controller-manager 5
stop api-outer 2
stop api-inner 2
stop kube-apiserver 5

# The pods' containers, then containerd, then the shims it left.
if [ -S "$STATE/containerd.sock" ] && [ -f "$STATE/containerd.pid" ]; then
  ctr=(ctr --address "$STATE/containerd.sock" -n k8s.io)
  for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks kill -s KILL "$t" >/dev/null 2>&1
  done
  sleep 1
  for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks rm -f "$t" >/dev/null 2>&1
  done
  for c in $("${ctr[@]}" containers ls -q 2>/dev/null); do
    "${ctr[@]}" containers rm "$c" >/dev/null 2>&1
  done
fi
stop containerd 10
stop etcd 5
# Shims of this containerd only: their command line names its socket.
for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $STATE/containerd.sock" 2>/dev/null); do
  kill -KILL "$pid" 2>/dev/null
done

# Mounts under the state folder and the containerd root (deepest first).
for root in "$STATE" "$CACHE/containerd-root"; do
  awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
done
[ -d "$STATE/kubelet" ] && { umount "$STATE/kubelet" 2>/dev/null || true; }

# The pods' network namespaces, which the CNI plugin recorded as it set
# each pod up (scripts/k8s/cni-none): found so whether or not the cluster's
# containerd is still there to list its tasks. Then the node's.
if [ -f "$STATE/pod-netns-paths" ]; then
  while read -r f; do
    case "$f" in /run/netns/cni-* | /var/run/netns/cni-*) [ -e "$f" ] && ip netns delete "$(basename "$f")" 2>/dev/null ;; esac
  done <"$STATE/pod-netns-paths"
fi
[ -f "$STATE/netns" ] && ip netns delete "$(cat "$STATE/netns")" 2>/dev/null

# The kubelet's pod cgroups (cgroupfs driver). A pod's processes whose
# shim is gone (the host's processes were ended, but not all) are still in
# them: they are killed first, then rmdir removes the empty groups.
if [ -f "$STATE/kubelet.yaml" ]; then
  left=$(find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
  if [ -n "$left" ]; then
    say "killing the pods' processes left in their groups: $(echo $left)"
    kill -KILL $left 2>/dev/null
    sleep 1
  fi
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
fi

if [ "$keep_logs" = true ]; then
  find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} + 2>/dev/null
else
  rm -rf "$STATE"
fi
say "down"
