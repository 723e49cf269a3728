#!/usr/bin/env bash
# s3-start: starts a throwaway S3-compatible server (Versity's S3 gateway
# over a POSIX folder, a real S3 implementation) on a free loopback port and
# prints shell assignments for S3_TMPDIR, S3_PID, TEST_BLOB_URL (a BLOB_URL
# without credentials), TEST_S3_ACCESS_KEY and TEST_S3_SECRET_KEY. Stop it
# with scripts/s3-stop.sh.
#
# The server is built once by scripts/s3-build.sh into a cache outside the
# repository (keyed by scripts/s3server/go.sum).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(bash scripts/s3-build.sh)
dir=$(mktemp -d /tmp/threadbox-s3.XXXXXX)
mkdir -p "$dir/root"
port=$(python3 - <<'PY' 2>/dev/null || echo 17071
import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])
PY
)
access=threadbox-test
secret=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
# The gateway runs in its own session, so the test script's job control
# never stops it by accident; s3-stop.sh ends it by its pid.
ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret setsid "$bin" --quiet --port "127.0.0.1:$port" posix "$dir/root" >"$dir/s3.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then echo "s3-start: the server exited:" >&2; cat "$dir/s3.log" >&2; exit 1; fi
  sleep 0.1
done
echo "export S3_TMPDIR=$dir"
echo "export S3_PID=$pid"
echo "export TEST_BLOB_URL='s3://threadbox-test?endpoint=http://127.0.0.1:$port&region=us-east-1'"
echo "export TEST_S3_ACCESS_KEY=$access"
echo "export TEST_S3_SECRET_KEY=$secret"
