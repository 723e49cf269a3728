#!/usr/bin/env bash
# bench: prints the sandbox benchmark table (`make bench`): agent round trip
# vs docker exec vs host fork/exec, 8 concurrent commands, cold boot vs
# `docker run --rm`. Needs the Docker daemon (scripts/ci-docker.sh) and the
# sandbox image (make sandbox-image). SANDBOX_RUNTIME=runsc measures gVisor.
# The local (bubblewrap) backend's rows, warm exec and cold boot, are measured
# in the same run when its root filesystem exists (THREADBOX_ROOTFS, else the
# cache of sandbox/build-offline.sh --rootfs-only); -rootfs '' skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/threadbox-agent ] || CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/threadbox-agent ./cmd/threadbox-agent
go build -o bin/threadbox-bench ./cmd/threadbox-bench
exec bin/threadbox-bench -agent bin/threadbox-agent "$@"
