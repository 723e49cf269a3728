#!/usr/bin/env bash
# bench: prints the sandbox benchmark table (`make bench`): agent round trip
# vs docker exec vs host fork/exec, 8 concurrent commands, cold boot vs
# `docker run --rm`. Needs the Docker daemon (scripts/ci-docker.sh) and the
# sandbox image (make sandbox-image). SANDBOX_RUNTIME=runsc measures gVisor.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/threadbox-agent ] || CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/threadbox-agent ./cmd/threadbox-agent
go build -o bin/threadbox-bench ./cmd/threadbox-bench
exec bin/threadbox-bench -agent bin/threadbox-agent "$@"
