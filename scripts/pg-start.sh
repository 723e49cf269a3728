#!/usr/bin/env bash
# pg-start: starts a throwaway PostgreSQL cluster on a free loopback port and
# prints shell assignments for PG_TMPDIR and TEST_DATABASE_URL.
set -euo pipefail
bindir=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
dir=$(mktemp -d /tmp/threadbox-pg.XXXXXX)
chown -R "${PG_USER:-postgres}" "$dir" 2>/dev/null || true
run() { if [ "$(id -u)" = 0 ]; then su -s /bin/sh postgres -c "$*"; else sh -c "$*"; fi; }
port=$(python3 - <<'PY' 2>/dev/null || echo 54329
import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])
PY
)
run "$bindir/initdb -D $dir/data -U threadbox --auth=trust -E UTF8 >$dir/initdb.log 2>&1"
run "$bindir/pg_ctl -D $dir/data -o '-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off' -l $dir/pg.log -w start >/dev/null"
echo "export PG_TMPDIR=$dir"
echo "export TEST_DATABASE_URL='postgres://threadbox@127.0.0.1:$port/postgres?sslmode=disable'"
