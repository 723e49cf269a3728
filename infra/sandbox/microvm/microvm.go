// Package microvm runs each sandbox in a virtual machine of its own, with
// its own guest kernel: QEMU's minimal `microvm` machine (virtio over MMIO,
// no PCI, no firmware), one QEMU process per sandbox driven over QMP. The
// sandbox image's root filesystem folder (the local and gvisor backends')
// is shared read-only into a container's VM over virtiofs or 9p, and a
// warm VM mounts a read-only erofs image of it (rootimage.go); the container's folders are
// 9p shares of their own (uploads and skills read-only), so the guest
// reaches no other host path. The VM has no network device. Its init (a
// static busybox in an initramfs this package writes, init.sh) becomes
// the threadbox agent, which mounts them (guestinit) and speaks the agent
// protocol over a virtio-serial port whose host end is a socket of this
// process.
//
// The guest kernel, busybox and kernel modules come from Debian packages
// (sandbox/microvm-guest.sh, `make microvm-guest`). The accelerator is KVM
// where it can run the guest kernel; otherwise the backend is unavailable
// with the reason, unless the operator asks for emulation
// (MICROVM_ACCEL=tcg). VMs end with this process, as gVisor sandboxes do.
package microvm

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/microvm/guestinit"
)

// The VMMs a Backend can be configured with. Only QEMU is driven by this
// build; the others are named so that a configuration asking for them is
// answered with what is missing.
const (
	VMMQEMU            = "qemu"
	VMMFirecracker     = "firecracker"
	VMMCloudHypervisor = "cloud-hypervisor"
)

// Defaults applied to zero fields of Config.
const (
	DefaultName        = "microvm"
	DefaultQEMU        = "qemu-system-x86_64"
	DefaultStateDir    = "/run/threadbox-microvm"
	DefaultBootTimeout = 90 * time.Second
	// MinMemoryBytes is the least RAM a VM gets: the guest kernel and the
	// agent need about 60 MiB of it.
	MinMemoryBytes = int64(128 << 20)
)

// agentPort names the virtio-serial port the agent speaks on.
const agentPort = "threadbox.agent"

// Config configures a Backend.
type Config struct {
	// Settings are what every backend takes: instance, limits, boot
	// timeout and logger.
	boxes.Settings

	// Name is the backend's configuration name; default DefaultName.
	Name string
	// VMM is VMMQEMU (the default), VMMFirecracker or VMMCloudHypervisor.
	VMM string
	// QEMU is the QEMU binary; default the one the guest artefacts carry
	// (GuestQEMU), else DefaultQEMU looked up in PATH.
	QEMU string
	// Virtiofsd is the virtiofs daemon that serves the shares of VMs whose
	// running state can be checkpointed (virtiofs.go); default the one
	// the guest artefacts carry (GuestVirtiofsd). Without one, every VM's
	// shares are 9p and checkpoints keep files only.
	Virtiofsd string
	// Accel is the accelerator setting (MICROVM_ACCEL): "" uses KVM where
	// it can run the guest kernel, AccelKVM insists on it, AccelTCG asks
	// for emulation.
	Accel string
	// Guest is the folder of the guest artefacts (FindGuest). Required.
	Guest string
	// Kernel, when set, is the operator's guest kernel (for instance one
	// built for PVM), used instead of the artefacts' one.
	Kernel string
	// RootFS is the host folder holding the sandbox image's root
	// filesystem, as the local backend's (local.FindRootFS), resolved
	// once. Required.
	RootFS string
	// AgentBin is the host path of the static threadbox-agent binary. Required.
	AgentBin string
	// StateDir holds each VM's initramfs while QEMU reads it, under a
	// folder per Instance; default DefaultStateDir.
	StateDir string
	// Dirs, when set, prepares each container's host folders before boot;
	// a Spec without Mounts then gets Dirs' mounts.
	Dirs *hostdirs.Layout
	// DiskQuota tells that Dirs enforces a per-container disk quota.
	DiskQuota bool
	// RootImage is the erofs image of RootFS that warm VMs mount
	// (rootimage.go), made when missing; default RootFS's path with
	// ".erofs" added; "off" shares the root over 9p with them too
	// (MICROVM_ROOT_IMAGE).
	RootImage string
	// NoTemplate boots every warm VM instead of restoring it from a
	// template snapshot (template.go), so that no two VMs share a page of
	// host memory, at the cost of a boot's time and a whole VM's memory
	// each (MICROVM_TEMPLATE=off).
	NoTemplate bool
}

