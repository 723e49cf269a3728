package microvm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/microvm/guestinit"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestChooseAccel: KVM where it runs the stock kernel; on PVM only with
// the operator's kernel or when insisted on; emulation only when asked;
// no accelerator is an error naming MICROVM_ACCEL=tcg.
func TestChooseAccel(t *testing.T) {
	dir := t.TempDir()
	pvm := filepath.Join(dir, "kvm_pvm")
	if err := os.Mkdir(pvm, 0o755); err != nil {
		t.Fatal(err)
	}
	none := accelHost{kvmDev: filepath.Join(dir, "nokvm"), pvmMod: filepath.Join(dir, "nopvm")}
	if a, err := chooseAccel("tcg", false, none); err != nil || a != AccelTCG {
		t.Errorf("tcg: %q %v", a, err)
	}
	for _, setting := range []string{"", "kvm"} {
		if _, err := chooseAccel(setting, false, none); err == nil || !strings.Contains(err.Error(), "no usable accelerator") || !strings.Contains(err.Error(), "MICROVM_ACCEL=tcg") {
			t.Errorf("%q without /dev/kvm: %v", setting, err)
		}
	}
	if _, err := chooseAccel("fast", false, none); err == nil {
		t.Error("an unknown setting was accepted")
	}
	if openKVM("/dev/kvm") != nil {
		return // the rest needs a /dev/kvm that answers
	}
	onPVM := accelHost{kvmDev: "/dev/kvm", pvmMod: pvm}
	if _, err := chooseAccel("", false, onPVM); err == nil || !strings.Contains(err.Error(), "PVM") || !strings.Contains(err.Error(), "MICROVM_KERNEL") {
		t.Errorf("PVM, stock kernel: %v", err)
	}
	if a, err := chooseAccel("", true, onPVM); err != nil || a != AccelKVM {
		t.Errorf("PVM, the operator's kernel: %q %v", a, err)
	}
	if a, err := chooseAccel("", false, accelHost{kvmDev: "/dev/kvm", pvmMod: filepath.Join(dir, "nopvm")}); err != nil || a != AccelKVM {
		t.Errorf("KVM: %q %v", a, err)
	}
}

// TestGuestQEMU: the backend runs the QEMU the guest artefacts carry,
// unless MICROVM_QEMU names another; a folder without one (or with a
// file that cannot run) leaves QEMU to PATH.
func TestGuestQEMU(t *testing.T) {
	withQEMU, plainFile, none := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(withQEMU, DefaultQEMU), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plainFile, DefaultQEMU), []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, guest, qemu, want string
	}{
		{"carried", withQEMU, "", filepath.Join(withQEMU, DefaultQEMU)},
		{"operator's", withQEMU, "/opt/qemu/bin/qemu-system-x86_64", "/opt/qemu/bin/qemu-system-x86_64"},
		{"not executable", plainFile, "", DefaultQEMU},
		{"none in the folder", none, "", DefaultQEMU},
		{"no guest folder", "", "", DefaultQEMU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(Config{Guest: tc.guest, QEMU: tc.qemu})
			if err != nil {
				t.Fatal(err)
			}
			if b.cfg.QEMU != tc.want {
				t.Errorf("QEMU = %q, want %q", b.cfg.QEMU, tc.want)
			}
		})
	}
}

// TestGuestWrappers: the guest artefacts' QEMU and virtiofsd start from
// their own folder whether they are run by their path, through the
// folder's link (current) or through a link to the file itself.
func TestGuestWrappers(t *testing.T) {
	_, guest, _ := prerequisites(t)
	links := t.TempDir()
	for _, name := range []string{DefaultQEMU, "virtiofsd"} {
		real, err := filepath.EvalSymlinks(filepath.Join(guest, name))
		if err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(links, name)
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{real, filepath.Join(guest, name), link} {
			out, err := exec.Command(path, "--version").CombinedOutput()
			if err != nil || !strings.Contains(strings.ToLower(string(out)), strings.ToLower(strings.TrimSuffix(name, "-system-x86_64"))) {
				t.Errorf("%s --version: %v: %s", path, err, out)
			}
		}
	}
}

