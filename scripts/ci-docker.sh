#!/usr/bin/env bash
# ci-docker: makes a Docker daemon with the gVisor runtime available on this
# Debian host. Installs docker.io and runsc from Debian's packages when they
# are missing, registers runsc with the daemon (runtime argument
# --network=none; RUNSC_IGNORE_CGROUPS=true adds --ignore-cgroups for hosts
# where runsc cannot drive cgroups, at the price of no limits), starts
# dockerd in the background when it is not running and waits
# until it answers. Safe to run again: every step checks before it acts.
set -euo pipefail

log() { echo "ci-docker: $*" >&2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# 1. Packages.
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# 1b. gVisor new enough for bookworm's userland. Debian 12's runsc
# (gVisor 2022-12-19) fails every statx with AT_NO_AUTOMOUNT, which bookworm's
# coreutils `ls` uses: `ls /` answers "Invalid argument" in the sandbox. The
# runsc of Debian 13 (trixie) works; it is one static binary with no
# dependencies, so it is taken from Debian's trixie suite with a private apt
# state that leaves this host's sources untouched (debian-trixie.sh).
RUNSC_MIN=20240729
runsc_version() { dpkg-query -W -f '${Version}' runsc 2>/dev/null | sed -E 's/^0\.0~([0-9]{8}).*/\1/'; }
if [ "$(runsc_version)" \< "$RUNSC_MIN" ]; then
  log "runsc $(runsc_version) is older than $RUNSC_MIN: installing Debian trixie's runsc"
  st=$(mktemp -d)
  $SUDO bash -c '. "$1"; trixie_apt "$2" && cd "$2" && apt-get "${TRIXIE_APT[@]}" download runsc' _ "$(dirname "$0")/debian-trixie.sh" "$st"
  $SUDO dpkg -i "$st"/runsc_*.deb
  rm -rf "$st"
fi

# 2. Register runsc in /etc/docker/daemon.json (merged, not overwritten).
RUNSC_PATH="$(command -v runsc)"
RUNSC_ARGS='["--network=none"]'
if [ "${RUNSC_IGNORE_CGROUPS:-false}" = true ]; then
  # Only for hosts where runsc cannot drive the cgroups at all: the sandbox
  # then runs WITHOUT memory, CPU and pids limits (runsc ignores them).
  RUNSC_ARGS='["--network=none","--ignore-cgroups"]'
fi
$SUDO mkdir -p /etc/docker
cfg=/etc/docker/daemon.json
want=$(RUNSC_PATH="$RUNSC_PATH" RUNSC_ARGS="$RUNSC_ARGS" python3 - "$cfg" <<'PY'
import json, os, sys
path = sys.argv[1]
try:
    with open(path) as f:
        cfg = json.load(f)
except FileNotFoundError:
    cfg = {}
cfg.setdefault("runtimes", {})["runsc"] = {
    "path": os.environ["RUNSC_PATH"],
    "runtimeArgs": json.loads(os.environ["RUNSC_ARGS"]),
}
print(json.dumps(cfg, indent=2, sort_keys=True))
PY
)
changed=false
if [ ! -f "$cfg" ] || [ "$(cat "$cfg")" != "$want" ]; then
  log "writing $cfg"
  echo "$want" | $SUDO tee "$cfg" >/dev/null
  changed=true
fi

# 3. Start (or reload) dockerd.
running() { docker info >/dev/null 2>&1; }
if running; then
  if [ "$changed" = true ]; then
    log "reloading dockerd for the new runtime configuration"
    $SUDO kill -HUP "$(cat /var/run/docker.pid)" || true
    sleep 1
  fi
else
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    log "starting docker.service"
    $SUDO systemctl start docker || true
  fi
fi
start_dockerd() {
  $SUDO rm -f /var/run/docker.pid
  # The log is appended to at every start: past 64 MiB it becomes
  # dockerd.log.1 (one older generation kept) and a new one starts.
  if [ "$(stat -c %s /var/log/dockerd.log 2>/dev/null || echo 0)" -gt $((64 << 20)) ]; then
    $SUDO mv -f /var/log/dockerd.log /var/log/dockerd.log.1
  fi
  # setsid: the daemon outlives this script and the shell that ran it.
  $SUDO setsid nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null &
}
# A containerd whose container shims were killed (a host whose processes
# were all ended while containers ran) cleans up after each dead shim before
# it answers, about 0.1 s apiece; dockerd gives it 15 s and exits. The work
# done is kept, so the daemon is started again until it comes up: a host
# that ended hundreds of containers this way needs a few starts.
if ! running && ! pgrep -x dockerd >/dev/null; then
  log "starting dockerd in the background (log: /var/log/dockerd.log)"
  start_dockerd
fi
starts=1
for i in $(seq 1 600); do
  if running; then break; fi
  sleep 1
  if running; then break; fi
  if ! pgrep -x dockerd >/dev/null && [ "$starts" -lt 20 ]; then
    log "dockerd exited before it answered ($(tail -n 1 /var/log/dockerd.log | cut -c1-120)); starting it again"
    start_dockerd
    starts=$((starts + 1))
  fi
  # A daemon that neither answers nor exits within a minute is stuck.
  if [ "$i" -ge 60 ] && [ "$starts" -eq 1 ]; then break; fi
done
if ! running; then
  log "dockerd did not come up; last log lines:"
  tail -n 30 /var/log/dockerd.log >&2 || true
  exit 1
fi
if ! docker info --format '{{json .Runtimes}}' | grep -q runsc; then
  log "runsc is not registered with the daemon"
  exit 1
fi
log "dockerd is up ($(docker version --format '{{.Server.Version}} API {{.Server.APIVersion}}'); runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}'))"