// Backend runs sandboxes in microVMs. It implements sandbox.Backend.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	rootfs string // cfg.RootFS resolved
	dir    string // this instance's state folder

	boxes           *boxes.Set[*box]
	boxes.Ops[*box] // Exec, Start, Listen, Stop, Status, SandboxCPU

	boxes.Saves[*box] // Checkpoint, CheckpointRunning (checkpoint.go)

	// Checkpoints (checkpoint.go): the agent binary's digest they record,
	// the agent clients of checkpointed VMs, and the VMM's version.
	digest      boxes.AgentDigest
	held        boxes.HeldClients
	versionOnce sync.Once
	version     string

	// pool keeps warm VMs (pool.go); slots is this process's folder of
	// their slots, and slotsClean removes those of processes that ended.
	pool       *boxes.Pool[*box]
	slots      string
	slotsClean sync.Once

	// tmpl is the template warm VMs are restored from (template.go), and
	// tmplFailed the configurations whose template could not be made.
	tmplMu     sync.Mutex
	tmpl       *template
	tmplFailed map[string]error

	availMu sync.Mutex
	availAt time.Time // last successful check
	accel   string    // the accelerator of the last successful check

	// rootImg is the root filesystem's image warm VMs mount, or
	// rootImgErr why they have none (rootimage.go).
	rootImgMu  sync.Mutex
	rootImg    string
	rootImgErr error

	baseMu  sync.Mutex
	baseKey string // the agent's and guest's identity the base initramfs was written for
	base    string // the base initramfs file

	wg sync.WaitGroup // the QEMU and virtiofsd processes' waiters

	// fsdRunning are the virtiofsd processes this backend started that
	// have not been waited for, by pid: none may be left after Close.
	fsdMu      sync.Mutex
	fsdRunning map[int]bool

	vmsMu sync.Mutex
	vms   map[*box]bool // VMs whose QEMU has not exited
}

// box is one running VM.
type box struct {
	boxes.Proc // the host process is QEMU
	b          *Backend
	id, name   string
	qmp        *qmp
	console    *boxes.LogTail
	// restored tells a warm VM restored from the template (template.go).
	restored bool
	// fs is the file system of its shares (guestinit.FS9p or FSVirtiofs),
	// fsd the virtiofsd processes serving them.
	fs  string
	fsd fsDaemons
	// ram is the memory file of a VM with virtiofs shares (vmram.go).
	ram *vmRAM
	// What a checkpoint of it records and its restore needs again: its
	// shares (the trust folder's among them), its limits and the guest.
	shares []share
	limits sandbox.Limits
	guest  Guest
}

// New returns a microvm backend. Missing prerequisites are not an error
// here: Available reports them, so that the backend stays listed,
// unavailable with the reason, where SANDBOX_BACKEND names it.
func New(cfg Config) (*Backend, error) {
	cfg.Name = cmp.Or(cfg.Name, DefaultName)
	switch cfg.VMM {
	case "":
		cfg.VMM = VMMQEMU
	case VMMQEMU, VMMFirecracker, VMMCloudHypervisor:
	default:
		return nil, fmt.Errorf("%s: unknown VMM %q (qemu, firecracker, cloud-hypervisor)", cfg.Name, cfg.VMM)
	}
	cfg.QEMU = cmp.Or(cfg.QEMU, GuestQEMU(cfg.Guest), DefaultQEMU)
	cfg.Virtiofsd = cmp.Or(cfg.Virtiofsd, GuestVirtiofsd(cfg.Guest))
	cfg.StateDir = cmp.Or(cfg.StateDir, DefaultStateDir)
	cfg.Defaults(DefaultBootTimeout)
	lg := cfg.Logger
	rootfs := boxes.ResolveRootFS(cfg.RootFS)
	set := boxes.New[*box](cfg.Name, lg)
	dir := filepath.Join(cfg.StateDir, hostdirs.SafeID(cfg.Instance))
	slots := filepath.Join(dir+"-slots", strconv.Itoa(os.Getpid()))
	b := &Backend{cfg: cfg, log: lg, rootfs: rootfs, dir: dir,
		boxes: set, Ops: boxes.NewOps(set, nil), vms: map[*box]bool{},
		pool: boxes.NewPoolWith(set, slots, shareLayout{}), slots: slots, tmplFailed: map[string]error{}}
	b.Saves = boxes.NewSaves(set, b.Checkpoints, b.save)
	return b, nil
}

// Name returns the backend's configuration name.
func (b *Backend) Name() string { return b.cfg.Name }

// Isolation returns the isolation of a microVM, with the accelerator it
// runs on when known.
func (b *Backend) Isolation() string {
	b.availMu.Lock()
	accel := b.accel
	b.availMu.Unlock()
	switch accel {
	case AccelKVM:
		return "hardware virtualisation, own kernel (KVM)"
	case AccelTCG:
		return "hardware virtualisation, own kernel (emulated: QEMU TCG)"
	}
	return "hardware virtualisation, own kernel"
}

