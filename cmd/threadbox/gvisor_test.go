package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"threadbox/app/containers"
	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/sandbox/gvisor"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/store/storetest"
)

// needGvisor returns the agent binary for a gvisor-backed server, after
// checking that it can run here: root, runsc and the sandbox root
// filesystem.
func needGvisor(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "the gvisor backend needs root")
	}
	if _, err := exec.LookPath(gvisor.DefaultRunsc); err != nil {
		missing(t, "runsc is not installed (scripts/ci-docker.sh installs it): %v", err)
	}
	if local.FindRootFS(os.Getenv) == "" {
		missing(t, "no sandbox root filesystem (sandbox/build-offline.sh --rootfs-only)")
	}
	return needAgent(t)
}

// gvisorInstance returns a fresh instance name whose gVisor sandboxes and
// state are removed when the test ends, after its servers stopped (a
// server killed at once leaves them to the next start's Reconcile).
func gvisorInstance(t *testing.T) string {
	t.Helper()
	instance := fmt.Sprintf("gv%d", time.Now().UnixNano())
	sandboxtest.Cleanup(t, func() {
		if err := gvisor.RemoveInstance(context.Background(), instance); err != nil {
			t.Errorf("gvisor sandboxes of %s not removed: %v", instance, err)
		}
		// Nor any of its control groups, in either cgroup layout.
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "threadbox-gvisor", hostdirs.SafeID(instance)))
		if v2 := filepath.Join("/sys/fs/cgroup", "threadbox-gvisor", hostdirs.SafeID(instance)); exists(t, v2) {
			left = append(left, v2)
		}
		if len(left) > 0 {
			t.Errorf("control groups of %s left: %v", instance, left)
		}
	})
	return instance
}

// gvisorRunning reports whether a gVisor sandbox of s's instance runs.
func gvisorRunning(t *testing.T, s *server) bool {
	t.Helper()
	state := filepath.Join(gvisor.DefaultStateDir, hostdirs.SafeID(s.env["THREADBOX_INSTANCE"]), "state")
	if _, err := os.Stat(state); err != nil {
		return false
	}
	out, err := exec.Command(gvisor.DefaultRunsc, "--root", state, "list", "--format=json").Output()
	if err != nil {
		t.Fatalf("runsc list: %v", err)
	}
	var listed []struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &listed); err != nil {
		t.Fatalf("runsc list: %v: %s", err, out)
	}
	// A container made ready for the next restore (created, not started)
	// runs nothing.
	for _, c := range listed {
		if c.Status == "running" {
			return true
		}
	}
	return false
}

