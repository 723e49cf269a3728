package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

func sh(script string, args ...string) []string {
	return append([]string{"sh", "-c", script, "sh"}, args...)
}

func TestExecExitCodesAndOutput(t *testing.T) {
	a := startAgent(t, nil)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"true", []string{"true"}, 0, "", ""},
		{"false", []string{"false"}, 1, "", ""},
		{"exit 7", sh("exit 7"), 7, "", ""},
		{"both streams", sh("echo out; echo err >&2; exit 3"), 3, "out\n", "err\n"},
		{"argv passed verbatim", []string{"printf", "%s|", "a b", "$HOME", ""}, 0, "a b|$HOME||", ""},
		{"killed by signal", sh("kill -TERM $$"), 128 + int(syscall.SIGTERM), "", ""},
		{"not found in shell", sh("no-such-program-xyz 2>/dev/null"), 127, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tt.wantCode || string(res.Stdout) != tt.wantStdout || string(res.Stderr) != tt.wantStderr {
				t.Fatalf("got code %d stdout %q stderr %q; want %d %q %q", res.ExitCode, res.Stdout, res.Stderr, tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
			if res.TimedOut || res.StdoutTruncated || res.StderrTruncated || res.OOMKilled {
				t.Fatalf("unexpected flags: %+v", res)
			}
		})
	}
}

func TestExecStartErrors(t *testing.T) {
	a := startAgent(t, nil)
	tests := []struct {
		name string
		cmd  sandbox.Command
	}{
		{"missing program", sandbox.Command{Args: []string{"no-such-program-xyz"}}},
		{"missing dir", sandbox.Command{Args: []string{"true"}, Dir: "/no/such/dir"}},
		{"empty argv", sandbox.Command{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.client.Exec(testCtx(t, 10*time.Second), tt.cmd)
			if !errors.Is(err, agent.ErrStart) {
				t.Fatalf("err = %v, want ErrStart", err)
			}
		})
	}
	// The connection is still usable afterwards.
	if err := a.client.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestExecDirAndEnv(t *testing.T) {
	a := startAgent(t, nil)
	if err := os.MkdirAll(filepath.Join(a.dirs.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	for _, f := range []string{filepath.Join(a.dirs.workspace, "sub", "run.sh"), filepath.Join(binDir, "only-here")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\necho \"ran $0\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		cmd  sandbox.Command
		want string
	}{
		{"default dir is the workspace", sandbox.Command{Args: []string{"pwd"}}, a.dirs.workspace + "\n"},
		{"relative dir under the workspace", sandbox.Command{Args: []string{"pwd"}, Dir: "sub"}, filepath.Join(a.dirs.workspace, "sub") + "\n"},
		{"absolute dir", sandbox.Command{Args: []string{"pwd"}, Dir: a.dirs.outputs[:len(a.dirs.outputs)-len("/outputs")]}, filepath.Dir(a.dirs.outputs) + "\n"},
		{"extra env", sandbox.Command{Args: sh(`echo "$FOO"`), Env: []string{"FOO=bar baz"}}, "bar baz\n"},
		{"agent settings are not passed on", sandbox.Command{Args: sh(`echo "${THREADBOX_AGENT_WORKSPACE-unset}"`)}, "unset\n"},
		{"relative program resolves against dir", sandbox.Command{Args: []string{"./run.sh"}, Dir: "sub"}, "ran ./run.sh\n"},
		{"program found in the command's PATH", sandbox.Command{Args: []string{"only-here"}, Env: []string{"PATH=" + binDir + ":/usr/bin:/bin"}}, "ran " + filepath.Join(binDir, "only-here") + "\n"},
		{"no OUTPUT_DIR unless asked", sandbox.Command{Args: sh(`echo "${OUTPUT_DIR-unset}"`)}, "unset\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := a.client.Exec(testCtx(t, 10*time.Second), tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tt.want {
				t.Fatalf("stdout %q (stderr %q), want %q", res.Stdout, res.Stderr, tt.want)
			}
		})
	}
}

// recorder collects Output chunks with their arrival times.
type recorder struct {
	mu     sync.Mutex
	chunks []recChunk
	notify chan struct{}
}

type recChunk struct {
	stream sandbox.Stream
	data   string
	at     time.Time
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) output(s sandbox.Stream, b []byte) {
	r.mu.Lock()
	r.chunks = append(r.chunks, recChunk{s, string(b), time.Now()})
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) text(s sandbox.Stream) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, c := range r.chunks {
		if c.stream == s {
			b.WriteString(c.data)
		}
	}
	return b.String()
}