// EnforcedLimits names the limits every VM gets: memory (its RAM), CPU
// (its vCPUs), pids (the sandbox user's process limit in the guest),
// nofile, /tmp's size, and disk where Dirs carries a quota.
func (b *Backend) EnforcedLimits(context.Context) ([]string, string) {
	out := []string{"memory", "cpu", "pids", "nofile", "tmp"}
	if b.cfg.DiskQuota {
		out = append(out, "disk")
	}
	b.availMu.Lock()
	accel := b.accel
	b.availMu.Unlock()
	mech := "VM size (RAM, vCPUs) and guest rlimits"
	if accel != "" {
		mech += "; accelerator " + accel
	}
	return out, mech
}

// Available checks the VMM, the accelerator, the guest artefacts, the root
// filesystem and the agent binary. A success is remembered for a few
// seconds; the first boot proves the rest.
func (b *Backend) Available(context.Context) error {
	b.availMu.Lock()
	defer b.availMu.Unlock()
	if !b.availAt.IsZero() && time.Since(b.availAt) < 10*time.Second {
		return nil
	}
	if b.cfg.VMM != VMMQEMU {
		bin := b.cfg.VMM
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s: the %s VMM: binary %s not found (%w); SANDBOX_BACKEND=microvm runs the same guests on QEMU's microvm machine", b.cfg.Name, b.cfg.VMM, bin, err)
		}
		return fmt.Errorf("%s: the %s VMM is found but not driven by this build: only QEMU's microvm machine is (SANDBOX_BACKEND=microvm)", b.cfg.Name, b.cfg.VMM)
	}
	if _, err := exec.LookPath(b.cfg.QEMU); err != nil {
		return fmt.Errorf("%s: QEMU (`make microvm-guest` unpacks it beside the guest kernel; or set MICROVM_QEMU): %w", b.cfg.Name, err)
	}
	accel, err := chooseAccel(b.cfg.Accel, b.cfg.Kernel != "", defaultAccelHost)
	if err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Name, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s: QEMU must run as root to give the sandbox user's files their owner on the host; threadbox runs as another user", b.cfg.Name)
	}
	if _, err := LoadGuest(b.cfg.Guest, b.cfg.Kernel); err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Name, err)
	}
	if err := boxes.CheckRootFS(b.rootfs); err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Name, err)
	}
	if err := boxes.CheckAgentBin(b.cfg.AgentBin); err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Name, err)
	}
	b.accel = accel
	b.availAt = time.Now()
	return nil
}

// limits fills the zero fields of l from the backend's defaults.
func (b *Backend) limits(l sandbox.Limits) sandbox.Limits { return l.Or(b.cfg.Limits) }

// Ensure boots the VM for spec.ID unless it is running. A VM that died is
// replaced by a fresh one over the same host folders.
func (b *Backend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if err := b.boxes.Ensure(ctx, spec, b.cfg.Dirs, func(ctx context.Context, spec sandbox.Spec) (*box, error) {
		return b.boot(ctx, spec, bootCold, nil, "")
	}); err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Name, err)
	}
	return nil
}

// baseInitramfs returns the initramfs part every VM shares, written again
// when the agent binary or the guest artefacts changed.
func (b *Backend) baseInitramfs(g Guest) (string, error) {
	b.baseMu.Lock()
	defer b.baseMu.Unlock()
	fi, err := os.Stat(b.cfg.AgentBin)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	key := fmt.Sprintf("%s %d %d %s", b.cfg.AgentBin, fi.Size(), fi.ModTime().UnixNano(), g.Dir)
	if key == b.baseKey && b.base != "" {
		if _, err := os.Stat(b.base); err == nil {
			return b.base, nil
		}
	}
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(b.dir, "base-*.cpio")
	if err != nil {
		return "", err
	}
	if err := writeBaseInitramfs(f, g, b.cfg.AgentBin); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	if b.base != "" {
		_ = os.Remove(b.base)
	}
	b.base, b.baseKey = f.Name(), key
	return b.base, nil
}

// share is how the guest reaches one of a VM's folders: QEMU serves the
// host folder Export as a 9p share, and the guest mounts the share, or its
// subfolder Sub when set (a warm VM's, pool.go), at the folder's target.
type share struct {
	sandbox.Mount
	Export, Sub string
}

// shares returns the shares of spec's folders: each folder's source
// itself, or for a warm VM (whose sources are its slot's places) the
// place's parent with the place as its subfolder.
func shares(spec sandbox.Spec, warm bool) []share {
	out := make([]share, len(spec.Mounts))
	for i, m := range spec.Mounts {
		out[i] = share{Mount: m, Export: m.Source}
		if warm {
			out[i].Export, out[i].Sub = filepath.Dir(m.Source), filepath.Base(m.Source)
		}
	}
	return out
}