// TestGvisorSandboxSurvivesRestart: a graceful shutdown checkpoints the
// gVisor sandbox it holds (whose life would end with the process), and
// the next request after the restart restores it from its archive in the
// blob store (this host's copy removed, as on another host): a background
// process started by an earlier bash call is still running, and /tmp is
// kept, with no note of a fresh start. The restore starts as the request
// arrives, while the model answers, not when its tool call needs it.
func TestGvisorSandboxSurvivesRestart(t *testing.T) {
	bin := needGvisor(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "THREADBOX_INSTANCE": gvisorInstance(t)})
	tok := s.bootstrap("acme", "admin@acme.test")
	ctx := context.Background()
	r := bashTurn(t, s, fake, tok, "durable", "setsid sh -c 'echo $$ > /tmp/bg.pid; while :; do sleep 1; done' >/dev/null 2>&1 </dev/null & "+
		"echo kept > /tmp/kept; for i in $(seq 100); do test -s /tmp/bg.pid && break; sleep 0.05; done; cat /tmp/bg.pid")
	pid := strings.TrimSpace(r.Stdout)
	if r.ReturnCode != 0 || pid == "" {
		t.Fatalf("starting the background process: %+v", r)
	}

	s.stop()
	if gvisorRunning(t, s) {
		t.Fatal("a gVisor sandbox runs after the server stopped")
	}
	if a := archivesIn(s.dataDir); len(a) != 1 {
		t.Fatalf("checkpoint archives after the graceful shutdown: %v, want one", a)
	}
	// The host's copy of the checkpoint goes, as on another host: the
	// restore unpacks the archive from the blob store.
	if err := os.RemoveAll(filepath.Join(s.dataDir, "checkpoints")); err != nil {
		t.Fatal(err)
	}
	env := maps.Clone(s.env)
	env["LISTEN_ADDR"] = freeAddr(t)
	s2 := &server{t: t, base: "http://" + env["LISTEN_ADDR"], dataDir: s.dataDir, env: env, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	s2.run(t, []string{"serve"}, 20*time.Second)
	// The restore starts with the request, not with its tool call: the
	// model's answer (the bash call) is held until the sandbox runs.
	gate := make(chan struct{})
	step := bashStep("cat /tmp/kept; kill -0 " + pid + " && echo alive")
	step.Gate = gate
	fake.Push(step, textStep("ok"))
	type answer struct {
		msg *anthropic.Message
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		cl := msgClient(s2, tok)
		msg, err := cl.Messages.New(ctx, msgParams("durable", userText("run"), codeExecTool...))
		answered <- answer{msg, err}
	}()
	for deadline := time.Now().Add(30 * time.Second); !gvisorRunning(t, s2); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(gate)
			<-answered
			t.Fatal("the sandbox was not restored while the model was answering")
		}
	}
	close(gate)
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	_, r = bashResult(t, a.msg.Content, 0)
	if r.Stdout != "kept\nalive\n" || r.Stderr != "" {
		t.Fatalf("after the restart: %+v, want /tmp and the background process back", r)
	}
	if a := archivesIn(s.dataDir); len(a) != 0 {
		t.Fatalf("checkpoint archives after the restore: %v, want none (a checkpoint is used once)", a)
	}
}

// TestGvisorSessionsHandOver: two threadbox processes on one PostgreSQL
// database and one data folder, under the gvisor backend, behind one
// model. The second takes over a sandbox the first holds (the first
// checkpoints it, the second restores it) and attaches to the sessions the
// first started: the code_execution interpreter still holds x, and the
// exec_command session answers write_stdin under its id.
func TestGvisorSessionsHandOver(t *testing.T) {
	bin := needGvisor(t)
	dbURL := storetest.PostgresURL(t)
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	env := childEnv(t, dbURL, map[string]string{
		"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "SWEEP_INTERVAL": "300ms", "THREADBOX_INSTANCE": gvisorInstance(t),
		"MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model",
	})
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one := startChild(t, env)
	env2 := maps.Clone(env)
	env2["LISTEN_ADDR"] = freeAddr(t)
	two := startChild(t, env2)
	c := sessionCalls{t: t, fake: fake, tok: one.bootstrap("acme", "admin@acme.test"), box: "handed"}
	cell, tool := c.cell, c.tool
	if r := cell(one.server, "x = 41"); r.ReturnCode != 0 {
		t.Fatalf("first cell %+v", r)
	}
	term := tool(one.server, "exec_command", map[string]any{"command": "python3 -i -q", "grace_seconds": 1})
	sid := term.str("session_id")
	if term.Content["alive"] != true || !strings.HasPrefix(sid, "sess_") {
		t.Fatalf("exec_command %v", term.Content)
	}
	if r := cell(two.server, "print(x + 1)"); r.ReturnCode != 0 || r.Stdout != "42\n" || r.Stderr != "" {
		t.Fatalf("cell on the second server %+v: want the interpreter handed over with x", r)
	}
	r := tool(two.server, "write_stdin", map[string]any{"session_id": sid, "input": "print(6 * 7)\n", "since": term.num("cursor"), "wait_seconds": 5})
	if r.Content["alive"] != true || !strings.Contains(r.str("stdout"), "42") || r.num("cursor") <= term.num("cursor") {
		t.Fatalf("write_stdin on the second server %v: want the session handed over", r.Content)
	}
	one.term(t)
	two.term(t)
}