// waitFor waits until the stream's text contains want.
func (r *recorder) waitFor(t *testing.T, s sandbox.Stream, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(r.text(s), want) {
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("timed out waiting for %q; have %q", want, r.text(s))
		}
	}
}

func TestExecStreamsInOrder(t *testing.T) {
	a := startAgent(t, nil)
	rec := newRecorder()
	script := `echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three`
	res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(script), Output: rec.output})
	end := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range rec.chunks {
		got = append(got, fmt.Sprintf("%d:%s", c.stream, c.data))
	}
	want := []string{"1:one\n", "2:two\n", "1:three\n"}
	if !slices.Equal(got, want) {
		t.Fatalf("chunks %q, want %q", got, want)
	}
	// The first chunk arrived while the command still ran.
	if lead := end.Sub(rec.chunks[0].at); lead < 400*time.Millisecond {
		t.Fatalf("first chunk arrived only %v before the end: not streamed", lead)
	}
	if string(res.Stdout) != "one\nthree\n" || string(res.Stderr) != "two\n" {
		t.Fatalf("result stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

func TestExecConcurrent(t *testing.T) {
	a := startAgent(t, nil)
	const n = 32
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			res, err := a.client.Exec(testCtx(t, 30*time.Second), sandbox.Command{
				Args: sh(`sleep 0.5; echo "out $1"; echo "err $1" >&2; exit $(($1 % 5))`, strconv.Itoa(i)),
			})
			if err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("out %d\n", i); string(res.Stdout) != want {
				errs <- fmt.Errorf("command %d: stdout %q, want %q", i, res.Stdout, want)
			}
			if want := fmt.Sprintf("err %d\n", i); string(res.Stderr) != want {
				errs <- fmt.Errorf("command %d: stderr %q, want %q", i, res.Stderr, want)
			}
			if res.ExitCode != i%5 {
				errs <- fmt.Errorf("command %d: exit %d, want %d", i, res.ExitCode, i%5)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Run one after another they would take 16 s.
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("32 commands of 0.5 s took %v: not concurrent", d)
	}
}

// pidGone waits until pid no longer exists (dead and reaped).
func pidGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Fatalf("process %d still exists (kill: %v, stat %q)", pid, err, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readPids reads the pids a script wrote into file, one a line.
func readPids(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, n)
	}
	return pids
}

func TestExecTimeout(t *testing.T) {
	a := startAgent(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pids")
	start := time.Now()
	res, err := a.client.Exec(testCtx(t, 20*time.Second), sandbox.Command{
		Args:    []string{"bash", "-c", `sleep 1000 & echo $! > "$1"; sleep 1000`, "bash", pidFile},
		Timeout: 2 * time.Second,
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed < 2*time.Second || elapsed > 3500*time.Millisecond {
		t.Fatalf("took %v, want about 2s", elapsed)
	}
	if res.ExitCode != 124 || !res.TimedOut {
		t.Fatalf("exit %d timedOut %v, want 124 true", res.ExitCode, res.TimedOut)
	}
	if string(res.Stderr) != "Command timed out after 2s." {
		t.Fatalf("stderr %q", res.Stderr)
	}
	for _, pid := range readPids(t, pidFile) {
		pidGone(t, pid, 2*time.Second)
	}
}

func TestExecTimeoutKeepsEarlierStderr(t *testing.T) {
	a := startAgent(t, nil)
	tests := []struct {
		script string
		want   string
	}{
		{`echo oops >&2; sleep 100`, "oops\nCommand timed out after 1s."},
		{`printf partial >&2; sleep 100`, "partial\nCommand timed out after 1s."},
	}
	for _, tt := range tests {
		rec := newRecorder()
		res, err := a.client.Exec(testCtx(t, 20*time.Second), sandbox.Command{Args: sh(tt.script), Timeout: time.Second, Output: rec.output})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stderr) != tt.want || res.ExitCode != 124 {
			t.Fatalf("exit %d stderr %q, want 124 %q", res.ExitCode, res.Stderr, tt.want)
		}
		// What streamed ends the same way.
		if got := rec.text(sandbox.Stderr); got != tt.want {
			t.Fatalf("streamed stderr %q, want %q", got, tt.want)
		}
	}
}

func TestExecTimeoutEscalatesToKill(t *testing.T) {
	a := startAgent(t, []string{"THREADBOX_AGENT_GRACE=500ms"})
	start := time.Now()
	// Ignored signals are inherited, so sleep ignores SIGTERM too.
	res, err := a.client.Exec(testCtx(t, 20*time.Second), sandbox.Command{
		Args:    sh(`trap "" TERM; sleep 1000`),
		Timeout: time.Second,
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 124 || !res.TimedOut || string(res.Stderr) != "Command timed out after 1s." {
		t.Fatalf("got %d %v %q", res.ExitCode, res.TimedOut, res.Stderr)
	}
	if elapsed < 1500*time.Millisecond || elapsed > 3*time.Second {
		t.Fatalf("took %v, want about timeout + grace = 1.5s", elapsed)
	}
}

func TestTimeoutMessage(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{60 * time.Second, "Command timed out after 60s."},
		{time.Second, "Command timed out after 1s."},
		{1500 * time.Millisecond, "Command timed out after 2s."},
		{200 * time.Millisecond, "Command timed out after 1s."},
	}
	for _, tt := range tests {
		if got := agent.TimeoutMessage(tt.d); got != tt.want {
			t.Errorf("TimeoutMessage(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestRenderOutput(t *testing.T) {
	if got := string(agent.RenderOutput([]byte("abc"), false)); got != "abc" {
		t.Fatalf("untruncated: %q", got)
	}
	if got := string(agent.RenderOutput([]byte("abc"), true)); got != "abc...[truncated]" {
		t.Fatalf("truncated: %q", got)
	}
}

func TestExecOutputCaps(t *testing.T) {
	a := startAgent(t, nil)
	const limit = 1000
	for _, n := range []int{limit - 1, limit, limit + 1, 5 * limit} {
		for _, mode := range []string{"one write", "1-byte writes"} {
			for _, stream := range []sandbox.Stream{sandbox.Stdout, sandbox.Stderr} {
				t.Run(fmt.Sprintf("%d bytes %s stream %d", n, mode, stream), func(t *testing.T) {
					script := `head -c "$1" /dev/zero | tr '\0' x`
					if mode == "1-byte writes" {
						script = `dd if=/dev/zero bs=1 count="$1" status=none | tr '\0' x | dd bs=1 status=none`
						// tr buffers; the last dd rewrites byte by byte.
					}
					if stream == sandbox.Stderr {
						script = "(" + script + ") >&2"
					}
					rec := newRecorder()
					res, err := a.client.Exec(testCtx(t, 30*time.Second), sandbox.Command{
						Args: sh(script, strconv.Itoa(n)), MaxOutput: limit, Output: rec.output,
					})
					if err != nil {
						t.Fatal(err)
					}
					got, trunc, other := res.Stdout, res.StdoutTruncated, res.Stderr
					if stream == sandbox.Stderr {
						got, trunc, other = res.Stderr, res.StderrTruncated, res.Stdout
					}
					want := strings.Repeat("x", min(n, limit))
					if n > limit {
						want += "...[truncated]"
					}
					if string(got) != want || trunc != (n > limit) {
						t.Fatalf("got %d bytes (truncated %v), want %d bytes (truncated %v); tail %q", len(got), trunc, len(want), n > limit, got[max(0, len(got)-20):])
					}
					if len(other) != 0 || res.ExitCode != 0 {
						t.Fatalf("exit %d, other stream %q", res.ExitCode, other)
					}
					if streamed := rec.text(stream); streamed != strings.Repeat("x", min(n, limit)) {
						t.Fatalf("streamed %d bytes, want %d", len(streamed), min(n, limit))
					}
				})
			}
		}
	}
}

func TestExecLargeOutputDoesNotBlock(t *testing.T) {
	a := startAgent(t, nil)
	// 20 MiB through a 1 MiB default cap: the agent drains the rest.
	res, err := a.client.Exec(testCtx(t, 60*time.Second), sandbox.Command{Args: sh(`head -c 20971520 /dev/zero; echo done >&2`)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.StdoutTruncated || len(res.Stdout) != 1<<20+len(agent.TruncatedMarker) || res.ExitCode != 0 {
		t.Fatalf("truncated %v len %d exit %d", res.StdoutTruncated, len(res.Stdout), res.ExitCode)
	}
	if string(res.Stderr) != "done\n" {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

func TestExecOutputDir(t *testing.T) {
	a := startAgent(t, nil)
	if err := os.MkdirAll(a.dirs.outputs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.dirs.outputs, "report.csv"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cd "$OUTPUT_DIR" && [ -z "$(ls -A)" ] || exit 9
echo "$OUTPUT_DIR"
echo new > report.csv
echo chart > chart.png
mkdir sub && echo nested > sub/inner.txt
ln -s chart.png link.png
mkfifo pipe
echo hidden > .hidden`
	res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(script), OutputDir: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	outDir := strings.TrimSpace(string(res.Stdout))
	if !strings.HasPrefix(outDir, a.dirs.tmp+"/") {
		t.Fatalf("OUTPUT_DIR %q not under %q", outDir, a.dirs.tmp)
	}
	want := []string{
		filepath.Join(a.dirs.outputs, ".hidden"),
		filepath.Join(a.dirs.outputs, "chart.png"),
		filepath.Join(a.dirs.outputs, "report.csv"),
	}
	got := slices.Sorted(slices.Values(res.OutputFiles))
	if !slices.Equal(got, want) {
		t.Fatalf("output files %q, want %q", got, want)
	}
	entries, err := os.ReadDir(a.dirs.outputs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{".hidden", "chart.png", "report.csv"}) {
		t.Fatalf("outputs folder holds %q", names)
	}
	if b, _ := os.ReadFile(filepath.Join(a.dirs.outputs, "report.csv")); string(b) != "new\n" {
		t.Fatalf("report.csv = %q, want overwritten", b)
	}
	if _, err := os.Stat(outDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary OUTPUT_DIR left behind: %v", err)
	}

	// Each command gets its own fresh folder.
	res2, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(`ls -A "$OUTPUT_DIR"; echo "$OUTPUT_DIR"`), OutputDir: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res2.Stdout)); got == outDir || strings.Contains(got, "\n") {
		t.Fatalf("second command saw %q", got)
	}
	if len(res2.OutputFiles) != 0 {
		t.Fatalf("empty OUTPUT_DIR produced %q", res2.OutputFiles)
	}

	// A file that cannot be moved (a folder of its name is in the way) is
	// kept, and the result says where.
	if err := os.Mkdir(filepath.Join(a.dirs.outputs, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	res3, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(`echo keep > "$OUTPUT_DIR/taken"; echo ok > "$OUTPUT_DIR/fine.txt"; echo "$OUTPUT_DIR"`), OutputDir: true})
	if err != nil {
		t.Fatal(err)
	}
	kept := strings.TrimSpace(string(res3.Stdout))
	if !strings.Contains(res3.Warning, "taken") || !strings.Contains(res3.Warning, kept) || len(res3.OutputFiles) != 1 {
		t.Fatalf("warning %q, files %q", res3.Warning, res3.OutputFiles)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "taken")); err != nil || string(b) != "keep\n" {
		t.Fatalf("the file not moved was not kept: %q %v", b, err)
	}

	// A file written straight into the outputs folder is an output too;
	// older ones are not.
	res4, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(`echo direct > ` + a.dirs.outputs + `/direct.txt`), OutputDir: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res4.OutputFiles, []string{filepath.Join(a.dirs.outputs, "direct.txt")}) {
		t.Fatalf("output files of a direct write: %q", res4.OutputFiles)
	}
}

func TestExecStdin(t *testing.T) {
	a := startAgent(t, nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: many frames
	tests := []struct {
		name  string
		args  []string
		stdin []byte
		want  string
	}{
		{"echo back", []string{"cat"}, []byte("hello\nworld"), "hello\nworld"},
		{"large", sh("wc -c"), big, strconv.Itoa(len(big)) + "\n"},
		{"no stdin is empty", []string{"cat"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: tt.args, Stdin: tt.stdin})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimLeft(string(res.Stdout), " "); got != tt.want {
				t.Fatalf("stdout %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStartInteractiveStdin(t *testing.T) {
	a := startAgent(t, nil)
	rec := newRecorder()
	p, err := a.client.Start(testCtx(t, 10*time.Second), sandbox.Command{
		Args: sh(`while read line; do echo "got $line"; done; echo bye`), Stdin: []byte("first\n"), Output: rec.output,
	}, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.PID() <= 0 {
		t.Fatalf("pid %d", p.PID())
	}
	rec.waitFor(t, sandbox.Stdout, "got first\n")
	if _, err := p.Write([]byte("second\n")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, sandbox.Stdout, "got second\n")
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "got first\ngot second\nbye\n" || res.ExitCode != 0 {
		t.Fatalf("exit %d stdout %q", res.ExitCode, res.Stdout)
	}
}

func TestStartPTY(t *testing.T) {
	a := startAgent(t, nil)
	t.Run("tty", func(t *testing.T) {
		rec := newRecorder()
		p, err := a.client.Start(testCtx(t, 10*time.Second), sandbox.Command{Args: []string{"tty"}, Output: rec.output}, agent.StartOptions{TTY: &agent.TTY{Rows: 24, Cols: 80}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(testCtx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(res.Stdout), "/dev/pts/") || res.ExitCode != 0 {
			t.Fatalf("exit %d stdout %q", res.ExitCode, res.Stdout)
		}
	})
	t.Run("resize", func(t *testing.T) {
		rec := newRecorder()
		p, err := a.client.Start(testCtx(t, 10*time.Second), sandbox.Command{
			Args: sh(`stty size; read x; stty size`), Output: rec.output,
		}, agent.StartOptions{TTY: &agent.TTY{Rows: 24, Cols: 80}})
		if err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, sandbox.Stdout, "24 80")
		if err := p.Resize(40, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(testCtx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(res.Stdout), "40 100") {
			t.Fatalf("stdout %q lacks the new size", res.Stdout)
		}
	})
	t.Run("close stdin sends EOT", func(t *testing.T) {
		p, err := a.client.Start(testCtx(t, 10*time.Second), sandbox.Command{Args: []string{"cat"}}, agent.StartOptions{TTY: &agent.TTY{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Write([]byte("typed\n")); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(testCtx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "typed") {
			t.Fatalf("exit %d stdout %q", res.ExitCode, res.Stdout)
		}
	})
}

func TestSignalReachesGroup(t *testing.T) {
	a := startAgent(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pids")
	rec := newRecorder()
	p, err := a.client.Start(testCtx(t, 10*time.Second), sandbox.Command{
		Args:   sh(`sleep 1000 & echo $! > "$1"; echo ready; wait`, pidFile),
		Output: rec.output,
	}, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, sandbox.Stdout, "ready")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d", res.ExitCode, 128+int(syscall.SIGTERM))
	}
	for _, pid := range readPids(t, pidFile) {
		pidGone(t, pid, 2*time.Second)
	}
}

func TestBackgroundChildrenDoNotOutliveCommand(t *testing.T) {
	a := startAgent(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pids")
	start := time.Now()
	// The background sleep keeps stdout open; the command must still end.
	res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{Args: sh(`sleep 1000 & echo $! > "$1"; echo done`, pidFile)})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second || string(res.Stdout) != "done\n" {
		t.Fatalf("took %v, stdout %q", d, res.Stdout)
	}
	for _, pid := range readPids(t, pidFile) {
		pidGone(t, pid, 2*time.Second)
	}
}

func TestCancelKillsGroup(t *testing.T) {
	a := startAgent(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pids")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder()
	errc := make(chan error, 1)
	go func() {
		_, err := a.client.Exec(ctx, sandbox.Command{
			Args:   sh(`echo $$ > "$1"; sleep 1000 & echo $! >> "$1"; echo ready; wait`, pidFile),
			Output: rec.output,
		})
		errc <- err
	}()
	rec.waitFor(t, sandbox.Stdout, "ready")
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Exec did not return promptly after cancel")
	}
	pids := readPids(t, pidFile)
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	for _, pid := range pids {
		pidGone(t, pid, 3*time.Second)
	}
	// The connection still works.
	if err := a.client.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestConnectionLossFailsPendingCalls(t *testing.T) {
	a := startAgent(t, nil)
	const n = 4
	errc := make(chan error, n+1)
	for i := range n {
		go func() {
			// sleep 5 ends by itself, so no orphan outlives the test for long.
			cmd := sandbox.Command{Args: []string{"sleep", "5"}}
			if i%2 == 0 {
				cmd.Output = func(sandbox.Stream, []byte) {}
			}
			res, err := a.client.Exec(context.Background(), cmd)
			if err == nil {
				err = fmt.Errorf("got a result %+v", res)
			}
			errc <- err
		}()
	}
	p, err := a.client.Start(testCtx(t, 5*time.Second), sandbox.Command{Args: []string{"sleep", "5"}}, agent.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := p.Wait(context.Background())
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(2 * time.Second)
	for range n + 1 {
		select {
		case err := <-errc:
			if !errors.Is(err, sandbox.ErrUnavailable) {
				t.Fatalf("pending call: err = %v, want ErrUnavailable", err)
			}
		case <-deadline:
			t.Fatal("pending calls did not return after the agent died")
		}
	}
	if _, err := a.client.Exec(testCtx(t, 2*time.Second), sandbox.Command{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("Exec after loss: %v", err)
	}
	if err := a.client.Ping(testCtx(t, 2*time.Second)); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("Ping after loss: %v", err)
	}
	select {
	case <-a.client.Done():
	default:
		t.Fatal("Done not closed")
	}
}

func TestCloseFailsPendingCallsAndStopsAgent(t *testing.T) {
	a := startAgent(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pids")
	rec := newRecorder()
	errc := make(chan error, 1)
	go func() {
		_, err := a.client.Exec(context.Background(), sandbox.Command{Args: sh(`echo $$ > "$1"; echo ready; sleep 1000`, pidFile), Output: rec.output})
		errc <- err
	}()
	rec.waitFor(t, sandbox.Stdout, "ready")
	if err := a.client.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Exec did not return after Close")
	}
	// The agent sees its input end, kills its commands and exits.
	waited := make(chan error, 1)
	go func() { waited <- a.cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not exit after its input closed")
	}
	for _, pid := range readPids(t, pidFile) {
		pidGone(t, pid, 2*time.Second)
	}
}

func TestKeepaliveDetectsHungAgent(t *testing.T) {
	a := startAgent(t, nil, agent.WithKeepalive(100*time.Millisecond, 300*time.Millisecond))
	// A stopped agent keeps its pipes open but answers nothing.
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	select {
	case <-a.client.Done():
		if !errors.Is(a.client.Err(), sandbox.ErrUnavailable) {
			t.Fatalf("err = %v", a.client.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("keepalive did not notice the stopped agent")
	}
}

// zombieChildren lists the zombie children of pid.
func zombieChildren(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var zs []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name: state ppid ...
		s := string(b)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(rest) >= 2 && rest[0] == "Z" && rest[1] == strconv.Itoa(pid) {
			zs = append(zs, child)
		}
	}
	return zs
}

func TestReapsOrphansWithoutStealingStatuses(t *testing.T) {
	a := startAgent(t, nil)
	// Each command leaves a grandchild in its own session (out of reach of
	// the group kill); it exits shortly after and is reparented to the agent,
	// which must reap it while the commands still get their own statuses.
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := a.client.Exec(testCtx(t, 10*time.Second), sandbox.Command{
				Args: sh(`setsid sh -c 'sleep 0.3' </dev/null >/dev/null 2>&1 & exit $1`, strconv.Itoa(10+i)),
			})
			if err != nil {
				t.Error(err)
				return
			}
			if res.ExitCode != 10+i {
				t.Errorf("command %d: exit %d, want %d", i, res.ExitCode, 10+i)
			}
		})
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond)
	if zs := zombieChildren(t, a.cmd.Process.Pid); len(zs) > 0 {
		t.Fatalf("agent left zombies %v", zs)
	}
}

// sandboxPath is the PATH a sandbox's agent runs with (the one the agent
// gives commands when it has none), so that looking a command up costs what
// it costs in a sandbox rather than in the developer's longer PATH.
const sandboxPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BenchmarkExecTrue is one command's round trip through the agent: the
// request, the fork and exec, the wait and the result. Beside the mean
// (ns/op) it reports the median and the 99th percentile of the single
// round trips (p50-ns, p99-ns), since the slow tail is what a user waits on.
func BenchmarkExecTrue(b *testing.B) {
	a := startAgent(b, []string{sandboxPath})
	ctx := context.Background()
	cmd := sandbox.Command{Args: []string{"true"}}
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res, err := a.client.Exec(ctx, cmd)
		took = append(took, time.Since(start))
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	// The nearest-rank percentile: the smallest round trip that at least
	// the share p of them took no longer than.
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(took)))) - 1
		return float64(took[max(0, min(i, len(took)-1))].Nanoseconds())
	}
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}

// BenchmarkHostTrue is the floor of BenchmarkExecTrue: the same command
// forked and waited for by the test process itself.
func BenchmarkHostTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPing(b *testing.B) {
	a := startAgent(b, nil)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := a.client.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrueOutputDir is BenchmarkExecTrue with an $OUTPUT_DIR made
// for the command and read after it, as the code-execution tools ask.
func BenchmarkExecTrueOutputDir(b *testing.B) {
	a := startAgent(b, nil)
	ctx := context.Background()
	cmd := sandbox.Command{Args: []string{"true"}, OutputDir: true}
	b.ResetTimer()
	for b.Loop() {
		res, err := a.client.Exec(ctx, cmd)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
}

// BenchmarkStreamedOutput is the throughput of a streamed command's output
// (a terminal session's, a file read's): 64 MiB a run, taken by a callback
// that only counts it. With an agent that keeps to flow control, the host
// gives the window back as the callback takes it.
func BenchmarkStreamedOutput(b *testing.B) {
	a := startAgent(b, nil)
	ctx := context.Background()
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		var n atomic.Int64
		p, err := a.client.Start(ctx, sandbox.Command{
			Args:   []string{"head", "-c", strconv.Itoa(size), "/dev/zero"},
			Output: func(_ sandbox.Stream, chunk []byte) { n.Add(int64(len(chunk))) },
		}, agent.StartOptions{Stream: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil || n.Load() != size {
			b.Fatalf("streamed %d bytes: %v", n.Load(), err)
		}
	}
}
