package microvm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"threadbox/infra/sandbox/boxes"
)

// initScript is the guest's /init (init.sh).
//
//go:embed init.sh
var initScript []byte

// Guest is the guest artefacts one build of sandbox/microvm-guest.sh left
// in a folder: the kernel, a static busybox and the kernel modules the
// init loads (virtio over MMIO, the virtio console, 9p), in the order it
// loads them.
type Guest struct {
	Dir     string // the folder, its symbolic links resolved
	Kernel  string // vmlinux: uncompressed, booted at its PVH entry
	Busybox string // a static busybox
	Modules []string
}

// FindGuest returns the folder of the guest artefacts: MICROVM_GUEST, else
// microvm-guest/current in the cache the sandbox image's build uses
// (THREADBOX_CACHE_DIR, else DATA_DIR/cache, else /var/cache/threadbox), or
// "" when neither has a kernel.
func FindGuest(getenv func(string) string) string {
	return boxes.FindCached(getenv, "MICROVM_GUEST", "microvm-guest", "vmlinux")
}

// GuestQEMU returns the QEMU the guest artefacts of dir carry (the wrapper
// sandbox/microvm-guest.sh writes, which starts Debian 13's QEMU with its
// own libraries), or "" when dir has none.
func GuestQEMU(dir string) string {
	if dir == "" {
		return ""
	}
	q := filepath.Join(dir, DefaultQEMU)
	if fi, err := os.Stat(q); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return ""
	}
	return q
}

// LoadGuest reads the guest artefacts of dir; kernel, when set, replaces
// the folder's kernel (an operator's, such as one built for PVM).
func LoadGuest(dir, kernel string) (Guest, error) {
	if dir == "" {
		return Guest{}, errors.New("no guest artefacts (build them with `make microvm-guest`, or set MICROVM_GUEST)")
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	g := Guest{Dir: dir, Kernel: filepath.Join(dir, "vmlinux"), Busybox: filepath.Join(dir, "busybox")}
	if kernel != "" {
		g.Kernel = kernel
	}
	for _, f := range []string{g.Kernel, g.Busybox} {
		if fi, err := os.Stat(f); err != nil || fi.IsDir() {
			return Guest{}, fmt.Errorf("guest artefacts: %s missing (rebuild them with `make microvm-guest`)", f)
		}
	}
	order, err := os.ReadFile(filepath.Join(dir, "modules", "order"))
	if err != nil {
		return Guest{}, fmt.Errorf("guest artefacts: %w (rebuild them with `make microvm-guest`)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(order))
	for sc.Scan() {
		if m := strings.TrimSpace(sc.Text()); m != "" {
			g.Modules = append(g.Modules, m)
		}
	}
	for _, m := range g.Modules {
		if _, err := os.Stat(filepath.Join(dir, "modules", m+".ko")); err != nil {
			return Guest{}, fmt.Errorf("guest artefacts: module %s: %w", m, err)
		}
	}
	return g, nil
}

// cpioWriter writes an archive in the "newc" format the kernel unpacks as
// its initramfs. Every entry is root's, dated 0, so that the same inputs
// make the same bytes.
type cpioWriter struct {
	w   io.Writer
	n   int64
	ino int
	err error
}

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	k, err := c.w.Write(p)
	c.n += int64(k)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one entry: mode holds the type bits; rdev is a device
// node's major and minor.
func (c *cpioWriter) entry(name string, mode uint32, data []byte, rdev [2]int) {
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) dir(name string)                      { c.entry(name, 0o040755, nil, [2]int{}) }
func (c *cpioWriter) file(name string, m uint32, b []byte) { c.entry(name, 0o100000|m, b, [2]int{}) }

// close writes the trailer.
func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, nil, [2]int{})
	return c.err
}

// writeBaseInitramfs writes the part of every VM's initramfs that is the
// same for all: /init, busybox, the modules and their order, the agent.
func writeBaseInitramfs(w io.Writer, g Guest, agentBin string) error {
	c := &cpioWriter{w: w}
	for _, d := range []string{"bin", "dev", "lib", "lib/modules", "newroot", "proc", "sys", "threadbox"} {
		c.dir(d)
	}
	// The kernel opens /dev/console as init's standard streams.
	c.entry("dev/console", 0o020600, nil, [2]int{5, 1})
	c.file("init", 0o755, initScript)
	read := func(name, path string, mode uint32) {
		if c.err != nil {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			c.err = err
			return
		}
		c.file(name, mode, b)
	}
	read("bin/busybox", g.Busybox, 0o755)
	for _, m := range g.Modules {
		read("lib/modules/"+m+".ko", filepath.Join(g.Dir, "modules", m+".ko"), 0o644)
	}
	c.file("lib/modules/order", 0o644, []byte(strings.Join(g.Modules, "\n")+"\n"))
	read("threadbox/agent", agentBin, 0o755)
	return c.close()
}

// writeConfigInitramfs writes the part of one VM's initramfs that is its
// own: /threadbox/config, which the init sources.
func writeConfigInitramfs(w io.Writer, config []byte) error {
	c := &cpioWriter{w: w}
	c.file("threadbox/config", 0o600, config)
	return c.close()
}

// shellQuote quotes s as one word of a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fileDigest returns the sha256 of the file at path.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