// TestGvisorHandOver: two threadbox processes on one PostgreSQL database
// and one data folder, under the gvisor backend. A thread's sandbox runs
// on the first; a turn on the second asks for it, the first checkpoints it
// as it hands it over, and the second restores it: a background process
// and /tmp are there, and no note of a fresh start.
func TestGvisorHandOver(t *testing.T) {
	bin := needGvisor(t)
	dbURL := storetest.PostgresURL(t)
	env := childEnv(t, dbURL, map[string]string{
		"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner", "SWEEP_INTERVAL": "300ms",
		"THREADBOX_INSTANCE": gvisorInstance(t),
	})
	one, two := handOver(t, env)
	one.term(t)
	two.term(t)
}

// handOver starts two servers with env (one PostgreSQL database, one data
// folder) and runs a thread's turn on the first, which leaves a background
// process and a file in /tmp, then a turn on the second, which asks the
// first for the sandbox: the process and the file must be there, with no
// note of a fresh start. It returns the two servers, still running.
func handOver(t *testing.T, env map[string]string) (one, two *child) {
	t.Helper()
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one = startChild(t, env)
	env2 := maps.Clone(env)
	env2["LISTEN_ADDR"] = freeAddr(t)
	two = startChild(t, env2)
	f := newWSFixture(t, one.server)
	r := one.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn(
		"setsid sh -c 'echo $$ > /tmp/bg.pid; while :; do sleep 1; done' >/dev/null 2>&1 </dev/null & "+
			"echo kept > /tmp/kept; for i in $(seq 100); do test -s /tmp/bg.pid && break; sleep 0.05; done; echo started"))
	if r.status != 200 || !strings.Contains(string(r.body), `started\n`) {
		t.Fatalf("turn on the first server: %d %s", r.status, r.body)
	}
	r = two.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn("cat /tmp/kept; kill -0 $(cat /tmp/bg.pid) && echo bg-alive"))
	if r.status != 200 || !strings.Contains(string(r.body), `kept\nbg-alive\n`) || strings.Contains(string(r.body), "started fresh") {
		t.Fatalf("turn on the second server after the hand-over: %d %s\nthe first server's log:\n%s\nthe second's:\n%s", r.status, r.body, one.stdout.String(), two.stdout.String())
	}
	return one, two
}

// TestGvisorKilledServer: a gVisor sandbox lost with its threadbox process
// (kill -9, then the host's sandboxes gone, as in a host crash) boots
// fresh over its files at the next server's first use, once the dead
// server's lease lapsed, and the next command's result starts with the
// one-line note saying so; the files written before are there, /tmp is
// not.
func TestGvisorKilledServer(t *testing.T) {
	bin := needGvisor(t)
	instance := gvisorInstance(t)
	env := childEnv(t, "", map[string]string{
		"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner", "SWEEP_INTERVAL": "300ms",
		"LEASE_TTL": "2s", "THREADBOX_INSTANCE": instance,
	})
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one := startChild(t, env)
	f := newWSFixture(t, one.server)
	r := one.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn("echo kept > /tmp/kept; echo file > written.txt; echo started"))
	if r.status != 200 || !strings.Contains(string(r.body), `started\n`) {
		t.Fatalf("turn on the first server: %d %s", r.status, r.body)
	}
	one.kill()
	if err := gvisor.RemoveInstance(context.Background(), instance); err != nil {
		t.Fatal(err)
	}
	env2 := maps.Clone(env)
	env2["LISTEN_ADDR"] = freeAddr(t)
	two := startChild(t, env2)
	r = two.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn("cat written.txt; cat /tmp/kept 2>/dev/null || echo no-tmp"))
	body := string(r.body)
	if r.status != 200 || !strings.Contains(body, `file\nno-tmp\n`) || !strings.Contains(body, containers.FreshNote) {
		t.Fatalf("turn on the next server after the sandbox was lost: %d %s; want a fresh sandbox over the files, with the note\n%s", r.status, body, two.stdout.String())
	}
	two.term(t)
}

