#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubelet
# for the kubernetes backend's test cluster from the Go module proxy into a
# cache outside the repository, keyed on scripts/k8s/build (go.mod, go.sum and
# main.go), and prints the cache's bin folder. The four are linked as one
# binary (scripts/k8s/build/main.go runs the program its name says) with the
# four names linked to it: one link instead of four.
# A warm cache returns at once; a caller that finds a build running waits
# for it; the binaries are never committed.
#   K8S_CACHE   cache root (default /var/cache/threadbox-k8s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mod="$here/k8s/build"
root="${K8S_CACHE:-/var/cache/threadbox-k8s}"
key="$(cat "$mod/go.mod" "$mod/go.sum" "$mod/main.go" | sha256sum | cut -c1-16)"
bin="$root/$key/bin"
progs=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
have() {
  for p in "${progs[@]}"; do [ -x "$bin/$p" ] || return 1; done
}
if have; then echo "$bin"; exit 0; fi
mkdir -p "$root/$key"
# One build at a time: CI starts one in the background while other steps
# run, and a later caller (scripts/k8s-up.sh) waits for it here.
exec 9>"$root/$key/lock"
flock 9
if have; then echo "$bin"; exit 0; fi
tmp="$(mktemp -d "$root/$key/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
ver=v1.37.2
ld="-s -w -X k8s.io/component-base/version.gitVersion=$ver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
echo "k8s-build: building ${progs[*]} $ver as one binary (cold: minutes)" >&2
# Built as threadbox's own packages are (cgo on, paths kept), and
# scripts/k8s/build/go.mod requires the versions threadbox's go.mod does
# of every module both use: the packages both import (client-go, the API
# types, apimachinery, protobuf, ...) are compiled once, by whichever
# build reaches them first, and the other takes them from Go's build cache.
(cd "$mod" && go build -ldflags "$ld" -o "$tmp/kube" .)
mkdir -p "$bin"
mv "$tmp/kube" "$bin/kube"
for p in "${progs[@]}"; do ln -sfn kube "$bin/$p"; done
echo "$bin"
