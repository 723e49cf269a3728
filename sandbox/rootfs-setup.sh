#!/bin/sh
# rootfs-setup: runs inside the image's root filesystem (chroot or Docker
# build) after the packages are installed: the sandbox user, the sandbox folders,
# the mount points the host binds over, and small conveniences.
set -eu

# fd-find installs its binary as fdfind; the sandbox promises `fd`.
[ -e /usr/local/bin/fd ] || ln -s /usr/bin/fdfind /usr/local/bin/fd

# The unprivileged sandbox user (uid/gid 1000).
if ! getent group agent >/dev/null; then groupadd -g 1000 agent; fi
if ! getent passwd agent >/dev/null; then
  useradd -u 1000 -g 1000 -m -d /home/agent -s /bin/bash agent
fi

# The sandbox folders and the agent's mount point. The host bind-mounts workspace,
# uploads, outputs and skills over these; they exist so a read-only root
# filesystem still has the targets.
mkdir -p /home/agent/workspace /mnt/user-data/uploads /mnt/user-data/outputs /mnt/skills /opt/threadbox
chown -R 1000:1000 /home/agent /mnt/user-data

# Controlled egress (docs/egress.md): threadbox sets HTTP(S)_PROXY for every
# command, which curl, git, pip and npm read. pip installs for the sandbox
# user (Debian marks the system Python as externally managed) and waits
# less than its default on an unreachable index.
cat > /etc/pip.conf <<'PIPCONF'
[global]
break-system-packages = true
timeout = 30
disable-pip-version-check = true
PIPCONF

# Keep the image small: package caches and docs are not needed at run time.
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/* /var/cache/debconf/*-old