// TestGvisorPausedCellSurvivesRestart: a programmatic cell paused on the
// client's tool call when the server stops gracefully is resumed by the
// next server: the sandbox is checkpointed with the paused interpreter,
// restored by the client's tool_result, and the new server attaches to
// the interpreter and hands the result to the paused cell, whose earlier
// variables are still there.
func TestGvisorPausedCellSurvivesRestart(t *testing.T) {
	bin := needGvisor(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "THREADBOX_INSTANCE": gvisorInstance(t)})
	tok := s.bootstrap("acme", "admin@acme.test")
	ctx := context.Background()
	echoFinal(fake)
	tools := ptcTools(codeExec2601)
	fake.Push(fakeupstream.PythonCell("before = 'kept'\nv = await get_weather(city='Rome')\nprint(before, v['celsius'])"))
	cl := msgClient(s, tok)
	first, err := cl.Messages.New(ctx, msgParams("ptc-restart", userText("weather"), tools...))
	if err != nil {
		t.Fatal(err)
	}
	calls := pendingCalls(t, first)

	s.stop()
	env := maps.Clone(s.env)
	env["LISTEN_ADDR"] = freeAddr(t)
	s2 := &server{t: t, base: "http://" + env["LISTEN_ADDR"], dataDir: s.dataDir, env: env, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	s2.run(t, []string{"serve"}, 20*time.Second)
	cl2 := msgClient(s2, tok)
	msg, err := cl2.Messages.New(ctx, msgParams("ptc-restart", append(userText("weather"), first.ToParam(), answer(calls, temperature)), tools...))
	if err != nil {
		t.Fatal(err)
	}
	if r := cellEnd(t, msg.Content, 0); r.ReturnCode != 0 || r.Stdout != "kept 27\n" {
		t.Fatalf("the paused cell after the restart: %+v, want it resumed with its variables", r)
	}
}

// TestGvisorPausedCellHandOver: a programmatic cell paused on one server
// is resumed through another: the client's tool_result reaches the second
// server, which takes the sandbox over (the first checkpoints it with the
// paused interpreter), attaches to the interpreter and resumes the cell.
func TestGvisorPausedCellHandOver(t *testing.T) {
	bin := needGvisor(t)
	dbURL := storetest.PostgresURL(t)
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	env := childEnv(t, dbURL, map[string]string{
		"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "SWEEP_INTERVAL": "300ms", "THREADBOX_INSTANCE": gvisorInstance(t),
		"MODEL_PROVIDER": "anthropic", "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model",
	})
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one := startChild(t, env)
	env2 := maps.Clone(env)
	env2["LISTEN_ADDR"] = freeAddr(t)
	two := startChild(t, env2)
	tok := one.bootstrap("acme", "admin@acme.test")
	ctx := context.Background()
	echoFinal(fake)
	tools := ptcTools(codeExec2601)
	fake.Push(fakeupstream.PythonCell("before = 'kept'\nv = await get_weather(city='Rome')\nprint(before, v['celsius'])"))
	cl1 := msgClient(one.server, tok)
	first, err := cl1.Messages.New(ctx, msgParams("ptc-handed", userText("weather"), tools...))
	if err != nil {
		t.Fatal(err)
	}
	calls := pendingCalls(t, first)
	cl2 := msgClient(two.server, tok)
	msg, err := cl2.Messages.New(ctx, msgParams("ptc-handed", append(userText("weather"), first.ToParam(), answer(calls, temperature)), tools...))
	if err != nil {
		t.Fatal(err)
	}
	if r := cellEnd(t, msg.Content, 0); r.ReturnCode != 0 || r.Stdout != "kept 27\n" {
		t.Fatalf("the paused cell through the second server: %+v, want it resumed with its variables", r)
	}
	one.term(t)
	two.term(t)
}