// TestVMConfig: the init's config quotes every environment value as one
// shell word, keeps THREADBOX_AGENT_ variables of the spec out, and
// refuses a mount target a shell word cannot carry.
func TestVMConfig(t *testing.T) {
	spec := sandbox.Spec{ID: "x", Env: []string{"TOKEN=it's $(secret) `x`\nline2", "THREADBOX_AGENT_RUN_AS=0:0"},
		Mounts: []sandbox.Mount{{Source: "/h/w", Target: "/home/agent/workspace"}, {Source: "/h/u", Target: "/mnt/user-data/uploads", ReadOnly: true}}}
	l := sandbox.Limits{TmpBytes: 1 << 20, Pids: 77, NoFile: 1024}
	cfg, err := vmConfig(spec, shares(spec, false), l, guestinit.FS9p, guestinit.RootShared, false)
	if err != nil {
		t.Fatal(err)
	}
	script := string(cfg) + `printf '%s\n' "TB_TMP=$TB_TMP" "TB_PIDS=$TB_PIDS" "TB_MOUNTS=$TB_MOUNTS"; for a in "$@"; do printf '<%s>\n' "$a"; done`
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := string(out)
	for _, want := range []string{"TB_TMP=1048576\n", "TB_PIDS=77\n", "TB_MOUNTS=m0:/home/agent/workspace:rw:. m1:/mnt/user-data/uploads:ro:.\n",
		"<TOKEN=it's $(secret) `x`\nline2>", "<THREADBOX_AGENT_RUN_AS=1000:1000>", "<THREADBOX_AGENT_NOFILE=1024>", "<THREADBOX_AGENT_OOM_EVENTS=/proc/vmstat>"} {
		if !strings.Contains(got, want) {
			t.Errorf("config gives %q, want %q in it", got, want)
		}
	}
	if strings.Contains(got, "<THREADBOX_AGENT_RUN_AS=0:0>") {
		t.Error("the spec set the agent's own variable")
	}
	spec.Mounts[0].Target = "/home/agent/work space"
	if _, err := vmConfig(spec, shares(spec, false), l, guestinit.FS9p, guestinit.RootShared, false); err == nil {
		t.Error("a target with a space was accepted")
	}
}

