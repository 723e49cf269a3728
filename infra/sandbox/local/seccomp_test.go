package local

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/sandboxtest"
)

// TestSeccompAssembler: jumps resolve to their labels, and a jump the
// classic BPF encoding cannot hold, or to no label, is an error rather
// than a wrong filter.
func TestSeccompAssembler(t *testing.T) {
	var a bpfAsm
	a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 1, "two", "")
	a.stmt(unix.BPF_RET|unix.BPF_K, 0)
	a.label("two")
	a.stmt(unix.BPF_RET|unix.BPF_K, 1)
	prog, err := a.assemble()
	if err != nil || len(prog) != 3 || prog[0].Jt != 1 || prog[0].Jf != 0 {
		t.Fatalf("assembled %+v, %v", prog, err)
	}
	var far bpfAsm
	far.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 1, "end", "")
	for range 256 {
		far.stmt(unix.BPF_RET|unix.BPF_K, 0)
	}
	far.label("end")
	far.stmt(unix.BPF_RET|unix.BPF_K, 1)
	if _, err := far.assemble(); err == nil {
		t.Fatal("a jump of 256 instructions was assembled")
	}
	var missing bpfAsm
	missing.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 1, "nowhere", "")
	if _, err := missing.assemble(); err == nil {
		t.Fatal("a jump to no label was assembled")
	}
	if prog, err := seccompFilter(); err != nil || (seccompArch != 0 && len(prog) < len(deniedSyscalls)) {
		t.Fatalf("the jail's filter: %d instructions, %v", len(prog), err)
	}
}

