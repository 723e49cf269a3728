// Package guestinit is the last part of a microVM guest's init, which the
// threadbox agent runs in-process before it serves: it waits for the
// host's word when the VM is a template of warm VMs, sets the clock and
// reseeds the kernel's random generator of a restored copy, mounts the
// sandbox image's root filesystem (a 9p or virtiofs share, or an erofs
// image on a block device, which a template mounts before it holds) and
// the container's folders (9p or virtiofs shares), moves what the shell
// part of the init made into the new root, and moves into it.
//
// It is Go rather than the init's shell because a copy restored from a
// template runs it after the restore: every busybox command there is a
// process whose code the emulator translates afresh, and the agent already
// runs in the template.
package guestinit

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"threadbox/domain/sandbox"
)

// Lines the guest writes on the agent's port before it speaks the agent
// protocol.
const (
	// HeldLine says a template's guest holds, to be saved.
	HeldLine = "threadbox-init-held\n"
	// ReadyLine says the guest is about to serve the agent protocol.
	ReadyLine = "threadbox-init-ready\n"
)

// SeedBytes is the size of the random seed the host sends a restored copy.
const SeedBytes = 32

// Share is one container folder a guest mounts: the 9p tag, its target
// path in the sandbox, whether it is read-only, and Sub, the share's
// subfolder mounted at the target ("" for the share's root; a warm VM's
// shares are slots whose subfolder the host binds the container's folder
// onto at its claim).
type Share struct {
	Tag      string
	Target   string
	ReadOnly bool
	Sub      string
}

// String is the share as one word of the init's config,
// tag:target:mode:sub.
func (s Share) String() string {
	mode := "rw"
	if s.ReadOnly {
		mode = "ro"
	}
	sub := s.Sub
	if sub == "" {
		sub = "."
	}
	return s.Tag + ":" + s.Target + ":" + mode + ":" + sub
}

// Check says why s cannot be written as one config word, or nil.
func (s Share) Check() error {
	if s.Tag == "" || strings.ContainsAny(s.Tag, " \t\n:/") {
		return fmt.Errorf("share tag %q: not a plain name", s.Tag)
	}
	if !filepath.IsAbs(s.Target) || strings.ContainsAny(s.Target, " \t\n'\"\\:$`") {
		return fmt.Errorf("mount target %q: not a plain absolute path", s.Target)
	}
	if s.Sub == "." || strings.ContainsAny(s.Sub, " \t\n'\"\\:$`/") || s.Sub == ".." {
		return fmt.Errorf("share subfolder %q: not a plain name", s.Sub)
	}
	return nil
}