// TestInitMounts reads TB_MOUNTS from the init's config of a VM booted
// cold and of a warm VM as the guest's agent does, and checks the mounts it
// plans: a cold VM's shares are mounted at their targets; a warm VM's
// share is mounted aside, its subfolder bound at the target, and the
// share's own mount let go.
func TestInitMounts(t *testing.T) {
	spec := sandbox.Spec{ID: "x", Mounts: []sandbox.Mount{{Source: "/slot/0/d", Target: "/home/agent/workspace"}, {Source: "/slot/1/d", Target: "/mnt/user-data/uploads", ReadOnly: true}}}
	const o = "trans=virtio,version=9p2000.L,msize=262144"
	for _, tc := range []struct {
		warm bool
		want []string
	}{
		{false, []string{
			"mount -t 9p -o nosuid,nodev," + o + ",cache=none m0 /newroot/home/agent/workspace",
			"mount -t 9p -o ro,nosuid,nodev," + o + ",cache=none m1 /newroot/mnt/user-data/uploads",
		}},
		{true, []string{
			"mkdir /shares/m0",
			"mount -t 9p -o nosuid,nodev," + o + ",cache=none m0 /shares/m0",
			"mount --bind /shares/m0/d /newroot/home/agent/workspace",
			"umount /shares/m0",
			"mkdir /shares/m1",
			"mount -t 9p -o ro,nosuid,nodev," + o + ",cache=none m1 /shares/m1",
			"mount --bind /shares/m1/d /newroot/mnt/user-data/uploads",
			"umount /shares/m1",
		}},
	} {
		cfg, err := vmConfig(spec, shares(spec, tc.warm), sandbox.Limits{}, guestinit.FS9p, guestinit.RootShared, false)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", string(cfg)+`printf %s "$TB_MOUNTS"`).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		sh, err := guestinit.ParseShares(string(out))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, op := range guestinit.Plan(sh, guestinit.FS9p, guestinit.RootShared) {
			if s := op.String(); strings.Contains(s, " m0 ") || strings.Contains(s, " m1 ") || strings.Contains(s, "/shares/") {
				got = append(got, s)
			}
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("warm %v: the init does\n%s\nwant\n%s", tc.warm, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestInitramfs: the archive is what cpio reads, the same bytes for the
// same inputs.
func TestInitramfs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"busybox", "modules/a.ko", "agent"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("content of "+f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g := Guest{Dir: dir, Busybox: filepath.Join(dir, "busybox"), Modules: []string{"a"}}
	var one, two bytes.Buffer
	for _, b := range []*bytes.Buffer{&one, &two} {
		if err := writeBaseInitramfs(b, g, filepath.Join(dir, "agent")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) || one.Len()%4 != 0 {
		t.Fatalf("two writes differ, or the length %d is not aligned", one.Len())
	}
	if err := writeConfigInitramfs(&one, []byte("TB_PIDS=1\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("cpio"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no cpio to read the archive back (.ci/run installs it)")
		}
		t.Skip("no cpio to read the archive back")
	}
	out := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = out, bytes.NewReader(one.Bytes())
	if b, err := cmd.CombinedOutput(); err != nil && !bytes.Contains(b, []byte("console")) {
		t.Fatalf("cpio: %v: %s", err, b)
	}
	for f, want := range map[string]string{"init": string(initScript), "bin/busybox": "content of busybox", "lib/modules/a.ko": "content of modules/a.ko",
		"lib/modules/order": "a\n", "threadbox/agent": "content of agent"} {
		if b, err := os.ReadFile(filepath.Join(out, f)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", f, b, err)
		}
	}
	// The config is the second archive, after the first's trailer, as
	// the kernel reads them.
	rest := one.Bytes()[bytes.Index(one.Bytes(), []byte("TRAILER!!!"))+12:]
	cmd = exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = out, bytes.NewReader(bytes.TrimLeft(rest, "\x00"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio, second archive: %v: %s", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(out, "threadbox/config")); err != nil || string(b) != "TB_PIDS=1\n" {
		t.Errorf("config: %q %v", b, err)
	}
}

// TestKilledFromOutside: a VM whose QEMU is killed by someone else is
// reconciled like a container that died: a command in flight fails as
// unavailable, the status is no longer running, the next Ensure boots a
// fresh VM over the same files, and nothing of the dead one is left.
func TestKilledFromOutside(t *testing.T) {
	b := newTestBackend(t, Config{})
	data := t.TempDir()
	dirs := hostdirs.New(data, hostdirs.Options{})
	ctx := context.Background()
	d, err := dirs.Prepare(ctx, "killed")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = dirs.Remove(context.Background(), "killed") })
	spec := sandbox.Spec{ID: "killed", Mounts: d.Mounts(), Limits: sandbox.Limits{MemoryBytes: 256 << 20}}
	if err := b.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Exec(ctx, "killed", sandbox.Command{Args: []string{"bash", "-c", "echo kept > f"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	bx := b.boxes.Get("killed")
	pid := bx.Cmd.Process.Pid
	errc := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "killed", sandbox.Command{Args: []string{"sleep", "60"}, Timeout: 90 * time.Second})
		errc <- err
	}()
	time.Sleep(time.Second)
	if err := exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("command in flight: %v, want unavailable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the command in flight did not return")
	}
	if st, err := b.Status(ctx, "killed"); err != nil || st.State == sandbox.StateRunning {
		t.Errorf("status after the kill: %+v %v", st, err)
	}
	if _, err := b.Exec(ctx, "killed", sandbox.Command{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("exec after the kill: %v, want unavailable", err)
	}
	if err := b.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	r, err := b.Exec(ctx, "killed", sandbox.Command{Args: []string{"cat", "f"}})
	if err != nil || strings.TrimSpace(string(r.Stdout)) != "kept" {
		t.Errorf("after the new boot: %q %v", r.Stdout, err)
	}
	if b.boxes.Get("killed").Cmd.Process.Pid == pid {
		t.Error("the same QEMU process")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("QEMU %d still there", pid)
	}
	// Only the shared initramfs stays in the state folder while VMs run.
	entries, _ := os.ReadDir(b.dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "base-") {
			t.Errorf("state file left: %s", e.Name())
		}
	}
}

// TestHostPathsInvisible: the guest sees its own folders and the shared
// root filesystem, nothing else of the host: not a file beside its
// folders, not the host's processes, mounts or kernel command line
// secrets, and its environment is not on QEMU's command line.
func TestHostPathsInvisible(t *testing.T) {
	b := newTestBackend(t, Config{})
	data := t.TempDir()
	dirs := hostdirs.New(data, hostdirs.Options{})
	ctx := context.Background()
	d, err := dirs.Prepare(ctx, "hostpaths")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = dirs.Remove(context.Background(), "hostpaths") })
	marker := "host-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := os.WriteFile(filepath.Join(data, marker), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(d.Workspace), marker), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "hostpaths", Mounts: d.Mounts(), Env: []string{"SECRET_TOKEN=" + marker}, Limits: sandbox.Limits{MemoryBytes: 256 << 20}}
	if err := b.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile("/proc/" + strconv.Itoa(b.boxes.Get("hostpaths").Cmd.Process.Pid) + "/cmdline")
	if bytes.Contains(args, []byte(marker)) {
		t.Error("the sandbox's environment is on QEMU's command line")
	}
	script := `for d in /home/agent/workspace/.. /mnt/user-data /mnt /home/agent /; do ls -a "$d" | grep -c ` + marker + ` ; done
grep -c ` + marker + ` /proc/cmdline; test -e ` + data + ` && echo data-visible
ps -e -o comm= | grep -c -i qemu
echo "$SECRET_TOKEN" | grep -c ` + marker
	r, err := b.Exec(ctx, "hostpaths", sandbox.Command{Args: []string{"bash", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(r.Stdout)); strings.Join(got, " ") != "0 0 0 0 0 0 0 1" {
		t.Errorf("probe: %q (stderr %q), want the marker only in the environment", r.Stdout, r.Stderr)
	}
}

// TestListenInGuest: a loopback address inside the VM hands its
// connections to the host over the agent channel, as the API bridge and
// the egress proxy of every backend use it, and the sandbox has no other
// way out. The egress proxy's trust folder is shared read-only, with the
// variables that point the tools at its bundle.
func TestListenInGuest(t *testing.T) {
	trust := t.TempDir()
	if err := os.WriteFile(filepath.Join(trust, "ca-bundle.pem"), []byte("the install's bundle\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newTestBackend(t, Config{Settings: boxes.Settings{TrustDir: trust}})
	ctx := context.Background()
	if err := b.Ensure(ctx, sandbox.Spec{ID: "listen", Limits: sandbox.Limits{MemoryBytes: 256 << 20}}); err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen(ctx, "listen", "127.0.0.1:4040")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err == nil {
			_, _ = c.Write(append([]byte("host saw "), buf...))
		}
	}()
	r, err := b.Exec(ctx, "listen", sandbox.Command{Args: []string{"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/4040; printf ping >&3; head -c 13 <&3"}, Timeout: time.Minute})
	if err != nil || string(r.Stdout) != "host saw ping" {
		t.Errorf("through the listener: %q %q %v", r.Stdout, r.Stderr, err)
	}
	r, err = b.Exec(ctx, "listen", sandbox.Command{Args: []string{"bash", "-c", `cat "$SSL_CERT_FILE"; touch /opt/threadbox/trust/x 2>/dev/null || echo read-only`}, Timeout: time.Minute})
	if err != nil || string(r.Stdout) != "the install's bundle\nread-only\n" {
		t.Errorf("the trust folder: %q %q %v", r.Stdout, r.Stderr, err)
	}
}

// TestGuestCPU: emulated, the guest's CPU is the x86-64 baseline with the
// kernel's hardening features: no AVX, whose emulation is slow, but SMEP,
// SMAP and UMIP, which keep the guest kernel out of its programs' memory.
func TestGuestCPU(t *testing.T) {
	if testAccel() != AccelTCG {
		t.Skip("under KVM the guest sees the host's CPU")
	}
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	if err := b.Ensure(ctx, sandbox.Spec{ID: "cpu", Limits: sandbox.Limits{MemoryBytes: 256 << 20}}); err != nil {
		t.Fatal(err)
	}
	r, err := b.Exec(ctx, "cpu", sandbox.Command{Args: []string{"bash", "-c", `grep -m1 '^flags' /proc/cpuinfo`}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	flags := strings.Fields(strings.TrimPrefix(strings.TrimSpace(string(r.Stdout)), "flags"))
	for _, f := range []string{"smep", "smap", "umip", "rdrand", "fsgsbase"} {
		if !slices.Contains(flags, f) {
			t.Errorf("the guest's CPU lacks %s: %q", f, r.Stdout)
		}
	}
	for _, f := range flags {
		if strings.HasPrefix(f, "avx") {
			t.Errorf("the guest's CPU offers %s: %q", f, r.Stdout)
		}
	}
}

// TestParseCPUInfo reads the TSC's rate and invariance from the first
// CPU of a /proc/cpuinfo.
func TestParseCPUInfo(t *testing.T) {
	for _, c := range []struct {
		name      string
		in        string
		khz       int64
		invariant bool
	}{
		{"reliable", "processor\t: 0\ncpu MHz\t\t: 2096.027\nflags\t\t: fpu tsc constant_tsc tsc_reliable nonstop_tsc\n", 2096027, true},
		{"constant and nonstop", "cpu MHz : 3000.000\nflags : fpu tsc constant_tsc nonstop_tsc\n", 3000000, true},
		{"constant only", "cpu MHz : 3000.000\nflags : fpu tsc constant_tsc\n", 3000000, false},
		{"first CPU only", "cpu MHz : 1000.5\nflags : tsc\n\ncpu MHz : 2000\nflags : tsc_reliable\n", 1000500, false},
		{"no rate", "flags : tsc_reliable\n", 0, true},
		{"garbage", "cpu MHz : fast\nflags\n", 0, false},
		{"empty", "", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			khz, invariant := parseCPUInfo(strings.NewReader(c.in))
			if khz != c.khz || invariant != c.invariant {
				t.Errorf("got %d kHz, invariant %v; want %d, %v", khz, invariant, c.khz, c.invariant)
			}
		})
	}
}

// TestWalkManyFiles: a guest walks its root filesystem, more files (some
// 57,000) than its virtiofsd may hold descriptors, and sees every one
// without an error: the root filesystem's share keeps the guest's inodes
// cached, and virtiofsd refers to them by file handle, not by a
// descriptor each. The virtiofsd processes' limit on open files is
// lowered to 8,192 once the VM is up, below the entries, so the test
// tells on any host (virtiofsd raises its own limit to a million where
// it may; here it may not pass the host's hard limit, 20,000).
func TestWalkManyFiles(t *testing.T) {
	b := newTestBackend(t, Config{})
	// The entries the sandbox's user can list: a folder closed to others
	// (/root) counts, what it holds does not.
	files := 0
	if err := filepath.WalkDir(b.cfg.RootFS+"/", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		if info, err := d.Info(); err == nil && d.IsDir() && info.Mode().Perm()&0o005 != 0o005 {
			return filepath.SkipDir
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const limit = 8192
	if files <= limit {
		t.Fatalf("the root filesystem holds %d entries, not more than virtiofsd's lowered limit %d: the walk would tell nothing", files, limit)
	}
	ctx := context.Background()
	if err := b.Ensure(ctx, sandbox.Spec{ID: "walk", Limits: sandbox.Limits{MemoryBytes: 512 << 20}}); err != nil {
		t.Fatal(err)
	}
	b.fsdMu.Lock()
	pids := slices.Collect(maps.Keys(b.fsdRunning))
	b.fsdMu.Unlock()
	if len(pids) == 0 {
		t.Fatal("the VM runs no virtiofsd")
	}
	for _, pid := range pids {
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
			t.Fatalf("lower virtiofsd %d's limit on open files: %v", pid, err)
		}
	}
	r, err := b.Exec(ctx, "walk", sandbox.Command{Args: []string{"bash", "-c", "find / -xdev 2>&1 >/dev/null | grep -v 'Permission denied$' >&2; find / -xdev 2>/dev/null | wc -l"}, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
	// The guest mounts over a few of them (/dev's nodes, the agent's and
	// the trust folder's mount points).
	if got < files-64 || got > files || len(r.Stderr) > 0 {
		t.Errorf("the guest found %d of the root filesystem's %d entries; stderr %.300q", got, files, r.Stderr)
	}
}
