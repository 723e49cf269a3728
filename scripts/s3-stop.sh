#!/usr/bin/env bash
# s3-stop: stops the server scripts/s3-start.sh started (S3_PID) and removes
# its folder (S3_TMPDIR).
set -uo pipefail
if [ -n "${S3_PID:-}" ]; then
  kill "$S3_PID" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$S3_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$S3_PID" 2>/dev/null
fi
case "${S3_TMPDIR:-}" in /tmp/threadbox-s3.*) rm -rf "$S3_TMPDIR" ;; esac
exit 0
