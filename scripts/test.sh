#!/usr/bin/env bash
# test: runs the whole suite. Starts a throwaway PostgreSQL 15 cluster in a
# temporary folder unless TEST_DATABASE_URL is already set, and a throwaway
# S3-compatible server (scripts/s3-start.sh) unless TEST_BLOB_URL is. Under CI=true every
# test that needs a real service (PostgreSQL, Docker, runsc, bubblewrap,
# Chromium) fails when it is missing instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

# The run's processes are the ones in its session: scripts/leaks.sh counts
# common programs (node, sleep, ...) left behind only there. The session
# of the shell that started this script is not the run's (a terminal's
# holds an editor and other jobs), so the script runs itself again as the
# leader of a session of its own, which then holds the run's processes
# and nothing else, waits for it and exits with its status. A terminal's
# Ctrl-C now reaches only this process: it is passed on to the run, as the
# terminal would have.
if [ "${TEST_SH_OWN_SESSION:-}" != 1 ] || [ "$(ps -o sid= -p $$ | tr -d ' ')" != "$$" ]; then
  # Not a process group's leader, the background shell is made a
  # session's leader by setsid itself: its pid is the session's and its
  # process group's. A background command would ignore SIGINT and SIGQUIT
  # and read /dev/null: it gets them back, and this script's input.
  ( trap - INT QUIT; TEST_SH_OWN_SESSION=1 exec setsid --wait bash scripts/test.sh "$@" ) <&0 &
  run=$!
  trap 'kill -INT -- "-$run" 2>/dev/null || true' INT
  trap 'kill -TERM -- "-$run" 2>/dev/null || true' TERM HUP
  # wait returns early when a trapped signal arrives: wait again until
  # the run has ended.
  while :; do
    status=0
    wait "$run" || status=$?
    kill -0 "$run" 2>/dev/null || break
  done
  exit "$status"
fi
unset TEST_SH_OWN_SESSION
LEAKS_SID=$$
export LEAKS_SID

# What the host holds before the run, to tell at the end what the run left
# behind (scripts/leaks.sh): a leak fails the run.
leaks_before=$(mktemp)
if ! bash scripts/leaks.sh list > "$leaks_before"; then
  echo "test: scripts/leaks.sh could not list what the host holds" >&2
  exit 1
fi

pgdir=""
k8s_up=""
k8s_pid=""
k8s_out=""
s3started=""
cleanup() {
  # kubernetes test cluster: ends what scripts/k8s-up.sh started (and a
  # bring-up still under way).
  if [ -n "$k8s_pid" ]; then kill "$k8s_pid" 2>/dev/null || true; wait "$k8s_pid" 2>/dev/null || true; rm -f "$k8s_out"; fi
  if [ -n "$k8s_up" ]; then bash scripts/k8s-down.sh || true; fi
  if [ -n "$s3started" ]; then ./scripts/s3-stop.sh; fi
  if [ -n "$pgdir" ]; then
    if [ "$(id -u)" = 0 ]; then su -s /bin/sh postgres -c "pg_ctl -D $pgdir/data -m immediate stop" >/dev/null 2>&1 || true
    else pg_ctl -D "$pgdir/data" -m immediate stop >/dev/null 2>&1 || true; fi
    rm -rf "$pgdir"
  fi
  leaked=0
  bash scripts/leaks.sh check "$leaks_before" || leaked=1
  rm -f "$leaks_before"
  if [ "$leaked" = 1 ]; then exit 1; fi
}
trap cleanup EXIT

if [ -z "${TEST_DATABASE_URL:-}" ]; then
  if [ -x "$(command -v initdb || true)" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    eval "$(./scripts/pg-start.sh)"; export PATH="$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb | tail -1)"):$PATH"
    pgdir="$PG_TMPDIR"
  else
    echo "test: no PostgreSQL found; PostgreSQL tests will $( [ "${CI:-}" = true ] && echo fail || echo skip )" >&2
  fi
fi

if [ -z "${TEST_BLOB_URL:-}" ]; then
  if s3env=$(./scripts/s3-start.sh); then
    eval "$s3env"; s3started=1
  else
    echo "test: the S3-compatible server did not start; the S3 tests will $( [ "${CI:-}" = true ] && echo fail || echo skip )" >&2
  fi
