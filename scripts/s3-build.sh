#!/usr/bin/env bash
# s3-build: builds the throwaway S3-compatible server (Versity's S3 gateway)
# from the module in scripts/s3server (its version pinned by that go.sum)
# into a cache outside the repository and prints the binary's path: in
# $THREADBOX_CACHE (default ~/.cache/threadbox), under a name keyed by the
# go.sum's hash, so a new pin builds a new binary. A warm cache returns at
# once; a caller that finds a build running waits for it (CI starts one in
# the background while other steps run; scripts/s3-start.sh calls this).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${THREADBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadbox}
key=$(sha256sum scripts/s3server/go.sum | cut -c1-16)
bin=$cache/versitygw-$key
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
exec 9>"$bin.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
echo "s3-build: building the S3 server (once; a few minutes) into $bin" >&2
# Built as threadbox's own packages are (cgo on, paths kept), and
# scripts/s3server/go.mod requires threadbox's versions of the modules both
# use: the packages both import are compiled once (Go's build cache).
(cd scripts/s3server && go build -o "$bin.tmp" github.com/versity/versitygw/cmd/versitygw) >&2
mv "$bin.tmp" "$bin"
echo "$bin"