// vmConfig is the shell text the guest's init sources: the /tmp size, the
// process limit, the file system of the shares (fs), the root
// filesystem's source (guestinit.RootShared or RootImage), the folders to mount
// (tag, target, ro or rw, and the share's subfolder or "." for its root),
// whether the init holds to be saved as a template (TB_HOLD) and the
// agent's environment as the positional parameters.
func vmConfig(spec sandbox.Spec, sh []share, l sandbox.Limits, fs, root string, hold bool) ([]byte, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "TB_TMP=%d\nTB_PIDS=%d\nTB_FS=%s\nTB_ROOT=%s\n", l.TmpBytes, l.Pids, fs, root)
	if hold {
		sb.WriteString("TB_HOLD=1\n")
	}
	var mounts []string
	for i, m := range sh {
		gs := guestinit.Share{Tag: "m" + strconv.Itoa(i), Target: m.Target, ReadOnly: m.ReadOnly, Sub: m.Sub}
		if err := gs.Check(); err != nil {
			return nil, err
		}
		mounts = append(mounts, gs.String())
	}
	fmt.Fprintf(&sb, "TB_MOUNTS=%s\nset --", shellQuote(strings.Join(mounts, " ")))
	for _, kv := range sandboxEnv(spec, l) {
		sb.WriteString(" " + shellQuote(kv))
	}
	sb.WriteString("\n")
	return []byte(sb.String()), nil
}

// sandboxPath is PATH inside the sandbox.
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sandboxEnv is the environment of the agent and so of every command.
func sandboxEnv(spec sandbox.Spec, l sandbox.Limits) []string {
	env := []string{
		"PATH=" + sandboxPath,
		"HOME=/home/agent", "USER=agent", "LOGNAME=agent", "SHELL=/bin/bash", "LANG=C.UTF-8",
		// The guest's own count of memory kills: the VM is the sandbox.
		"THREADBOX_AGENT_OOM_EVENTS=/proc/vmstat",
		fmt.Sprintf("THREADBOX_AGENT_RUN_AS=%d:%d", hostdirs.SandboxUID, hostdirs.SandboxGID),
		fmt.Sprintf("THREADBOX_AGENT_NOFILE=%d", l.NoFile),
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" && !strings.HasPrefix(k, "THREADBOX_AGENT_") {
			env = append(env, kv)
		}
	}
	return env
}

// vcpus is the VM's vCPU count for a CPU limit: rounded up, at least one,
// at most the host's.
func vcpus(cpus float64) int {
	n := int(math.Ceil(cpus))
	return max(1, min(n, runtime.NumCPU()))
}

// memory is where a VM's RAM lives: QEMU's own memory; the file path (a
// template's, or its copy's), shared with the file (a template writes its
// RAM there) or a private copy on write of it (a copy); or the memory file
// of this process QEMU inherits as descriptor fd, shared (virtiofsd maps
// it too). incoming makes QEMU wait for the VM's state to restore.
type memory struct {
	path            string
	share, incoming bool
	// fd, when set, is the descriptor of the VM's memory file that QEMU
	// inherits (a memfd of this process, vmram.go), in place of path.
	fd int
}

