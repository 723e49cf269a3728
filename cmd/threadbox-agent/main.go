// Command threadbox-agent is the init process of a threadbox sandbox. The host
// starts it as PID 1 of a container (or as the child of bubblewrap) and talks
// to it over its stdin and stdout with the framed protocol of
// threadbox/infra/sandbox/agent/protocol: it runs commands, streams their output,
// enforces timeouts and output caps, collects $OUTPUT_DIR files and reaps
// every orphaned process reparented to it. On the host's request it also
// listens on loopback addresses inside the sandbox and carries each accepted
// connection over the frame stream (stream.go). Stdout carries protocol frames
// only; the agent's own logs go to stderr.
//
// `threadbox-agent file '<request JSON>'` performs one file operation over
// the folders at their sandbox paths instead and exits (file.go, package
// threadbox/infra/sandbox/agent/fileop): the kubernetes backend runs it in
// the files sidecar of a pod.
//
// Settings (flag, or environment variable, then default):
//
//	-workspace   THREADBOX_AGENT_WORKSPACE   /home/agent/workspace
//	-outputs     THREADBOX_AGENT_OUTPUTS     /mnt/user-data/outputs
//	-tmp         THREADBOX_AGENT_TMP         /tmp/outputs (parent of each $OUTPUT_DIR)
//	-oom-events  THREADBOX_AGENT_OOM_EVENTS  /sys/fs/cgroup/memory.events
//	-grace       THREADBOX_AGENT_GRACE       2s (SIGTERM to SIGKILL on timeout)
//	-drain       THREADBOX_AGENT_DRAIN       1s (wait for output after exit)
//	-log-level   THREADBOX_AGENT_LOG_LEVEL   info
//	-dial        THREADBOX_AGENT_DIAL        "" (serve stdin/stdout)
//	-nofile      THREADBOX_AGENT_NOFILE      "" (keep the open-files limit)
//
// With -dial the agent connects to that unix socket (the host's, bind-mounted
// into the sandbox) and serves the protocol there instead of on its stdio,
// which spares every frame the hops through the container engine. When the
// connection ends (the host restarted) it kills the commands it was running,
// keeps its tagged sessions (interpreters, terminals) for the next host, and
// dials again, so a new host can adopt the sandbox and attach to them.
//
// THREADBOX_AGENT_* variables are not passed on to commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"threadbox/infra/sandbox/agent/fileop"
	"threadbox/infra/sandbox/microvm/guestinit"
)

// config holds the agent's settings. Every path is a path inside the
// sandbox; tests point them at temporary folders.
type config struct {
	workspace string        // default working directory
	outputs   string        // where $OUTPUT_DIR files are moved
	tmpRoot   string        // parent of the per-command $OUTPUT_DIR folders
	oomEvents string        // the memory cgroup's memory.events file
	grace     time.Duration // SIGTERM to SIGKILL delay on timeout
	drain     time.Duration // how long to wait for output pipes after exit
	logLevel  slog.Level
	dial      string // unix socket of the host to serve; "" serves stdio
	runAs     string // uid:gid commands run as when the agent runs as root; "" keeps the agent's
	nofile    uint64 // RLIMIT_NOFILE of the agent and so of every command; 0 keeps it

	// A microVM guest's init starts the agent to finish it (guestinit).
	vmInit bool
	vm     guestinit.Init

	// lean restores the runtime's Ps of an agent started with one
	// (lean.go) on its first work; nil for any other agent.
	lean *leanProcs
}

// envPrefix starts every environment variable that configures the agent;
// such variables are not passed on to commands.
const envPrefix = "THREADBOX_AGENT_"