// TestGvisorFilesTravelToAnotherHost: with the S3 store and no shared data
// folder, a graceful shutdown checkpoints the gVisor sandbox and mirrors
// its container's files with it, and a server on another data folder (the
// same database and bucket, as another host) restores both: the file the
// first wrote is there, and so are the sandbox's /tmp and its background
// process, with no note of a fresh start.
func TestGvisorFilesTravelToAnotherHost(t *testing.T) {
	bin := needGvisor(t)
	o, _ := needS3(t)
	dbURL := storetest.PostgresURL(t)
	keys := t.TempDir()
	// The S3 adapter reads its credentials from the process's environment.
	t.Setenv("AWS_ACCESS_KEY_ID", o.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", o.SecretKey)
	settings := map[string]string{
		"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "THREADBOX_INSTANCE": gvisorInstance(t),
		"BLOB_URL":           fmt.Sprintf("s3://%s?endpoint=%s&region=%s", o.Bucket, o.Endpoint, o.Region),
		"BLOB_CREATE_BUCKET": "true", "JWT_KEY_FILE": filepath.Join(keys, "jwt.pem"),
	}
	first, fake := modelServer(t, dbURL, "anthropic", settings)
	tok := first.bootstrap("acme", "admin@acme.test")
	bash := func(s *server, fake *fakeupstream.Server, command string) anthropic.BashCodeExecutionResultBlock {
		t.Helper()
		return bashTurn(t, s, fake, tok, "travel", command)
	}
	r := bash(first, fake, "echo 'written on the first host' > notes.txt; "+
		"setsid sh -c 'echo $$ > /tmp/bg.pid; while :; do sleep 1; done' >/dev/null 2>&1 </dev/null & "+
		"echo kept > /tmp/kept; for i in $(seq 100); do test -s /tmp/bg.pid && break; sleep 0.05; done; cat /tmp/bg.pid")
	pid := strings.TrimSpace(r.Stdout)
	if r.ReturnCode != 0 || pid == "" {
		t.Fatalf("first host: %+v", r)
	}
	first.stop()

	second, fake2 := modelServer(t, dbURL, "anthropic", settings)
	if second.dataDir == first.dataDir {
		t.Fatal("the second server shares the first's data folder")
	}
	r = bash(second, fake2, "cat notes.txt /tmp/kept; kill -0 "+pid+" && echo alive")
	if r.ReturnCode != 0 || r.Stdout != "written on the first host\nkept\nalive\n" || strings.Contains(r.Stderr, "[threadbox]") {
		t.Fatalf("on the other host: %+v", r)
	}
	second.stop()
}

// TestGvisorWarmPoolServesNewSandboxes: with SANDBOX_WARM_POOL=1 a
// gvisor-backed server keeps one warm sandbox; a new container's first
// command runs in it (the runsc container booted warm serves it, with the
// container's folders, read-only ones read-only), and the pool boots
// another.
func TestGvisorWarmPoolServesNewSandboxes(t *testing.T) {
	bin := needGvisor(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin,
		"THREADBOX_INSTANCE": gvisorInstance(t), "SANDBOX_WARM_POOL": "1", "SWEEP_INTERVAL": "300ms"})
	tok := s.bootstrap("acme", "admin@acme.test")
	state := filepath.Join(gvisor.DefaultStateDir, hostdirs.SafeID(s.env["THREADBOX_INSTANCE"]), "state")
	running := func() []string {
		out, _ := exec.Command(gvisor.DefaultRunsc, "--root", state, "list", "-quiet").Output()
		return strings.Fields(string(out))
	}
	var warm []string
	waitFor(t, 60*time.Second, func() bool { warm = running(); return len(warm) == 1 && strings.HasPrefix(warm[0], "warm-") },
		func() string { return fmt.Sprintf("no warm sandbox booted: %v", warm) })
	fake.Push(bashStep("echo hi > /mnt/user-data/outputs/hi.txt && cat /mnt/user-data/outputs/hi.txt; touch /mnt/skills/x 2>/dev/null || echo ro"), textStep("ok"))
	cl := msgClient(s, tok)
	msg, err := cl.Messages.New(context.Background(), msgParams("pooled", userText("run"), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	if _, r := bashResult(t, msg.Content, 0); r.ReturnCode != 0 || strings.TrimSpace(r.Stdout) != "hi\nro" {
		t.Fatalf("the command: %+v", r)
	}
	var now []string
	waitFor(t, 60*time.Second, func() bool {
		now = running()
		return len(now) == 2 && (now[0] == warm[0] || now[1] == warm[0])
	}, func() string {
		return fmt.Sprintf("want the claimed warm sandbox %s and a new warm one running, have %v", warm[0], now)
	})
}

// archivesIn lists the checkpoint archives in the blob store under
// dataDir (the default, local one).
func archivesIn(dataDir string) []string {
	found, _ := filepath.Glob(filepath.Join(dataDir, "checkpoint-archives", "*", "??", "*"))
	return found
}