// qemuArgs builds QEMU's command line for one VM. The agent's port and
// QMP are sockets QEMU inherits as descriptors 3 and 4; the console is
// QEMU's standard output. fs is the shares' file system: over virtiofs,
// QEMU inherits the connections to their virtiofsd processes as the
// descriptors after the memory file's (ram.fd), the root filesystem's
// first. With image set (over 9p), the root filesystem is that erofs
// image, the VM's read-only block device.
func (b *Backend) qemuArgs(name, accel string, g Guest, initrd string, sh []share, l sandbox.Limits, ram memory, fs, image string) []string {
	mem := max(l.MemoryBytes, MinMemoryBytes) >> 20
	// The RTC stays: without it the guest kernel spends seconds waiting
	// for one, and has no wall clock.
	machine := "microvm,x-option-roms=off,pit=off,pic=off,rtc=on,isa-serial=on"
	cmdline := "console=ttyS0 quiet loglevel=3 panic=-1 reboot=t rdinit=/init 8250.nr_uarts=1 i8042.noaux i8042.nomux i8042.nopnp cryptomgr.notests random.trust_cpu=on"
	cpu, accelOpt := cpuModel(accel), accel
	if accel == AccelTCG {
		// The translation cache would grow to 1 GiB per VM by default.
		accelOpt += ",tb-size=128"
		// Without a PIT the guest cannot calibrate the TSC, which QEMU's
		// software CPU reads from the host: it is told the rate.
		khz, invariant := hostTSC()
		if khz > 0 {
			cmdline += fmt.Sprintf(" tsc_early_khz=%d lpj=%d no_timer_check", khz, khz*1000/250)
		}
		// An invariant host TSC is one in the guest too. Unless told so,
		// the guest checks it against the only other clock it has, the
		// timer tick, which an emulated CPU starved by a busy host misses:
		// it then calls the TSC unstable and keeps time by the tick, and
		// its clock falls behind the host's by a second every few. A
		// template saved so passes that on to every copy.
		if invariant {
			cmdline += " tsc=reliable"
		}
		// The software CPU does not speculate, so the guest's mitigations
		// of speculative execution (page-table isolation's flush at every
		// system call above all) buy nothing and cost much.
		cmdline += " mitigations=off"
	}
	args := []string{
		"-name", name,
		"-machine", machine, "-accel", accelOpt, "-cpu", cpu,
		"-m", strconv.FormatInt(mem, 10), "-smp", strconv.Itoa(vcpus(l.CPUs)),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", g.Kernel, "-initrd", initrd, "-append", cmdline,
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-chardev", "socket,id=agent,fd=3",
		"-device", "virtio-serial-device,max_ports=2",
		"-device", "virtserialport,chardev=agent,name=" + agentPort,
		"-chardev", "socket,id=qmp,fd=4", "-mon", "chardev=qmp,mode=control",
	}
	switch {
	case ram.fd != 0:
		args[slices.Index(args, "-machine")+1] += ",memory-backend=mem"
		args = append(args, "-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=/dev/fd/%d,share=on", mem, ram.fd))
	case ram.path != "":
		args[slices.Index(args, "-machine")+1] += ",memory-backend=mem"
		share := "off"
		if ram.share {
			share = "on"
		}
		args = append(args, "-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=%s", mem, ram.path, share))
	}
	if ram.incoming {
		args = append(args, "-incoming", "defer")
	}
	if fs == guestinit.FSVirtiofs {
		// vhost-user devices need virtio 1 (virtio-mmio's version 2).
		args = append(args, "-global", "virtio-mmio.force-legacy=false")
		for i, s := range b.fsShares(sh) {
			args = append(args, "-chardev", fmt.Sprintf("socket,id=fs%d,fd=%d", i, ram.fd+1+i),
				"-device", fmt.Sprintf("vhost-user-fs-device,chardev=fs%d,tag=%s", i, s.tag))
		}
		return args
	}
	if image != "" {
		args = append(args, "-drive", "file="+image+",if=none,id=root,format=raw,readonly=on",
			"-device", "virtio-blk-device,drive=root")
	} else {
		args = append(args, "-fsdev", "local,id=root,path="+b.rootfs+",security_model=passthrough,readonly=on,multidevs=remap",
			"-device", "virtio-9p-device,fsdev=root,mount_tag=root")
	}
	for i, m := range sh {
		fs := fmt.Sprintf("local,id=m%d,path=%s,security_model=passthrough,multidevs=remap", i, m.Export)
		if m.ReadOnly {
			fs += ",readonly=on"
		}
		args = append(args, "-fsdev", fs, "-device", fmt.Sprintf("virtio-9p-device,fsdev=m%d,mount_tag=m%d", i, i))
	}
	return args
}

// bootKind says what a boot makes.
type bootKind int

const (
	// bootCold is a container's VM, its folders exported as they are.
	bootCold bootKind = iota
	// bootWarm is a warm VM, its slot's share folders exported (pool.go).
	bootWarm
	// bootTemplate is a warm VM saved where its init holds (template.go);
	// the box returned is not running any more.
	bootTemplate
	// bootClone is a warm VM restored from the template.
	bootClone
	// bootRestore is a container's VM restored from its checkpoint
	// (checkpoint.go).
	bootRestore
)

