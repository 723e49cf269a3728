// Package hostdirs lays out each container's folders on the host:
// DATA_DIR/containers/<safe id>/{workspace,uploads,outputs,skills}. Sandbox
// backends bind these into the sandbox at its folder paths, and the
// Files API reads and writes them. With a disk quota the container's folder
// is an ext4 file system in a sparse image file (DATA_DIR/disks/<safe id>.ext4)
// loop-mounted by the host, so writes past the quota fail with ENOSPC for the
// sandbox and the host alike.
package hostdirs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/sandbox"
)

// SandboxUID and SandboxGID own the writable folders: the sandbox user.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// QuotaMode selects how the per-container disk quota is enforced.
type QuotaMode string

// The quota modes.
const (
	// QuotaNone keeps plain folders: no disk limit.
	QuotaNone QuotaMode = "none"
	// QuotaLoop puts each container's folders on its own loop-mounted ext4
	// image of the quota's size (needs root, mkfs.ext4 and mount).
	QuotaLoop QuotaMode = "loop"
)

// Options configure a Layout.
type Options struct {
	Quota     QuotaMode // empty means QuotaNone
	DiskBytes int64     // quota per container; zero means 5 GiB
	// opening, when set, runs just before ContainerFiles opens a path it
	// found a regular file, with the path: what the sandbox may do
	// meanwhile (tests).
	opening func(path string)
}

// DefaultDiskBytes is the default quota per container (SANDBOX_DISK_BYTES).
const DefaultDiskBytes int64 = 5 << 30

// Dirs are the host folders of one container.
type Dirs struct {
	Root      string // the container's folder (the quota's mount point)
	Workspace string
	Uploads   string
	Outputs   string
	Skills    string
}

// Mounts returns the sandbox's bind mounts for these folders: uploads and skills
// read-only inside the sandbox.
func (d Dirs) Mounts() []sandbox.Mount {
	return []sandbox.Mount{
		{Source: d.Workspace, Target: sandbox.WorkspaceDir},
		{Source: d.Uploads, Target: sandbox.UploadsDir, ReadOnly: true},
		{Source: d.Outputs, Target: sandbox.OutputsDir},
		{Source: d.Skills, Target: sandbox.SkillsDir, ReadOnly: true},
	}
}

// Layout maps container ids to host folders under one data directory.
type Layout struct {
	containers  string
	disks       string
	checkpoints string // checkpoints.go
	snapshots   string // snapshots.go
	opts        Options

	locks sandbox.Locks // the work on one container's folders at a time
	mu    sync.Mutex
	used  map[string]use // by folder name: the last Prepare
}

// use is the last Prepare of a container's folders.
type use struct {
	id string
	at time.Time
}

// New returns the layout under dataDir.
func New(dataDir string, opts Options) *Layout {
	if opts.Quota == "" {
		opts.Quota = QuotaNone
	}
	if opts.DiskBytes <= 0 {
		opts.DiskBytes = DefaultDiskBytes
	}
	return &Layout{
		containers:  filepath.Join(dataDir, "containers"),
		disks:       filepath.Join(dataDir, "disks"),
		checkpoints: filepath.Join(dataDir, "checkpoints"),
		snapshots:   filepath.Join(dataDir, "snapshots"),
		opts:        opts,
		used:        map[string]use{},
	}
}

var safePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)
var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// SafeID maps a container id to a name usable as a folder and as a Docker
// container name. Ids that already are such names map to themselves; others
// keep a readable prefix and gain a hash of the whole id, so distinct ids
// never share a name.
func SafeID(id string) string {
	if safeName(id) && !strings.Contains(id, "..") {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	prefix := strings.Trim(unsafeChars.ReplaceAllString(id, "_"), "._-")
	prefix = strings.ReplaceAll(prefix, "..", "_")
	if len(prefix) > 48 {
		prefix = prefix[:48]
	}
	if prefix == "" {
		prefix = "c"
	}
	return prefix + "-" + hex.EncodeToString(sum[:6])
}

// safeName is safePattern.MatchString(id), without the regular
// expression's machinery: SafeID runs on every Messages API request that
// may run code (FuzzSafeNameIsSafePattern).
func safeName(id string) bool {
	if len(id) == 0 || len(id) > 100 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// Dirs returns the folders of container id without touching the disk.
func (l *Layout) Dirs(id string) Dirs {
	// root is clean and ends in a name (SafeID is never empty), so each
	// folder is root and its name: what filepath.Join would make of them.
	root := filepath.Join(l.containers, SafeID(id))
	return Dirs{
		Root:      root,
		Workspace: root + string(filepath.Separator) + "workspace",
		Uploads:   root + string(filepath.Separator) + "uploads",
		Outputs:   root + string(filepath.Separator) + "outputs",
		Skills:    root + string(filepath.Separator) + "skills",
	}
}

// DiskImage returns the path of the container's quota image (QuotaLoop).
func (l *Layout) DiskImage(id string) string {
	return filepath.Join(l.disks, SafeID(id)+".ext4")
}

func (l *Layout) lock(id string) func() { return l.locks.Lock(id) }

// Prepare creates the container's folders (mounting its quota file system
// first when quotas are on) and returns them. It is cheap when they exist;
// call it before any access to a container's files.
func (l *Layout) Prepare(ctx context.Context, id string) (Dirs, error) {
	defer l.lock(id)()
	d := l.Dirs(id)
	l.mu.Lock()
	l.used[filepath.Base(d.Root)] = use{id: id, at: time.Now()}
	l.mu.Unlock()
	if err := os.MkdirAll(d.Root, 0o755); err != nil {
		return Dirs{}, fmt.Errorf("hostdirs: %w", err)
	}
	if l.opts.Quota == QuotaLoop {
		if err := l.mountQuota(ctx, id, d.Root); err != nil {
			return Dirs{}, err
		}
	}
	for _, dir := range []struct {
		path     string
		writable bool
	}{{d.Workspace, true}, {d.Uploads, false}, {d.Outputs, true}, {d.Skills, false}} {
		if err := os.Mkdir(dir.path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return Dirs{}, readOnlyErr(id, fmt.Errorf("hostdirs: %w", err))
		}
		if dir.writable {
			if err := os.Chown(dir.path, SandboxUID, SandboxGID); err != nil {
				// Not root: let the sandbox user write anyway.
				if err := os.Chmod(dir.path, 0o777); err != nil {
					return Dirs{}, readOnlyErr(id, fmt.Errorf("hostdirs: %w", err))
				}
			}
		}
	}
	return d, nil
}

// FilesRoot prepares the container's folders (Prepare) and returns the
// folder that holds them.
func (l *Layout) FilesRoot(ctx context.Context, id string) (string, error) {
	d, err := l.Prepare(ctx, id)
	return d.Root, err
}

// readOnlyErr marks err as sandbox.ErrFoldersReadOnly when it is EROFS: an
// ext4 image whose journal aborted refuses writes so without always
// flagging its mount read-only.
func readOnlyErr(id string, err error) error {
	if errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("hostdirs: %s: %w: %w", id, sandbox.ErrFoldersReadOnly, err)
	}
	return err
}

// Release unmounts the container's quota file system, keeping its files in
// the image; the next Prepare mounts it again. Without quotas it does nothing.
func (l *Layout) Release(ctx context.Context, id string) error {
	defer l.lock(id)()
	return l.unmount(ctx, l.Dirs(id).Root)
}

// ReleaseUnused unmounts the quota file systems (and so frees the loop
// devices) of containers whose folders were not prepared within idle and
// that busy does not claim; it returns the ids released (a folder's name
// for one this process never prepared). A file system still in use stays
// mounted (umount refuses it). Without quotas it does nothing.
func (l *Layout) ReleaseUnused(ctx context.Context, idle time.Duration, busy func(id string) bool) ([]string, error) {
	if l.opts.Quota != QuotaLoop {
		return nil, nil
	}
	roots, err := mountsUnder(l.containers)
	if err != nil {
		return nil, err
	}
	var released []string
	for _, root := range roots {
		name := filepath.Base(root)
		l.mu.Lock()
		u, ok := l.used[name]
		l.mu.Unlock()
		id := name
		if ok {
			id = u.id
			if time.Since(u.at) < idle {
				continue
			}
		}
		if busy != nil && busy(id) {
			continue
		}
		unlock := l.lock(id)
		l.mu.Lock()
		again := l.used[name]
		l.mu.Unlock()
		if ok && again.at.After(u.at) {
			unlock()
			continue
		}
		if err := run(ctx, "umount", root); err == nil {
			released = append(released, id)
			l.mu.Lock()
			delete(l.used, name)
			l.mu.Unlock()
		}
		unlock()
	}
	return released, nil
}

// Remove deletes the container's folders, quota image and checkpoint.
func (l *Layout) Remove(ctx context.Context, id string) error {
	defer l.lock(id)()
	d := l.Dirs(id)
	l.mu.Lock()
	delete(l.used, filepath.Base(d.Root))
	l.mu.Unlock()
	if err := l.unmount(ctx, d.Root); err != nil {
		return err
	}
	if err := os.RemoveAll(d.Root); err != nil {
		return fmt.Errorf("hostdirs: remove: %w", err)
	}
	// The image, and one half made by a server killed while it made it.
	for _, img := range []string{l.DiskImage(id), l.DiskImage(id) + ".tmp"} {
		if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("hostdirs: remove: %w", err)
		}
	}
	if err := os.RemoveAll(l.CheckpointDir(id)); err != nil {
		return fmt.Errorf("hostdirs: remove: %w", err)
	}
	return nil
}