// parseConfig reads flags, falling back to THREADBOX_AGENT_* variables and
// then to the sandbox defaults.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	def := func(key, fallback string) string {
		if v := getenv(envPrefix + key); v != "" {
			return v
		}
		return fallback
	}
	fs := flag.NewFlagSet("threadbox-agent", flag.ContinueOnError)
	var cfg config
	fs.StringVar(&cfg.workspace, "workspace", def("WORKSPACE", "/home/agent/workspace"), "default working directory (env THREADBOX_AGENT_WORKSPACE)")
	fs.StringVar(&cfg.outputs, "outputs", def("OUTPUTS", "/mnt/user-data/outputs"), "folder receiving $OUTPUT_DIR files (env THREADBOX_AGENT_OUTPUTS)")
	fs.StringVar(&cfg.tmpRoot, "tmp", def("TMP", "/tmp/outputs"), "parent of per-command $OUTPUT_DIR folders (env THREADBOX_AGENT_TMP)")
	fs.StringVar(&cfg.oomEvents, "oom-events", def("OOM_EVENTS", "/sys/fs/cgroup/memory.events"), "memory cgroup events file for OOM hints (env THREADBOX_AGENT_OOM_EVENTS)")
	grace := fs.String("grace", def("GRACE", "2s"), "delay between SIGTERM and SIGKILL on timeout (env THREADBOX_AGENT_GRACE)")
	drain := fs.String("drain", def("DRAIN", "1s"), "how long to wait for output after a command exits (env THREADBOX_AGENT_DRAIN)")
	level := fs.String("log-level", def("LOG_LEVEL", "info"), "log level: debug, info, warn, error (env THREADBOX_AGENT_LOG_LEVEL)")
	fs.StringVar(&cfg.dial, "dial", def("DIAL", ""), "unix socket to connect to and serve instead of stdio (env THREADBOX_AGENT_DIAL)")
	fs.StringVar(&cfg.runAs, "run-as", def("RUN_AS", ""), "uid:gid to run commands as when the agent runs as root (env THREADBOX_AGENT_RUN_AS)")
	fs.BoolVar(&cfg.vmInit, "vm-init", false, "finish a microVM guest's init before serving: mount the root filesystem and -vm-shares, move into the new root")
	vmShares := fs.String("vm-shares", "", "with -vm-init: the container's folders as tag:target:ro|rw:sub words")
	fs.BoolVar(&cfg.vm.Hold, "vm-hold", false, "with -vm-init: hold to be saved as a template of warm VMs, until the host's go")
	fs.StringVar(&cfg.vm.FS, "vm-fs", guestinit.FS9p, "with -vm-init: the file system of the shares (and of a shared root), 9p or virtiofs")
	fs.StringVar(&cfg.vm.Root, "vm-root", guestinit.RootShared, "with -vm-init: the root filesystem's source, shared (as the shares are) or image (an erofs image on the first block device)")
	nofile := fs.String("nofile", def("NOFILE", ""), "RLIMIT_NOFILE (soft and hard) of the agent and every command; empty keeps it (env THREADBOX_AGENT_NOFILE)")
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("agent: flags: %w", err)
	}
	var err error
	if *vmShares != "" {
		if !cfg.vmInit {
			return config{}, errors.New("agent: -vm-shares goes with -vm-init")
		}
		if cfg.vm.Shares, err = guestinit.ParseShares(*vmShares); err != nil {
			return config{}, fmt.Errorf("agent: -vm-shares: %w", err)
		}
	}
	if err := guestinit.CheckFS(cfg.vm.FS); err != nil {
		return config{}, fmt.Errorf("agent: -vm-fs: %w", err)
	}
	if err := guestinit.CheckRoot(cfg.vm.Root); err != nil {
		return config{}, fmt.Errorf("agent: -vm-root: %w", err)
	}
	if *nofile != "" {
		n, err := strconv.ParseUint(*nofile, 10, 64)
		if err != nil || n < 16 {
			return config{}, fmt.Errorf("agent: bad nofile %q (at least 16)", *nofile)
		}
		cfg.nofile = n
	}
	if cfg.grace, err = time.ParseDuration(*grace); err != nil || cfg.grace < 0 {
		return config{}, fmt.Errorf("agent: bad grace %q", *grace)
	}
	if cfg.drain, err = time.ParseDuration(*drain); err != nil || cfg.drain < 0 {
		return config{}, fmt.Errorf("agent: bad drain %q", *drain)
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return config{}, fmt.Errorf("agent: bad log level %q: %w", *level, err)
	}
	return cfg, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == fileop.Command {
		os.Exit(runFile(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == relayCommand {
		os.Exit(runRelay(os.Args[2:]))
	}
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if !cfg.vmInit {
		// A microVM guest's init is not lean: it may have no /proc yet.
		cfg.lean = startLean(os.Environ())
	}
	var a *agent
	if cfg.vmInit {
		// The guest's init: a failure ends it, and so the VM, whose
		// console the host reads for why.
		var code int
		a, code = startVM(func() (*agent, int) { return setUp(cfg, log) }, func(a *agent) error {
			vm := cfg.vm
			vm.Warm = a.warmRoot
			return guestinit.Run(os.Stdin, os.Stdout, vm)
		})
		if a == nil {
			os.Exit(code)
		}
	}
	in, out, err := takeStdio()
	if err != nil {
		log.Error("agent: take stdio", "err", err)
		os.Exit(1)
	}
	if a == nil {
		var code int
		if a, code = setUp(cfg, log); a == nil {
			os.Exit(code)
		}
	}
	os.Exit(a.serve(cfg, in, out, log))
}

// startVM sets the process up as the agent (setUp), then runs the guest's
// init (init), which mounts the root filesystem and, in a template,
// holds to be saved. The setup needs no root filesystem: done first, a
// template is saved with it done and no copy restored from it does it
// again (its signal handling starts a thread, slow in an emulated guest).
// A failed init is written on stderr and ends the agent with 1.
func startVM(setUp func() (*agent, int), init func(*agent) error) (*agent, int) {
	a, code := setUp()
	if a == nil {
		return nil, code
	}
	if err := init(a); err != nil {
		fmt.Fprintln(os.Stderr, "threadbox-init:", err)
		return nil, 1
	}
	return a, 0
}

// run serves the protocol until the host closes the connection or the
// agent is told to stop, then kills every command left.
func run(cfg config, in io.Reader, out io.Writer, log *slog.Logger) int {
	a, code := setUp(cfg, log)
	if a == nil {
		return code
	}
	return a.serve(cfg, in, out, log)
}

// agent is the process set up to serve: its reaper and its signals.
type agent struct {
	ctx  context.Context
	stop context.CancelFunc
	rp   *reaper
	term chan os.Signal
}

// setUp makes the process the agent: its commands' user and file limit,
// a child subreaper that is not dumpable, its reaper and its handling of
// signals. It needs no file system. On a failure it returns nil and the
// exit code.
func setUp(cfg config, log *slog.Logger) (*agent, int) {
	// Orphans of commands are reparented to the agent even when it is not
	// PID 1 (as under bubblewrap or in tests), so that it reaps them.
	if err := setCommandUser(cfg.runAs); err != nil {
		log.Error("agent: run-as", "err", err)
		return nil, 2
	}
	if err := setNoFile(cfg.nofile); err != nil {
		log.Error("agent: nofile", "err", err)
		return nil, 2
	}
	if err := setChildSubreaper(); err != nil {
		log.Warn("agent: cannot become a child subreaper", "err", err)
	}
	// Commands run as the agent's own user: keep them out of the agent.
	// A process that is not dumpable has its /proc/<pid> files (fd, mem,
	// environ, ...) owned by root and refuses ptrace to anyone without
	// CAP_SYS_PTRACE, so code cannot write into the agent's descriptors
	// (the channel to the host) or read its memory. Commands are dumpable
	// again: execve resets it.
	if err := setNotDumpable(); err != nil {
		log.Warn("agent: cannot make itself non-dumpable", "err", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	rp := newReaper(log)
	go rp.loop(ctx)

	// Handling SIGPIPE (rather than ignoring it, which commands would
	// inherit) keeps a closed stderr from killing the agent.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	if os.Getpid() == 1 {
		// As the sandbox's init, the agent takes no signal as an order:
		// code in the sandbox may send any. Every catchable signal is
		// handled (and dropped), so that none takes the Go runtime's default
		// action (SIGQUIT, SIGABRT, SIGUSR1, ...: exit); the kernel drops
		// SIGKILL and SIGSTOP sent to a namespace's init from inside it.
		// The host stops a sandbox by killing it from outside, or by
		// closing the agent's connection. Handled signals are reset for
		// commands by execve (ignored ones would be inherited).
		dropSignals(log)
	} else {
		signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	}
	return &agent{ctx: ctx, stop: stop, rp: rp, term: term}, 0
}

// serve serves the protocol on in and out until the host closes the
// connection or the agent is told to stop, then kills every command left.
func (a *agent) serve(cfg config, in io.Reader, out io.Writer, log *slog.Logger) int {
	defer a.stop()
	ctx, rp, term := a.ctx, a.rp, a.term
	if err := os.MkdirAll(cfg.workspace, 0o755); err != nil {
		log.Warn("agent: workspace", "err", err)
	}
	env := environ(os.Environ())
	dctx, dstop := context.WithCancel(ctx)
	defer dstop()
	done := make(chan error, 1)
	var srv *server
	var d *dialer
	if cfg.dial == "" {
		srv = newServer(cfg, out, rp, env, log)
		go func() { done <- srv.serve(in) }()
	} else {
		d = &dialer{cfg: cfg, reaper: rp, env: env, log: log}
		go func() { done <- d.loop(dctx) }()
	}
	log.Debug("agent: serving", "pid", os.Getpid(), "dial", cfg.dial)
	code := 0
	select {
	case err := <-done:
		if err != nil {
			log.Error("agent: connection", "err", err)
			code = 1
		}
	case sig := <-term:
		log.Info("agent: stopping", "signal", sig)
	}
	if d != nil {
		dstop()
		srv = d.current()
	}
	if srv != nil {
		srv.killAll()
	}
	return code
}

// environ returns the environment passed on to commands: the agent's own
// without its configuration variables, with a PATH when none is set. In a
// lean agent (lean.go) GOMAXPROCS is the one the agent was started with.
func environ(env []string) []string {
	out := make([]string, 0, len(env)+1)
	hasPath := false
	orig, lean := lookupEnv(env, leanEnv)
	for _, kv := range env {
		if strings.HasPrefix(kv, envPrefix) || lean && strings.HasPrefix(kv, "GOMAXPROCS=") {
			continue
		}
		if strings.HasPrefix(kv, "PATH=") {
			hasPath = true
		}
		out = append(out, kv)
	}
	if lean && orig != leanNone {
		out = append(out, "GOMAXPROCS="+orig)
	}
	if !hasPath {
		out = append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	return out
}

// takeStdio moves the protocol's stdin and stdout to private descriptors and
// points fds 0 and 1 at /dev/null and stderr, so that a stray write to
// stdout can never corrupt the frame stream.
func takeStdio() (in, out *os.File, err error) {
	inFD, err := dupCloexec(0)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: dup stdin: %w", err)
	}
	outFD, err := dupCloexec(1)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: dup stdout: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: open null: %w", err)
	}
	defer null.Close()
	if err := syscall.Dup3(int(null.Fd()), 0, 0); err != nil {
		return nil, nil, fmt.Errorf("agent: redirect stdin: %w", err)
	}
	if err := syscall.Dup3(2, 1, 0); err != nil {
		return nil, nil, fmt.Errorf("agent: redirect stdout: %w", err)
	}
	return os.NewFile(uintptr(inFD), "protocol-in"), os.NewFile(uintptr(outFD), "protocol-out"), nil
}

func dupCloexec(fd int) (int, error) {
	n, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 3)
	if errno != 0 {
		return -1, errno
	}
	return int(n), nil
}

// setChildSubreaper marks the agent as the reaper of its descendants' orphans.
// commandUser is the user commands run as, set when the agent runs as root
// with a run-as user (gVisor: there the sandbox's root is not the host's,
// and only another uid keeps code out of the agent); nil runs them as the
// agent's own user.
var commandUser *syscall.Credential

// setNoFile lowers the agent's RLIMIT_NOFILE, soft and hard, to n (0 keeps
// it): commands inherit it and, without privileges, cannot raise it. This
// is how the kubernetes backend applies the sandbox's Limits.NoFile, which
// a pod spec has no field for. It is per process, as Docker's nofile ulimit is.
func setNoFile(n uint64) error {
	if n == 0 {
		return nil
	}
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	if n > cur.Max {
		n = cur.Max // a limit is only ever lowered
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("setrlimit %d: %w", n, err)
	}
	return nil
}

// setCommandUser sets commandUser from "uid:gid" when the agent runs as
// root. A root agent without one runs commands as itself (tests and
// development hosts; no backend starts it so).
func setCommandUser(runAs string) error {
	if os.Getuid() != 0 || runAs == "" {
		return nil
	}
	u, g, ok := strings.Cut(runAs, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil || uid == 0 {
		return fmt.Errorf("running as root needs a non-root run-as uid:gid, got %q", runAs)
	}
	commandUser = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return nil
}

// own gives a file or folder the agent created to the commands' user.
func own(path string) error {
	if commandUser == nil {
		return nil
	}
	return os.Lchown(path, int(commandUser.Uid), int(commandUser.Gid))
}

// setNotDumpable clears the process's dumpable flag (PR_SET_DUMPABLE 0).
func setNotDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// dropSignals handles every signal sent to the agent from now on, and
// drops it.
func dropSignals(log *slog.Logger) {
	c := make(chan os.Signal, 16)
	signal.Notify(c)
	go func() {
		for sig := range c {
			if sig != syscall.SIGCHLD && sig != syscall.SIGURG && sig != syscall.SIGPIPE {
				log.Debug("agent: signal dropped", "signal", sig)
			}
		}
	}()
}

func setChildSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}