// boot starts spec's VM as kind says: booted, saved as the template t,
// restored from t, or restored from the checkpoint in the folder image.
// A container's VM has its shares over virtiofs where the guest can, so
// that its running state can be checkpointed; warm VMs' are 9p.
func (b *Backend) boot(ctx context.Context, spec sandbox.Spec, kind bootKind, t *template, image string) (*box, error) {
	if err := b.Available(ctx); err != nil {
		return nil, err
	}
	b.availMu.Lock()
	accel := b.accel
	b.availMu.Unlock()
	g, err := LoadGuest(b.cfg.Guest, b.cfg.Kernel)
	if err != nil {
		return nil, err
	}
	fs := guestinit.FS9p
	if (kind == bootCold || kind == bootRestore) && b.virtiofsOK(g) {
		fs = guestinit.FSVirtiofs
	} else if kind == bootRestore {
		return nil, fmt.Errorf("%w: no virtiofsd, or a guest without virtiofs", sandbox.ErrCheckpointIncompatible)
	}
	warm := kind == bootWarm || kind == bootTemplate || kind == bootClone
	sh := shares(spec, warm)
	root, rootImg := guestinit.RootShared, ""
	if warm {
		root, rootImg = b.warmRoot(ctx)
	}
	if b.cfg.TrustDir != "" {
		sh = append(sh, share{Mount: sandbox.Mount{Source: b.cfg.TrustDir, Target: boxes.TrustPath, ReadOnly: true}, Export: b.cfg.TrustDir})
		spec.Env = append(slices.Clone(spec.Env), boxes.TrustEnv()...)
	}
	for _, m := range sh {
		if strings.ContainsAny(m.Export, ",") {
			return nil, fmt.Errorf("host folder %q: QEMU's options cannot hold a comma", m.Export)
		}
	}
	if strings.Contains(b.rootfs, ",") {
		return nil, fmt.Errorf("root filesystem %q: QEMU's options cannot hold a comma", b.rootfs)
	}
	l := b.limits(spec.Limits)
	name := hostdirs.SafeID(spec.ID) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var initrd string
	var mem memory
	switch kind {
	case bootClone:
		// The copy's initramfs is the template's: a restored VM carries
		// what its template read, and QEMU wants the same files.
		initrd, mem = t.initrd(), memory{path: t.ram(), incoming: true}
	case bootRestore:
		// The guest's memory comes from the checkpoint; QEMU reads an
		// initramfs at its start all the same, and the shared part,
		// without any VM's config, serves.
		if initrd, err = b.baseInitramfs(g); err != nil {
			return nil, err
		}
		mem = memory{incoming: true}
	default:
		config, err := vmConfig(spec, sh, l, fs, root, kind == bootTemplate)
		if err != nil {
			return nil, err
		}
		base, err := b.baseInitramfs(g)
		if err != nil {
			return nil, err
		}
		if kind == bootTemplate {
			initrd, mem = t.initrd(), memory{path: t.ram(), share: true}
		} else {
			initrd = filepath.Join(b.dir, name+".initrd")
			// QEMU has read the initramfs once it answers QMP: the file
			// (with the environment) goes then, or with the boot's failure.
			defer os.Remove(initrd)
		}
		if err := writeInitrd(initrd, base, config); err != nil {
			return nil, err
		}
	}
	bx := &box{b: b, id: spec.ID, name: name, Proc: boxes.NewProc(), console: boxes.NewLogTail(b.log, "vm console", spec.ID),
		fs: fs, shares: sh, limits: l, guest: g}
	var extra []*os.File
	var filled <-chan error // a restore's RAM copy (vmram.go)
	if fs == guestinit.FSVirtiofs {
		// Its RAM is a memory file of this process's, which virtiofsd maps
		// too and a checkpoint copies (vmram.go); a restore's is filled
		// from the checkpoint while QEMU starts.
		if bx.ram, err = newVMRAM(name); err != nil {
			return nil, err
		}
		if kind == bootRestore {
			filled = bx.ram.fill(filepath.Join(image, ramFile))
		}
		qemuRAM, err := bx.ram.forQEMU()
		if err != nil {
			bx.ram.Close()
			return nil, err
		}
		mem.fd = 5
		extra = append(extra, qemuRAM)
		vhost, err := b.startVirtiofsd(&bx.fsd, b.fsShares(sh), bx.console)
		if err != nil {
			qemuRAM.Close()
			bx.ram.Close()
			return nil, err
		}
		extra = append(extra, vhost...)
	}
	agentConn, qmpConn, err := b.spawn(bx, b.qemuArgs("threadbox-"+name, accel, g, initrd, sh, l, mem, fs, rootImg), extra)
	if err != nil {
		bx.fsd.kill()
		bx.ram.Close()
		return nil, err
	}
	fail := func(err error) (*box, error) {
		bx.Kill()
		<-bx.Done()
		return nil, fmt.Errorf("%w: %s", err, bx.console.Tail())
	}
	bctx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
	defer cancel()
	if bx.qmp, err = newQMP(bctx, qmpConn); err != nil {
		qmpConn.Close()
		return fail(err)
	}
	switch kind {
	case bootTemplate:
		defer agentConn.Close()
		if err := waitLine(bctx, agentConn, bx.Done(), guestinit.HeldLine); err != nil {
			return fail(err)
		}
		if err := bx.qmp.save(bctx, t.state(), true); err != nil {
			return fail(err)
		}
		bx.Kill()
		<-bx.Done()
		b.log.Info("warm VM template saved", "vm", name, "accel", accel)
		return bx, nil
	case bootClone:
		if err := bx.qmp.restore(bctx, t.state(), true); err != nil {
			agentConn.Close()
			return fail(err)
		}
		seed := make([]byte, guestinit.SeedBytes)
		_, _ = rand.Read(seed)
		// The copy runs from now on: the guest adds to this the time it
		// takes to read it.
		if _, err := io.WriteString(agentConn, guestinit.Go(time.Now().UnixNano(), seed)); err != nil {
			agentConn.Close()
			return fail(fmt.Errorf("restore: agent port: %w", err))
		}
	case bootRestore:
		started := time.Now()
		if err := <-filled; err != nil {
			agentConn.Close()
			return fail(fmt.Errorf("%w: %w", sandbox.ErrCheckpointIncompatible, err))
		}
		if err := bx.qmp.restore(bctx, filepath.Join(image, stateFile), true); err != nil {
			agentConn.Close()
			return fail(fmt.Errorf("%w: %w", sandbox.ErrCheckpointIncompatible, err))
		}
		loaded := time.Now()
		if err := b.release(bctx, bx, agentConn); err != nil {
			return fail(err)
		}
		bx.Booted = time.Now()
		b.log.Info("sandbox restored from its checkpoint", "id", spec.ID, "vm", name, "accel", accel,
			"load", loaded.Sub(started).String(), "release", bx.Booted.Sub(loaded).String())
		return bx, nil
	}
	if err := waitLine(bctx, agentConn, bx.Done(), guestinit.ReadyLine); err != nil {
		agentConn.Close()
		return fail(err)
	}
	bx.Client = boxes.NewAgent(agentConn)
	if err := boxes.Handshake(ctx, b.cfg.BootTimeout, bx.Client, bx.Done()); err != nil {
		return fail(err)
	}
	bx.Booted = time.Now()
	bx.restored = kind == bootClone
	b.log.Info("sandbox booted", "id", spec.ID, "vm", name, "accel", accel, "from_template", kind == bootClone, "shares", fs, "root", root)
	return bx, nil
}