fi

export THREADBOX_AGENT_BIN="${THREADBOX_AGENT_BIN:-$PWD/bin/threadbox-agent}"

# --- kubernetes test cluster ---
# A single-node cluster in a private network namespace for the kubernetes
# backend's tests (scripts/k8s-up.sh; a cold build of its binaries takes
# minutes, later runs reuse the cache). It comes up in the background once
# the sandbox image it imports is ready, and is waited for only before the
# last phase: the kubernetes suite and cmd/threadbox's TestKubernetes…
# tests, the only ones that use it. THREADBOX_K8S=off leaves it out; an
# existing THREADBOX_K8S_KUBECONFIG is used as it is. Without it the
# kubernetes tests fail under CI=true and skip elsewhere.
k8s_start() {
  if [ -z "${THREADBOX_K8S_KUBECONFIG:-}" ] && [ "${THREADBOX_K8S:-on}" != off ] && [ "$(id -u)" = 0 ]; then
    # A cluster up and alive before the run is left up after it.
    if ! bash scripts/k8s-up.sh --status; then k8s_up=1; fi
    k8s_out=$(mktemp)
    bash scripts/k8s-up.sh > "$k8s_out" &
    k8s_pid=$!
  fi
}
k8s_wait() {
  [ -n "$k8s_pid" ] || return 0
  if wait "$k8s_pid"; then export THREADBOX_K8S_KUBECONFIG="$(cat "$k8s_out")"
  else echo "test: the kubernetes test cluster did not come up; its tests will $( [ "${CI:-}" = true ] && echo fail || echo skip )" >&2; fi
  k8s_pid=""
  rm -f "$k8s_out"
}
# --- end kubernetes test cluster ---

# The official TypeScript SDK, a client in the Messages API tests (its
# version pinned by the lockfile).
tssdk=cmd/threadbox/testdata/tssdk
if [ ! -d "$tssdk/node_modules/@anthropic-ai/sdk" ]; then
  if command -v npm >/dev/null 2>&1; then npm ci --prefix "$tssdk" --no-audit --no-fund --loglevel=error
  else echo "test: no npm; the TypeScript SDK tests will $( [ "${CI:-}" = true ] && echo fail || echo skip )" >&2; fi
fi

# The MCP clients of the /mcp tests: the MCP Inspector's CLI and the
# Claude Code CLI (their versions pinned by the lockfile).
mcpclients=cmd/threadbox/testdata/mcpclients
if [ ! -d "$mcpclients/node_modules/@anthropic-ai/claude-code" ]; then
  if command -v npm >/dev/null 2>&1; then npm ci --prefix "$mcpclients" --no-audit --no-fund --loglevel=error
  else echo "test: no npm; the MCP client tests will $( [ "${CI:-}" = true ] && echo fail || echo skip )" >&2; fi
fi

# The reference C2PA implementation (c2pa-rs built to WebAssembly), the
# validator of signed downloads in the Content Credentials tests (its
# version pinned by the lockfile).
c2pa=infra/c2pa/testdata/c2pa
if [ ! -d "$c2pa/node_modules/@contentauth/c2pa-wasm" ]; then
  if command -v npm >/dev/null 2>&1; then npm ci --prefix "$c2pa" --no-audit --no-fund --loglevel=error
  else echo "test: no npm; the Content Credentials tests will $( [ "${CI:-}" = true ] && echo fail || echo skip )" >&2; fi
fi