// seccompProbe is a Python script that makes raw system calls and prints
// "<name> ok" or "<name> <errno name>" for each. A call that forks (clone
// and clone3 let through) ends its child at once.
func seccompProbe() string {
	calls := []struct{ name, call string }{
		{"unshare_user", fmt.Sprintf("sc(%d, %d)", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
		{"unshare_mount", fmt.Sprintf("sc(%d, %d)", unix.SYS_UNSHARE, unix.CLONE_NEWNS)},
		{"clone_user", fmt.Sprintf("sc(%d, %d, 0, 0, 0, 0)", unix.SYS_CLONE, unix.CLONE_NEWUSER|int(unix.SIGCHLD))},
		{"clone3", fmt.Sprintf("sc(%d, ctypes.byref(ctypes.create_string_buffer(88)), 88)", unix.SYS_CLONE3)},
		{"keyctl", fmt.Sprintf("sc(%d, 0, -3, 1)", unix.SYS_KEYCTL)},
		{"add_key", fmt.Sprintf("sc(%d, b'user', b'k', b'v', 1, -3)", unix.SYS_ADD_KEY)},
		{"userfaultfd", fmt.Sprintf("sc(%d, 1)", unix.SYS_USERFAULTFD)},
		{"io_uring_setup", fmt.Sprintf("sc(%d, 1, ctypes.byref(ctypes.create_string_buffer(120)))", unix.SYS_IO_URING_SETUP)},
		{"bpf", fmt.Sprintf("sc(%d, 0, ctypes.byref(ctypes.create_string_buffer(72)), 72)", unix.SYS_BPF)},
		{"perf_event_open", fmt.Sprintf("sc(%d, ctypes.byref(ctypes.create_string_buffer(128)), 0, -1, -1, 0)", unix.SYS_PERF_EVENT_OPEN)},
		{"mount", fmt.Sprintf("sc(%d, b'none', b'/tmp', b'tmpfs', 0, 0)", unix.SYS_MOUNT)},
		{"kexec_load", fmt.Sprintf("sc(%d, 0, 0, 0, 0)", unix.SYS_KEXEC_LOAD)},
		{"init_module", fmt.Sprintf("sc(%d, 0, 0, b'')", unix.SYS_INIT_MODULE)},
		{"setns", fmt.Sprintf("sc(%d, 0, 0)", unix.SYS_SETNS)},
		{"ptrace_attach", fmt.Sprintf("sc(%d, %d, 1, 0, 0)", unix.SYS_PTRACE, ptraceAttach)},
		{"process_vm_readv", fmt.Sprintf("sc(%d, 1, 0, 0, 0, 0, 0)", unix.SYS_PROCESS_VM_READV)},
		// Allowed: unshare without a namespace flag.
		{"unshare_files", fmt.Sprintf("sc(%d, %d)", unix.SYS_UNSHARE, unix.CLONE_FILES)},
	}
	var b strings.Builder
	b.WriteString(`import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
me = os.getpid()
def sc(*args):
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r == 0 and os.getpid() != me:
        os._exit(0)
    return r
def probe(name, r):
    print(name, "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno())), flush=True)
`)
	for _, c := range calls {
		fmt.Fprintf(&b, "probe(%q, %s)\n", c.name, c.call)
	}
	return b.String()
}

// TestSeccompInJail: in a real jail the filter is loaded (Seccomp: 2 for
// every process), the calls it denies fail with EPERM (clone3 with ENOSYS)
// where the kernel would otherwise let several through (a nested user
// namespace, keyrings, userfaultfd, io_uring), and ordinary work still runs:
// a shell pipeline, Python threads and a subprocess, a C program compiled
// and run.
func TestSeccompInJail(t *testing.T) {
	if seccompArch == 0 {
		t.Skip("no seccomp filter for this architecture")
	}
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	if err := b.Ensure(ctx, sandbox.Spec{ID: "seccomp"}); err != nil {
		t.Fatal(err)
	}
	run := func(script string) string {
		t.Helper()
		res, err := b.Exec(ctx, "seccomp", sandboxtest.Sh(script, time.Minute))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d, %v\nstdout %s\nstderr %s", script, res.ExitCode, err, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	if got := run("grep '^Seccomp:' /proc/self/status /proc/1/status | awk '{print $2}' | sort -u"); got != "2\n" {
		t.Fatalf("seccomp modes of a command and of the agent: %q, want filter (2)", got)
	}
	if got := run("ls /proc/1/fd | wc -l; readlink /proc/1/fd/3 || echo none"); !strings.HasSuffix(got, "none\n") {
		t.Errorf("the agent holds descriptor 3 (%q): the filter's pipe leaked into the jail", got)
	}

	script := seccompProbe()
	got := run("cat > /tmp/probe.py <<'EOF'\n" + script + "EOF\npython3 /tmp/probe.py")
	want := map[string]string{"clone3": "ENOSYS", "unshare_files": "ok"}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		name, result, _ := strings.Cut(line, " ")
		w, ok := want[name]
		if !ok {
			w = "EPERM"
		}
		if result != w {
			t.Errorf("%s: %s, want %s", name, result, w)
		}
		want[name] = "seen"
	}
	if n := strings.Count(script, "probe(\""); len(strings.Split(strings.TrimSpace(got), "\n")) != n {
		t.Fatalf("%d probe lines, want %d:\n%s", len(strings.Split(strings.TrimSpace(got), "\n")), n, got)
	}

	ordinary := `set -e
echo one two three | tr ' ' '\n' | sort -r | head -1
python3 - <<'EOF'
import threading, subprocess
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i * i)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(out), subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())
EOF
cat > /tmp/hello.c <<'EOF'
#include <stdio.h>
#include <pthread.h>
static void *run(void *p) { return p; }
int main(void) { pthread_t t; void *r; pthread_create(&t, 0, run, "thread"); pthread_join(t, &r); printf("c %s\n", (char *)r); return 0; }
EOF
gcc -pthread -o /tmp/hello /tmp/hello.c && /tmp/hello`
	if got := run(ordinary); got != "two\n14 child\nc thread\n" {
		t.Fatalf("ordinary commands: %q", got)
	}
}