// waitLine reads the agent's port up to the init's line
// (guestinit.ReadyLine or HeldLine), a byte at a time so that nothing of
// the agent's protocol is read. It fails when ctx ends first (the boot's bound) or the VM ended
// (done).
func waitLine(ctx context.Context, conn net.Conn, done <-chan struct{}, line string) error {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	go func() {
		select {
		case <-done:
			_ = conn.SetReadDeadline(time.Unix(1, 0))
		case <-ctx.Done():
		}
	}()
	var got []byte
	one := make([]byte, 1)
	for !strings.HasSuffix(string(got), line) {
		if _, err := io.ReadFull(conn, one); err != nil {
			select {
			case <-done:
				return errors.New("the VM ended during boot")
			default:
			}
			if ctx.Err() != nil {
				return fmt.Errorf("boot: no word from the guest's init: %w", ctx.Err())
			}
			return fmt.Errorf("boot: agent port: %w", err)
		}
		got = append(got, one[0])
		if len(got) > 4096 {
			got = got[len(got)-len(line):]
		}
	}
	return conn.SetReadDeadline(time.Time{})
}

// writeInitrd writes one VM's initramfs at path: the shared part, then
// its config.
func writeInitrd(path, base string, config []byte) error {
	src, err := os.Open(base)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := writeConfigInitramfs(f, config); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// socketPair returns the two ends of a unix stream socket pair: this
// process's as a net.Conn, QEMU's as a file for it to inherit.
func socketPair() (net.Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "host")
	theirs := os.NewFile(uintptr(fds[1]), "qemu")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return c, theirs, nil
}

// spawn starts QEMU with args, returns this process's ends of the agent's
// port and of QMP, and has a goroutine wait for QEMU and close bx.Done.
// extra (the memory file, then the vhost-user connections) are inherited
// from descriptor 5 on, and closed here in any case.
func (b *Backend) spawn(bx *box, args []string, extra []*os.File) (agentConn, qmpConn net.Conn, err error) {
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	agentConn, agentQ, err := socketPair()
	if err != nil {
		return nil, nil, err
	}
	qmpConn, qmpQ, err := socketPair()
	if err != nil {
		agentConn.Close()
		agentQ.Close()
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		agentConn.Close()
		agentQ.Close()
		qmpConn.Close()
		qmpQ.Close()
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	// QEMU is known before it starts, so that Close finds it however soon
	// it ends.
	b.vmsMu.Lock()
	b.vms[bx] = true
	b.vmsMu.Unlock()
	cmd := exec.Command(b.cfg.QEMU, args...)
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = append([]*os.File{agentQ, qmpQ}, extra...)
	err = bx.Start(cmd, []*os.File{agentQ, qmpQ, outW}, outR, bx.console, &b.wg, func() {
		// Its virtiofsd processes end with QEMU's connections; those that
		// have not yet are ended. Its memory file goes.
		bx.fsd.kill()
		bx.ram.Close()
		if bx.qmp != nil {
			_ = bx.qmp.close()
		} else {
			qmpConn.Close()
		}
		b.vmsMu.Lock()
		delete(b.vms, bx)
		b.vmsMu.Unlock()
	})
	if err != nil {
		b.vmsMu.Lock()
		delete(b.vms, bx)
		b.vmsMu.Unlock()
		agentConn.Close()
		qmpConn.Close()
		outR.Close()
		return nil, nil, fmt.Errorf("start %s: %w", b.cfg.QEMU, err)
	}
	return agentConn, qmpConn, nil
}

// Kill ends the VM: its agent connection, then QEMU (SIGKILL to its
// process group). The guest writes its files through to the host as it
// goes (9p without a cache), so nothing is lost that a command finished.
func (bx *box) Kill() {
	if bx.Client != nil {
		bx.Client.Close()
	}
	bx.killVM()
}

// killVM ends QEMU and its virtiofsd processes, leaving the agent client
// as it is: a checkpoint keeps it, held, for a restore by this process.
func (bx *box) killVM() {
	if bx.Running() {
		bx.KillGroup()
	}
	bx.fsd.kill()
}

// OOMKills is not counted on the host: the guest's kernel kills for
// memory inside the VM, and the agent reads its count (/proc/vmstat).
func (bx *box) OOMKills() (int64, bool) { return 0, false }

// Why is unknown: a VM that ended says why on its console, which the log
// has.
func (bx *box) Why() string { return "" }

// CPUTime reads the CPU time QEMU has used (every vCPU and its own
// threads), as the host counts it.
func (bx *box) CPUTime(context.Context) (time.Duration, error) {
	if bx.Cmd == nil || bx.Cmd.Process == nil {
		return 0, boxes.ErrCPUNotCounted
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", bx.Cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", boxes.ErrCPUNotCounted, err)
	}
	// Fields after the command's name (which may hold spaces): state is
	// the first, utime the 12th, stime the 13th, in clock ticks.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, boxes.ErrCPUNotCounted
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * time.Second / 100, nil
}