# The packages that boot no sandbox run first: they need neither the
# sandbox image nor the test cluster, so on a new machine they run while
# the image builds (.ci/run starts its build beside lint). The packages
# that boot real sandboxes run after them. The local backend's rlimit mode
# counts the processes of the host's uid 1000 host-wide, and sandboxes of
# docker (runc) and kubernetes run as that uid too, so a fork-bomb test
# there would starve the local jail: the local package runs alone.
# cmd/threadbox (which boots local, Docker and gVisor sandboxes and drives
# Chromium) runs next, in two halves side by
# side: its tests wait on sandboxes, browsers and servers about half the
# time, so two halves together take about three quarters of the time of
# one after the other (641 against 858 s here). Run beside the sandbox
# suites as well it took as long as the two phases one after the other,
# and its end-to-end tests met timeouts under that load. The rest do not
# count processes by uid and wait mostly on sandboxes, so they run side by
# side: docker's, gVisor's and the microVMs' suites (the last emulated
# here), the kubernetes suite and cmd/threadbox's TestKubernetes… tests in
# the test cluster, and the soak. Everything else runs two packages at a
# time.
beside=(./infra/sandbox/docker ./infra/sandbox/gvisor ./infra/sandbox/kubernetes ./infra/sandbox/microvm ./cmd/threadbox-soak)
parallel=$(go list ./... | grep -v -x -e threadbox/infra/sandbox/docker -e threadbox/infra/sandbox/gvisor -e threadbox/infra/sandbox/microvm -e threadbox/infra/sandbox/local -e threadbox/infra/sandbox/kubernetes -e threadbox/cmd/threadbox -e threadbox/cmd/threadbox-soak)
status=0
t0=$(date +%s)
# Each phase's start, in seconds since the tests began, for reading a run's log.
phase() { echo "=== test: $* ($(( $(date +%s) - t0 ))s)"; }
phase "the packages that boot no sandbox"
go test -count=1 -p 2 -timeout 20m "$@" $parallel || status=1
# The sandbox image and the root filesystem the local jail shares: as root
# with a Docker daemon, a build under way is waited for and a missing or
# outdated image is built (make sandbox-image; a current one returns at
# once).
phase "the sandbox image"
if [ "$(id -u)" = 0 ] && docker info >/dev/null 2>&1; then
  make -s sandbox-image || status=1
fi
k8s_start
phase "infra/sandbox/local"
go test -count=1 -timeout 20m "$@" ./infra/sandbox/local || status=1
phase "cmd/threadbox"
mkdir -p test-artifacts
if printf '%s\n' "$@" | grep -q -e '^-run' -e '^-test.run'; then
  # The arguments choose the tests: they run at once, with the cluster.
  k8s_wait
  go test -count=1 -timeout 40m "$@" ./cmd/threadbox || status=1
  k8s_tests=""
else
  # Every other test in each half (in the order the package lists them),
  # but the TestKubernetes… ones, which run in the last phase. The first
  # go test builds the test binary every later one shares.
  names=$(go test -count=1 -list '.*' "$@" ./cmd/threadbox | grep -E '^(Test|Fuzz|Example)') || status=1
  k8s_tests=$(printf '%s\n' "$names" | { grep '^TestKubernetes' || true; } | paste -sd'|')
  half() { printf '%s\n' "$names" | { grep -v '^TestKubernetes' || true; } | awk -v k="$1" 'NR % 2 == k' | paste -sd'|'; }
  first=$(half 1) second=$(half 0)
  go test -count=1 -timeout 40m "$@" -run "^($first)\$" ./cmd/threadbox > test-artifacts/threadbox-first.log 2>&1 &
  one=$!
  go test -count=1 -timeout 40m "$@" -run "^($second)\$" ./cmd/threadbox > test-artifacts/threadbox-second.log 2>&1 &
  two=$!
  wait "$one" || status=1
  wait "$two" || status=1
  cat test-artifacts/threadbox-first.log test-artifacts/threadbox-second.log
fi
phase "waiting for the test cluster"
k8s_wait
phase "the sandbox suites side by side"
k8s_e2e=""
if [ -n "$k8s_tests" ]; then
  go test -count=1 -timeout 30m "$@" -run "^($k8s_tests)\$" ./cmd/threadbox > test-artifacts/threadbox-kubernetes.log 2>&1 &
  k8s_e2e=$!
fi
go test -count=1 -p 4 -timeout 30m "$@" "${beside[@]}" || status=1
if [ -n "$k8s_e2e" ]; then
  wait "$k8s_e2e" || status=1
  cat test-artifacts/threadbox-kubernetes.log
fi
phase "done"
exit $status