// ParseShares reads the init config's list of shares (words of
// tag:target:mode:sub, space-separated).
func ParseShares(words string) ([]Share, error) {
	var out []Share
	for _, w := range strings.Fields(words) {
		parts := strings.Split(w, ":")
		if len(parts) != 4 || (parts[2] != "ro" && parts[2] != "rw") {
			return nil, fmt.Errorf("share %q: want tag:target:ro|rw:sub", w)
		}
		s := Share{Tag: parts[0], Target: parts[1], ReadOnly: parts[2] == "ro", Sub: parts[3]}
		if s.Sub == "." {
			s.Sub = ""
		}
		if err := s.Check(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Paths of the guest's initramfs: the new root's mount point, and the
// tmpfs mounts the shell part of the init makes at their paths in the
// sandbox.
const (
	NewRoot  = "/newroot" // where the root filesystem is mounted
	tmpDir   = "/tmp"     // the sandbox's /tmp, a tmpfs
	sharesAt = "/shares"  // a warm VM's shares, mounted for a moment
)

// options9p are the 9p mount options of every share.
const options9p = "trans=virtio,version=9p2000.L,msize=262144"

// The file systems a guest's shares are served with: QEMU's own 9p, or
// virtiofs (a virtiofsd per share on the host), the one QEMU can save a
// VM with mounted.
const (
	FS9p       = "9p"
	FSVirtiofs = "virtiofs"
)

// Where a guest's root filesystem comes from: shared from the host like
// the container's folders (over their file system), or a read-only erofs
// image of it on the VM's first block device (RootDevice). QEMU saves a
// VM with a block device's file system mounted, not with a 9p share, so a
// template of warm VMs holds an image root mounted, and with it in the
// guest's page cache what its warm-up read.
const (
	RootShared = "shared"
	RootImage  = "image"
	// RootDevice is the image's block device in the guest.
	RootDevice = "/dev/vda"
)

// CheckRoot says why root is not a root's source, or nil.
func CheckRoot(root string) error {
	if root != RootShared && root != RootImage {
		return fmt.Errorf("root filesystem source %q: want %s or %s", root, RootShared, RootImage)
	}
	return nil
}

// CheckFS says why fs is not a share file system, or nil.
func CheckFS(fs string) error {
	if fs != FS9p && fs != FSVirtiofs {
		return fmt.Errorf("share file system %q: want %s or %s", fs, FS9p, FSVirtiofs)
	}
	return nil
}

// Op is one step of the mounts: a mount(2) (Move and Bind are its
// MS_MOVE and MS_BIND), an umount(2) (Unmount), or a folder made (Mkdir).
type Op struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
	Unmount, Mkdir         bool
}

// String is the step as the mount command would be written.
func (o Op) String() string {
	switch {
	case o.Mkdir:
		return "mkdir " + o.Target
	case o.Unmount:
		return "umount " + o.Target
	case o.Flags&unix.MS_MOVE != 0:
		return "mount --move " + o.Source + " " + o.Target
	case o.Flags&unix.MS_BIND != 0:
		return "mount --bind " + o.Source + " " + o.Target
	}
	opts := []string{}
	for _, f := range []struct {
		bit  uintptr
		name string
	}{{unix.MS_RDONLY, "ro"}, {unix.MS_NOSUID, "nosuid"}, {unix.MS_NODEV, "nodev"}, {unix.MS_NOEXEC, "noexec"}} {
		if o.Flags&f.bit != 0 {
			opts = append(opts, f.name)
		}
	}
	if o.Data != "" {
		opts = append(opts, o.Data)
	}
	return "mount -t " + o.FSType + " -o " + strings.Join(opts, ",") + " " + o.Source + " " + o.Target
}

// Plan is the mounts that make the new root, its shares served with fs
// (FS9p or FSVirtiofs) and its root filesystem from root (RootShared or
// RootImage): rootPlan's, then sharePlan's.
func Plan(shares []Share, fs, root string) []Op {
	return append(rootPlan(fs, root), sharePlan(shares, fs)...)
}

// rootPlan is the part of the new root that needs none of the container's
// folders: the root filesystem (read-only; over 9p with the guest's cache,
// virtiofsd caches it over virtiofs; an image is the guest's own block
// device), /proc, /sys, and the staged /tmp and agent folder.
func rootPlan(fs, root string) []Op {
	r := Op{Source: "root", Target: NewRoot, FSType: "9p", Flags: unix.MS_RDONLY, Data: options9p + ",cache=loose"}
	switch {
	case root == RootImage:
		r.Source, r.FSType, r.Data = RootDevice, "erofs", ""
	case fs == FSVirtiofs:
		r.FSType, r.Data = FSVirtiofs, ""
	}
	return []Op{
		r,
		{Source: "proc", Target: NewRoot + "/proc", FSType: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{Source: "sysfs", Target: NewRoot + "/sys", FSType: "sysfs", Flags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{Source: tmpDir, Target: NewRoot + tmpDir, Flags: unix.MS_MOVE},
		{Source: sandbox.AgentDir, Target: NewRoot + sandbox.AgentDir, Flags: unix.MS_MOVE},
	}
}

// sharePlan mounts each share (a share's root at its target, or a warm
// VM's subfolder bound there and the share's own mount let go), then
// moves /dev in and lets the initramfs's /sys and /proc go.
func sharePlan(shares []Share, fs string) []Op {
	var ops []Op
	for _, s := range shares {
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
		if s.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		share := Op{Source: s.Tag, Target: NewRoot + s.Target, FSType: "9p", Flags: flags, Data: options9p + ",cache=none"}
		if fs == FSVirtiofs {
			share.FSType, share.Data = FSVirtiofs, ""
		}
		if s.Sub == "" {
			ops = append(ops, share)
			continue
		}
		at := sharesAt + "/" + s.Tag
		share.Target = at
		ops = append(ops, Op{Target: at, Mkdir: true}, share,
			Op{Source: at + "/" + s.Sub, Target: NewRoot + s.Target, Flags: unix.MS_BIND},
			Op{Target: at, Unmount: true})
	}
	return append(ops,
		Op{Source: "/dev", Target: NewRoot + "/dev", Flags: unix.MS_MOVE},
		Op{Target: "/sys", Unmount: true},
		Op{Target: "/proc", Unmount: true})
}

// Do carries out one step.
func (o Op) Do() error {
	var err error
	switch {
	case o.Mkdir:
		err = os.MkdirAll(o.Target, 0o755)
	case o.Unmount:
		err = unix.Unmount(o.Target, 0)
	default:
		err = unix.Mount(o.Source, o.Target, o.FSType, o.Flags, o.Data)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", o, err)
	}
	return nil
}

// Go is the host's word to a restored copy: go on, with the host's clock
// (Unix nanoseconds) when the copy started running, and this random seed.
func Go(resumedUnixNano int64, seed []byte) string {
	return "go " + strconv.FormatInt(resumedUnixNano, 10) + " " + hex.EncodeToString(seed) + "\n"
}

// ParseGo reads the host's word.
func ParseGo(line string) (resumedUnixNano int64, seed []byte, err error) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "go" {
		return 0, nil, fmt.Errorf("expected go from the host, got %q", strings.TrimSpace(line))
	}
	if resumedUnixNano, err = strconv.ParseInt(f[1], 10, 64); err != nil || resumedUnixNano <= 0 {
		return 0, nil, fmt.Errorf("the host's clock %q", f[1])
	}
	if seed, err = hex.DecodeString(f[2]); err != nil || len(seed) != SeedBytes {
		return 0, nil, fmt.Errorf("the host's seed: want %d hex bytes", SeedBytes)
	}
	return resumedUnixNano, seed, nil
}

// Init is what the guest's init is told: the shares, their file system
// (FS9p or FSVirtiofs), the root filesystem's source (RootShared or
// RootImage), and whether the VM is a template, which holds to be saved.
type Init struct {
	Shares []Share
	FS     string
	Root   string
	Hold   bool
	// Warm, when set, runs in a template whose root is an image, with the
	// root mounted at the path it is given, before the template holds:
	// what it reads stays in the guest's page cache, which every copy
	// restored from the template starts with.
	Warm func(root string) error
}

// Run finishes the init: it removes the initramfs's files; it mounts an
// image root (and runs c.Warm in a template); with c.Hold (a template,
// saved from then on) it writes HeldLine on out and waits for the host's
// word on in (read a byte at a time, so that nothing after the line is
// taken), then sets the clock and reseeds the random generator; it mounts
// the rest of Plan, moves into the new root and writes ReadyLine.
func Run(in io.Reader, out io.Writer, c Init) error {
	return run(in, out, os.Stderr, c, removeInitramfs, Op.Do)
}

// run is Run with the removal of the initramfs's files, all but keep's,
// as remove (removeInitramfs, or a test's), each step of the mounts
// carried out by step (Op.Do, or a test's), and what the init goes on
// without told on console (the guest's console, or a test's).
func run(in io.Reader, out, console io.Writer, c Init, remove func(keep string) error, step func(Op) error) error {
	// Nothing needs the initramfs's files any more (the agent runs from
	// its staged copy), and a template saved without them spares each
	// copy restored from it their removal.
	if err := remove(NewRoot); err != nil {
		return err
	}
	rootOps, shareOps := rootPlan(c.FS, c.Root), sharePlan(c.Shares, c.FS)
	// An image root is the guest's own device: it is mounted before a
	// template holds, so that no copy mounts it or reads its shell again.
	if c.Root == RootImage {
		if err := do(rootOps, step); err != nil {
			return err
		}
		rootOps = nil
		if c.Hold && c.Warm != nil {
			// A warm-up that fails costs the copies their first reads,
			// nothing else: it is told on the console, and the template
			// holds all the same.
			if err := c.Warm(NewRoot); err != nil {
				fmt.Fprintln(console, "threadbox-init: warm the root filesystem:", err)
			}
		}
	}
	if c.Hold {
		if _, err := io.WriteString(out, HeldLine); err != nil {
			return fmt.Errorf("agent port: %w", err)
		}
		held := time.Now()
		line, err := readLine(in)
		if err != nil {
			return fmt.Errorf("agent port: %w", err)
		}
		resumed, seed, err := ParseGo(line)
		if err != nil {
			return err
		}
		if err := Resume(resumed, held, seed); err != nil {
			return err
		}
	}
	if err := do(append(rootOps, shareOps...), step); err != nil {
		return err
	}
	if err := switchRoot(NewRoot); err != nil {
		return err
	}
	if _, err := io.WriteString(out, ReadyLine); err != nil {
		return fmt.Errorf("agent port: %w", err)
	}
	return nil
}

// do carries out ops in order with step, up to the first that fails.
func do(ops []Op, step func(Op) error) error {
	for _, o := range ops {
		if err := step(o); err != nil {
			return err
		}
	}
	return nil
}

// readLine reads up to and with the first newline, one byte at a time.
func readLine(r io.Reader) (string, error) {
	var b strings.Builder
	one := make([]byte, 1)
	for b.Len() < 4096 {
		if _, err := io.ReadFull(r, one); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			return b.String(), nil
		}
		b.WriteByte(one[0])
	}
	return "", errors.New("the host's line is too long")
}

// Resume sets the clock of a restored guest, which stood still while it
// was saved, and gives its random generator the host's seed (SeedBytes;
// none for a VM that was paused, not copied).
// resumedUnixNano is the host's clock when the guest started running
// again, and held the guest's time when it held to be saved: the guest's
// monotonic clock stood still from then until it ran again (QEMU saves
// and restores the guest's time stamp counter), so the time since it
// resumed is the monotonic time since held, however long this guest,
// slow after a restore (an emulated CPU translates its code afresh),
// took to read the host's word.
func Resume(resumedUnixNano int64, held time.Time, seed []byte) error {
	tv := unix.NsecToTimeval(resumedUnixNano + int64(time.Since(held)))
	if err := unix.Settimeofday(&tv); err != nil {
		return fmt.Errorf("set the clock: %w", err)
	}
	if len(seed) == 0 {
		return nil
	}
	return reseed(seed)
}

// reseed gives the kernel's random generator the host's seed, credited,
// and makes it reseed now. Copies restored from one template start with
// the same generator state; without this they would hand code the same
// "random" bytes.
func reseed(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info: entropy_count (bits), buf_size (bytes), buf.
	info := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(info[0:4], uint32(8*len(seed)))
	binary.NativeEndian.PutUint32(info[4:8], uint32(len(seed)))
	copy(info[8:], seed)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("reseed: add the host's seed: %w", errno)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.RNDRESEEDCRNG, 0); err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	return nil
}

// removeInitramfs deletes the initramfs's files (busybox, the modules, the
// agent's first copy, the config with the agent's environment) but keep,
// the new root's mount point, to give their memory back, as busybox's
// switch_root does. It never crosses into another file system.
func removeInitramfs(keep string) error {
	var root unix.Stat_t
	if err := unix.Lstat("/", &root); err != nil {
		return fmt.Errorf("remove the initramfs: %w", err)
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return fmt.Errorf("remove the initramfs: %w", err)
	}
	for _, e := range entries {
		if p := "/" + e.Name(); p != keep {
			if err := removeSameDev(p, root.Dev); err != nil {
				return fmt.Errorf("remove the initramfs: %w", err)
			}
		}
	}
	return nil
}

// removeSameDev removes path and what it holds on file system dev.
func removeSameDev(path string, dev uint64) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if st.Dev != dev {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := removeSameDev(path+"/"+e.Name(), dev); err != nil {
				return err
			}
		}
		// A folder still holding another file system's mount point (the
		// staged /opt/threadbox's /opt) stays, as a mount point does.
		if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
		return nil
	}
	return unix.Unlink(path)
}

// switchRoot makes dir the root, as busybox's switch_root does: the mount
// at dir moves onto /, the process's root and working folder follow.
func switchRoot(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("switch root: move %s onto /: %w", dir, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	return nil
}