func (l *Layout) mountQuota(ctx context.Context, id, root string) error {
	mounted, err := isMountPoint(root)
	if err != nil {
		return err
	}
	if mounted {
		var st unix.Statfs_t
		if err := unix.Statfs(root, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
			return fmt.Errorf("hostdirs: %s: %w", id, sandbox.ErrFoldersReadOnly)
		}
		return nil
	}
	img := l.DiskImage(id)
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if err := l.makeImage(ctx, img); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("hostdirs: quota image: %w", err)
	}
	if err := MountLoop(ctx, img, root, "nosuid,nodev"); err != nil {
		return fmt.Errorf("hostdirs: mount quota image: %w", err)
	}
	return nil
}

// loopLock is the host-wide lock file MountLoop holds while mount sets up
// a loop device.
const loopLock = "/run/threadbox-loop.lock"

// MountLoop mounts the file system image img on the folder at through a
// loop device, with the mount options opts, holding a lock every process
// on the host takes for it: two mounts that look for a free loop device at
// once can both pick the same one, and one of them then fails ("already
// mounted or mount point busy"). A device another mount is still letting
// go of can be offered as free too, so that failure is tried again a few
// times while at is not mounted. A host where the lock file cannot be
// opened mounts without it.
func MountLoop(ctx context.Context, img, at, opts string) error {
	if f, err := os.OpenFile(loopLock, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
		defer f.Close() // and so unlocks
		_ = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	var err error
	for try := 0; try < 5; try++ {
		if err = run(ctx, "mount", "-o", "loop,"+opts, img, at); err == nil || !strings.Contains(err.Error(), "already mounted or mount point busy") {
			return err
		}
		if mounted, merr := isMountPoint(at); merr != nil || mounted {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(50*(try+1)) * time.Millisecond):
		}
	}
	return err
}

func (l *Layout) makeImage(ctx context.Context, img string) error {
	if err := os.MkdirAll(l.disks, 0o700); err != nil {
		return fmt.Errorf("hostdirs: %w", err)
	}
	tmp := img + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("hostdirs: quota image: %w", err)
	}
	err = f.Truncate(l.opts.DiskBytes) // sparse: takes no space until written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hostdirs: quota image: %w", err)
	}
	// -m 0: no blocks reserved for root, the quota is all the sandbox's.
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hostdirs: format quota image: %w", err)
	}
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("hostdirs: quota image: %w", err)
	}
	return nil
}

func (l *Layout) unmount(ctx context.Context, root string) error {
	mounted, err := isMountPoint(root)
	if err != nil || !mounted {
		return err
	}
	if err := run(ctx, "umount", root); err != nil {
		return fmt.Errorf("hostdirs: unmount: %w", err)
	}
	return nil
}

// mountsUnder lists the mount points directly inside dir (symbolic links
// of dir resolved).
func mountsUnder(dir string) ([]string, error) {
	return mountPoints(dir, func(p, abs string) bool { return filepath.Dir(p) == abs })
}

// isMountPoint reports whether path is a mount point, from /proc/self/mountinfo.
func isMountPoint(path string) (bool, error) {
	ps, err := mountPoints(path, func(p, abs string) bool { return p == abs })
	return len(ps) > 0, err
}

// unescapeMount decodes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
