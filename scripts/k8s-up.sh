#!/usr/bin/env bash
# k8s-up: brings up a single-node Kubernetes (v1.37) for the kubernetes
# sandbox backend's tests, offline, and prints the path of its
# admin kubeconfig. Everything runs inside a private network namespace:
# Debian's etcd, a second containerd (never Docker's), the four Kubernetes
# programs that scripts/k8s-build.sh builds into its cache, and a CNI
# configuration that gives pods only a loopback interface (pods reach
# nothing; threadbox talks to them through the apiserver). The host sees one listener: 127.0.0.1:$K8S_API_PORT, a socat
# forward to the apiserver through a unix socket in the state folder.
# Images (a static pause, the agent image, the Docker sandbox image) are
# imported as archives; nothing is pulled.
#
#   K8S_STATE     state folder: pids, certificates, logs, kubeconfigs
#                 (default /run/threadbox-k8s); scripts/k8s-down.sh ends
#                 what it lists and nothing else
#   K8S_CACHE     binaries and the containerd root (default /var/cache/threadbox-k8s)
#   K8S_API_PORT  host loopback port of the apiserver (default 16443)
#   SANDBOX_IMAGE Docker image to import (default threadbox-sandbox:latest)
#   K8S_POD_PIDS_LIMIT  the kubelet's podPidsLimit, the processes of one pod
#                 (default 512, SANDBOX_PIDS's default): a pod spec has no
#                 pids field, so this node setting is how SANDBOX_PIDS is
#                 enforced (threadbox's K8S_POD_PIDS_LIMIT declares it)
#   THREADBOX_AGENT_BIN  static agent for the agent image (default: built)
# With --status it starts nothing and exits 0 when the cluster of K8S_STATE
# is up and every daemon of it runs. A state folder whose daemons are gone
# (the host's processes were ended) is torn down before a new bring-up.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
STATE="${K8S_STATE:-/run/threadbox-k8s}"
CACHE="${K8S_CACHE:-/var/cache/threadbox-k8s}"
PORT="${K8S_API_PORT:-16443}"
IMAGE="${SANDBOX_IMAGE:-threadbox-sandbox:latest}"
PIDS="${K8S_POD_PIDS_LIMIT:-512}"
NS=threadbox-k8s
IP=10.255.0.1
NODE=threadbox-node
start=$(date +%s)
say() { echo "k8s-up: $* ($(( $(date +%s) - start ))s)" >&2; }
die() { echo "k8s-up: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
# alive: the state folder records a cluster that came up, and every daemon
# it lists still runs.
alive() {
  [ -f "$STATE/up" ] || return 1
  local f st
  for f in "$STATE"/*.pid; do
    [ -f "$f" ] || continue
    # Running, not a zombie its parent has not reaped.
    st=$(ps -o stat= -p "$(cat "$f")" 2>/dev/null) || return 1
    case "$st" in Z*|"") return 1 ;; esac
  done
}
# --status: exits 0 when a cluster is up and alive, and starts nothing.
if [ "${1:-}" = --status ]; then alive; exit; fi
if alive; then
  say "already up (scripts/k8s-down.sh ends it)"
  echo "$STATE/admin.kubeconfig"
  exit 0
fi
if [ -f "$STATE/up" ]; then
  # A host whose processes were all ended keeps the state folder (/run)
  # of a cluster whose daemons are gone: what is left goes first.
  say "the last cluster's daemons are gone: tearing down what is left of it"
  K8S_STATE="$STATE" K8S_CACHE="$CACHE" bash "$here/k8s-down.sh" >&2 || true
fi
for p in etcd containerd runc ctr socat openssl gcc nsenter python3; do
  command -v "$p" >/dev/null || die "$p missing (apt-get install etcd-server containerd runc socat openssl gcc util-linux python3)"
done
[ -x /usr/lib/cni/loopback ] || die "CNI plugins missing (apt-get install containernetworking-plugins)"
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE missing (make sandbox-image)"

say "binaries"
BIN="$(bash "$here/k8s-build.sh")"

mkdir -p "$STATE"/{pki,logs,cni,kubelet,containerd-state,images}
# A failed bring-up ends what it started.
trap 'rc=$?; if [ $rc != 0 ]; then echo "k8s-up: failed, tearing down (logs in $STATE/logs)" >&2; tail -n 20 "$STATE"/logs/*.log >&2 || true; K8S_STATE="$STATE" bash "$here/k8s-down.sh" --keep-logs >&2 || true; fi' EXIT
launched=()
# launch NAME CMD...: starts a daemon inside the namespace, recording its pid.
launch() {
  local name=$1; shift
  nsenter --net=/run/netns/$NS "$@" >"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
  launched+=("$name")
}
# wait_for WHAT SECONDS CMD...: retries CMD until it succeeds; fails at once
# when a daemon started so far has exited.
wait_for() {
  local what=$1 secs=$2 n; shift 2
  for _ in $(seq $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    for n in "${launched[@]}"; do
      kill -0 "$(cat "$STATE/$n.pid")" 2>/dev/null || die "$n exited (log: $STATE/logs/$n.log)"
    done
    sleep 0.2
  done
  die "$what not ready after ${secs}s"
}

say "network namespace $NS"
# One of an earlier cluster whose state folder is gone is this script's own.
ip netns delete $NS 2>/dev/null || true
ip netns add $NS
echo $NS >"$STATE/netns"
ip -n $NS link set lo up
ip -n $NS addr add $IP/32 dev lo

say "certificates"
pki="$STATE/pki"
(
  cd "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=threadbox-k8s-ca" 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cert() { # NAME SUBJECT [SANS]
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" >"$1.ext"; else : >"$1.ext"; fi
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
  }
  cert apiserver "/CN=kube-apiserver" "IP:$IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  cert admin "/O=system:masters/CN=threadbox-admin"
  cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  cert kubelet-serving "/CN=$NODE" "IP:$IP,DNS:$NODE"
  # In system:masters: with its own identity (no per-controller service
  # account credentials) its ClusterRole alone is too narrow.
  cert controller-manager "/O=system:masters/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
)
kubeconfig() { # FILE SERVER CERTNAME
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: threadbox
  cluster: {server: "$2", certificate-authority: "$pki/ca.crt"}
users:
- name: user
  user: {client-certificate: "$pki/$3.crt", client-key: "$pki/$3.key"}
contexts:
- name: threadbox
  context: {cluster: threadbox, user: user, namespace: default}
current-context: threadbox
EOF
}
kubeconfig "$STATE/kubelet.kubeconfig" "https://$IP:6443" kubelet
kubeconfig "$STATE/controller-manager.kubeconfig" "https://$IP:6443" controller-manager
kubeconfig "$STATE/scheduler.kubeconfig" "https://$IP:6443" scheduler
kubeconfig "$STATE/admin-inside.kubeconfig" "https://$IP:6443" admin

say "images"
gcc -static -O2 -o "$STATE/images/pause" "$here/k8s/pause.c"
gcc -static -O2 -o "$STATE/images/install" "$here/k8s/install.c"
agent="${THREADBOX_AGENT_BIN:-}"
if [ -z "$agent" ] || [ ! -x "$agent" ]; then
  agent="$STATE/images/threadbox-agent"
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$agent" ./cmd/threadbox-agent)
fi
python3 "$here/k8s/oci.py" "$STATE/images/pause.tar" threadbox-pause:3 /pause "$STATE/images/pause=/pause"
python3 "$here/k8s/oci.py" "$STATE/images/agent.tar" threadbox-agent:latest /install \
  "$STATE/images/install=/install" "$agent=/threadbox-agent"

say "containerd"
croot="$CACHE/containerd-root"
mkdir -p "$croot" "$STATE/cni-bin"
# Pods get a loopback interface and nothing else (scripts/k8s/cni-none).
ln -s /usr/lib/cni/loopback "$STATE/cni-bin/loopback"
cp "$here/k8s/cni-none" "$STATE/cni-bin/cni-none"
cat >"$STATE/cni/10-none.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "threadbox-none", "plugins": [{"type": "loopback"}, {"type": "cni-none"}]}
EOF
cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$croot"
state = "$STATE/containerd-state"
[grpc]
  address = "$STATE/containerd.sock"
[ttrpc]
  address = "$STATE/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$croot/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/threadbox-pause:3"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$STATE/cni-bin"
    conf_dir = "$STATE/cni"
EOF
launch containerd containerd --config "$STATE/containerd.toml"
ctr=(ctr --address "$STATE/containerd.sock" -n k8s.io)
wait_for containerd 20 "${ctr[@]}" version
"${ctr[@]}" images import "$STATE/images/pause.tar" >/dev/null
"${ctr[@]}" images import "$STATE/images/agent.tar" >/dev/null
# The sandbox image: the very image `make sandbox-image` built from the
# offline root filesystem, imported once per image id (the root is cached).
id="$(docker image inspect "$IMAGE" --format '{{.Id}}')"
ref="docker.io/library/${IMAGE}"
[ "${IMAGE#*/}" != "$IMAGE" ] && ref="$IMAGE"
if [ "$(cat "$croot/sandbox-image.id" 2>/dev/null)" != "$id" ] || ! "${ctr[@]}" images ls -q | grep -qx "$ref"; then
  say "importing $IMAGE into the cluster's containerd (once per image)"
  docker save "$IMAGE" | "${ctr[@]}" images import - >/dev/null
  echo "$id" >"$croot/sandbox-image.id"
fi

say "etcd"
launch etcd etcd --name threadbox --data-dir "$STATE/etcd" --unsafe-no-fsync \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster threadbox=http://127.0.0.1:2380
wait_for etcd 20 nsenter --net=/run/netns/$NS curl -sf http://127.0.0.1:2379/health

say "kube-apiserver"
launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=$IP --advertise-address=$IP --secure-port=6443 \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
  --kubelet-client-certificate="$pki/apiserver-kubelet.crt" --kubelet-client-key="$pki/apiserver-kubelet.key" \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/24 \
  --authorization-mode=Node,RBAC --enable-priority-and-fairness=false --allow-privileged=false
# The host's way in: 127.0.0.1:$PORT -> unix socket -> the apiserver.
launch api-inner socat UNIX-LISTEN:"$STATE/api.sock",fork,unlink-early TCP:$IP:6443,nodelay
socat TCP-LISTEN:"$PORT",bind=127.0.0.1,reuseaddr,fork,nodelay UNIX-CONNECT:"$STATE/api.sock" >"$STATE/logs/api-outer.log" 2>&1 &
echo $! >"$STATE/api-outer.pid"
kubeconfig "$STATE/admin.kubeconfig" "https://127.0.0.1:$PORT" admin
api() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$PORT$1"; }
wait_for kube-apiserver 90 api /readyz

say "controller-manager, scheduler"
launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1 \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" --use-service-account-credentials=false
launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig="$STATE/scheduler.kubeconfig" --authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1

say "kubelet"
cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "unix://$STATE/containerd.sock"
address: $IP
port: 10250
readOnlyPort: 0
healthzPort: 0
tlsCertFile: "$pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$pki/kubelet-serving.key"
makeIPTablesUtilChains: false
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podPidsLimit: $PIDS
maxPods: 60
serializeImagePulls: false
EOF
launch kubelet "$BIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
  --root-dir="$STATE/kubelet" --hostname-override=$NODE --node-ip=$IP
ready() { api /api/v1/nodes/$NODE | python3 -c 'import json,sys; n=json.load(sys.stdin); sys.exit(0 if any(c["type"]=="Ready" and c["status"]=="True" for c in n["status"]["conditions"]) else 1)'; }
wait_for "node $NODE" 60 ready
# The default service account (the pods' admission needs it).
sa() { api /api/v1/namespaces/default/serviceaccounts/default; }
wait_for "default service account" 30 sa

touch "$STATE/up"
say "up: kubeconfig $STATE/admin.kubeconfig"
echo "$STATE/admin.kubeconfig"
