#!/usr/bin/env bash
# bench: prints the sandbox benchmark table (`make bench`): agent round trip
# vs docker exec vs host fork/exec, 8 concurrent commands, cold boot vs
# `docker run --rm`. Needs the Docker daemon (scripts/ci-docker.sh) and the
# sandbox image (make sandbox-image). SANDBOX_RUNTIME=runsc measures gVisor.
# The local (bubblewrap) backend's rows, warm exec and cold boot, are measured
# in the same run when its root filesystem exists (THREADBOX_ROOTFS, else the
# cache of sandbox/build-offline.sh --rootfs-only); -rootfs '' skips them.
# The Messages API rows (-only messages) start a scripted fake model upstream
# on loopback and a threadbox using it with docker sandboxes: added latency
# over calling the upstream directly with the body threadbox sends it (p50/p99,
# streaming time to first byte, concurrency 1 and 16, and at 16 with a model
# that takes 20 ms), beside the same figures for a bare pass-through proxy
# (the floor of one more HTTP hop here), and the tool loop's overhead per
# iteration. The MCP rows (-only mcp, -mcp-n round trips, default 200) start
# the same fake upstream and a threadbox with docker sandboxes: a sandbox_bash
# `true` through /mcp (the official Go SDK's client) beside the same command
# through the Messages API's tool loop (two model steps and the command), the
# loop without a call, tools/list (through the SDK's client and as a plain
# POST) and the upstream alone. The lifecycle rows (-only lifecycle) start a
# threadbox with docker sandboxes, loop-mounted disk quotas when root, the runner model and
# CONTAINER_MAX_AGE of 5 s, make -lifecycle-n containers (300) through the
# Messages API, run one command in each, and print the host resources
# (containers, mounts, loop devices, disk, the server's RSS, threads and fds)
# before, at the peak and after the sweeper expired them all. The live turns
# rows (-only live) start a threadbox with docker sandboxes and the runner
# model: the time from a line a command writes in the sandbox to that line
# at an SSE follower of the chat turn (p50/p99, target p50 <= 20 ms) beside
# the same command read through a host pipe, and the server's peak memory
# growth while 1 and then 50 followers read a turn printing 10 MiB.
# The sandbox rows also time a new container's first command on a warm pool
# sandbox (claim to result, runc as root) beside the cold boot. The density
# rows (-only density, -density N, default 1000) open N idle sandboxes,
# -density-parallel at a time (default 4), and print the time to open them
# beside bare containers created and started through the Engine API
# (-density-bare of them, default 200), the CPU each party spent per open,
# the memory each sandbox costs (cgroup, containerd shim PSS, the daemons'
# growth, threadbox side) and the first command of the last ones.
# The checkpoints rows (-only checkpoints, -checkpoint-n rounds, default 10)
# run the gvisor backend in-process (root, runsc and the root filesystem):
# a cold boot to the first result, the checkpoint of an idle sandbox whose
# Python process holds 50 MiB with its image's size on disk, and the restore
# to the first command's result, against its target and the cold boot.
# The snapshots rows (-only snapshots) run in-process on host folders: a
# turn's files snapshot of a 100 MiB workspace with a 1 MiB change and with
# none beside copying the changed file and the whole workspace, a call's
# change list, a rewind, a call's revert and the storage a snapshot adds.
# The microvm rows (-only microvm, -microvm-n boots, default 5) run the
# microvm backend in-process (root, QEMU, make microvm-guest, the root
# filesystem), labelled with the accelerator (MICROVM_ACCEL; unset and no
# usable KVM: emulated, and it says why): boot to the first command, the
# agent channel's round trip, a warm `true`, and an idle VM's PSS.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/threadbox-agent ] || CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/threadbox-agent ./cmd/threadbox-agent
go build -o bin/threadbox-bench ./cmd/threadbox-bench
exec bin/threadbox-bench -agent bin/threadbox-agent "$@"