// Remove stops the VM and forgets it. Host folders are the caller's.
func (b *Backend) Remove(ctx context.Context, id string) error {
	return b.boxes.Remove(ctx, id, b.Stop)
}

// Reconcile adopts nothing: a VM's agent speaks over sockets of the
// process that booted it, and QEMU dies with that process. It removes
// what a process that died left in the instance's state folder: the
// initramfs files of VMs it was booting, its warm VMs' template, and
// their slots with the container folders bound there.
func (b *Backend) Reconcile(context.Context, func(id string) sandbox.Verdict) (adopted, removed []string, err error) {
	b.baseMu.Lock()
	base := b.base
	b.baseMu.Unlock()
	b.tmplMu.Lock()
	current := ""
	if b.tmpl != nil {
		current = b.tmpl.dir
	}
	b.tmplMu.Unlock()
	entries, err := os.ReadDir(b.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s: reconcile: %w", b.cfg.Name, err)
	}
	for _, e := range entries {
		p := filepath.Join(b.dir, e.Name())
		fi, err := e.Info()
		// A file of a boot under way here, or a template being made, is
		// younger than a boot's bound.
		if p == base || p == current || err != nil || time.Since(fi.ModTime()) < b.cfg.BootTimeout {
			continue
		}
		if e.IsDir() && strings.HasPrefix(e.Name(), "template-") {
			// A template a process that ended left (its memory file
			// holds a VM's RAM on the state folder's tmpfs).
			_ = os.RemoveAll(p)
			continue
		}
		_ = os.Remove(p)
	}
	// The warm slots of processes that ended, with what they bound there.
	if err := b.removeSlots(false); err != nil {
		b.log.Warn("warm slots of an ended process not removed", "cause", err.Error())
	}
	return nil, nil, nil
}

// Close ends every VM of this backend, waits for their QEMU processes, and
// removes the instance's state folder.
func (b *Backend) Close() error {
	errs := []error{b.boxes.StopAll(b.Stop)}
	b.held.DropAll()
	b.vmsMu.Lock()
	for bx := range b.vms {
		bx.Kill()
	}
	b.vmsMu.Unlock()
	b.wg.Wait()
	// The slots of warm VMs that ended by themselves.
	for _, id := range b.pool.IDs() {
		b.pool.Drop(id)
	}
	if err := b.removeSlots(true); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(b.cfg.StateDir) // when no other instance is left
	return errors.Join(errs...)
}

var _ sandbox.Backend = (*Backend)(nil)

// Ping sends one ping over the agent channel of id's running VM and waits
// for its answer: the channel's round trip, without a process in the guest.
func (b *Backend) Ping(ctx context.Context, id string) error {
	bx, ok := b.boxes.Live(id)
	if !ok {
		return fmt.Errorf("%s: ping %s: %w", b.cfg.Name, id, sandbox.ErrNotFound)
	}
	return bx.Client.Ping(ctx)
}

// PID returns the host process id of the QEMU of id's running VM, or 0.
func (b *Backend) PID(id string) int {
	bx, ok := b.boxes.Live(id)
	if !ok || bx.Cmd == nil || bx.Cmd.Process == nil {
		return 0
	}
	return bx.Cmd.Process.Pid
}

// PIDs returns the host process ids of id's running VM: its QEMU's, then
// its virtiofsd processes'; none when it does not run.
func (b *Backend) PIDs(id string) []int {
	pid := b.PID(id)
	if pid == 0 {
		return nil
	}
	bx, _ := b.boxes.Live(id)
	out := []int{pid}
	bx.fsd.mu.Lock()
	for _, p := range bx.fsd.procs {
		out = append(out, p.Pid)
	}
	bx.fsd.mu.Unlock()
	return out
}

// Accel returns the accelerator of the last successful Available, or "".
func (b *Backend) Accel() string {
	b.availMu.Lock()
	defer b.availMu.Unlock()
	return b.accel
}
