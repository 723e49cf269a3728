# debian-trixie: sourced by the scripts that take a package from Debian 13
# (trixie) on a Debian 12 host (ci-docker.sh: runsc; sandbox/microvm-guest.sh:
# QEMU). trixie_apt DIR makes a private apt state in DIR that names the
# host's own Debian mirror with the trixie suite, reads its index, and sets
# the array TRIXIE_APT to the apt-get options that use it: the host's apt
# sources, lists and package database are left as they are. DEBIAN_MIRROR
# names another mirror (its URL, ending in /debian).
trixie_apt() {
  local st=$1 mirror
  mirror=${DEBIAN_MIRROR:-$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | tr -d ' ' || true)}
  if [ -z "$mirror" ]; then
    echo "no Debian mirror in this host's apt sources: cannot reach Debian trixie's packages" >&2
    return 1
  fi
  mkdir -p "$st/lists/partial" "$st/cache/archives/partial"
  echo "deb ${mirror%/} trixie main" >"$st/sources.list"
  : >"$st/status"
  TRIXIE_APT=(-o "Dir::Etc::sourcelist=$st/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$st/lists" -o "Dir::Cache=$st/cache" -o "Dir::State::status=$st/status"
    -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  apt-get "${TRIXIE_APT[@]}" update -qq --error-on=any
}
