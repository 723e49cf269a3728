package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/store"
	"threadbox/infra/store/storetest"
)

// TestMain lets a test start threadbox as a process of its own (this test
// binary, re-run with THREADBOX_TEST_CHILD=serve), which it may then kill,
// and runs the tests with sandboxtest.Main: a run that reaches its timeout
// stops the tests' servers and removes their sandboxes before it ends.
func TestMain(m *testing.M) {
	if os.Getenv("THREADBOX_TEST_CHILD") == "serve" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := run(ctx, []string{"serve"}, os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "threadbox:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	sandboxtest.Main(m)
}

// child is a threadbox serving from a process of its own.
type child struct {
	*server
	cmd    *exec.Cmd
	exited chan error
}

// childEnv is the environment of a test's threadbox processes: they share
// its data folder, database and instance; the instance's sandboxes and the
// data folder's mounts go when the test ends.
func childEnv(t *testing.T, dbURL string, extra map[string]string) map[string]string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	env := map[string]string{
		"LISTEN_ADDR":        freeAddr(t),
		"DATA_DIR":           filepath.Join(t.TempDir(), "data"),
		"DATABASE_URL":       dbURL,
		"LOG_LEVEL":          "info",
		"SANDBOX_DISK_QUOTA": "none",
		"THREADBOX_INSTANCE": "life" + hex.EncodeToString(b),
	}
	for k, v := range extra {
		env[k] = v
	}
	sandboxtest.Cleanup(t, func() { cleanUp(env) })
	return env
}

// cleanUp removes what the servers of env may have left: the instance's
// sandboxes, then the disk quota mounts under its data folder. The
// sandboxes are removed twice, half a second apart: a container a killed
// server asked for can still be made by the Docker daemon after the
// first pass.
func cleanUp(env map[string]string) {
	ctx := context.Background()
	_ = docker.RemoveInstance(ctx, env["THREADBOX_INSTANCE"], filepath.Join(env["DATA_DIR"], "pool"))
	time.Sleep(500 * time.Millisecond)
	_ = docker.RemoveInstance(ctx, env["THREADBOX_INSTANCE"], filepath.Join(env["DATA_DIR"], "pool"))
	_, _ = hostdirs.New(env["DATA_DIR"], hostdirs.Options{Quota: hostdirs.QuotaLoop}).ReleaseUnused(ctx, 0, nil)
}

// startChild starts threadbox serve in a process of its own and waits until
// it answers.
func startChild(t *testing.T, env map[string]string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "THREADBOX_TEST_CHILD=serve")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, exited: make(chan error, 1)}
	go func() { c.exited <- cmd.Wait() }()
	c.server = &server{t: t, base: "http://" + env["LISTEN_ADDR"], dataDir: env["DATA_DIR"], env: env, stdout: out, stop: c.kill}
	sandboxtest.Cleanup(t, c.kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(c.base + "/healthz"); err == nil {
			resp.Body.Close()
			return c
		}
		select {
		case err := <-c.exited:
			t.Fatalf("threadbox exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("threadbox did not come up\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the process at once (kill -9).
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	<-c.exited
	c.exited <- nil
}

// term stops the process gracefully (SIGTERM) and waits for it.
func (c *child) term(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		c.exited <- err
		if err != nil {
			t.Fatalf("threadbox stopped with %v\n%s", err, c.stdout.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("threadbox did not stop within 40s of SIGTERM\n%s", c.stdout.String())
	}
}

// post sends a JSON POST from any goroutine.
func post(base, path, token string, body any) (int, string, error) {
	j, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+path, bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// codeTurn is the body of a chat turn whose bash block the runner model runs.
func codeTurn(script string) map[string]any {
	return map[string]any{"content": "```bash\n" + script + "\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}}}
}

// sandboxes lists the instance's Docker containers: container id → state.
// A sandbox claimed from the warm pool is known by its name (its label
// names the slot); a warm sandbox nobody claimed serves no container and
// is left out.
func sandboxes(t *testing.T, instance string) map[string]string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label="+docker.LabelInstance+"="+instance,
		"--format", `{{.Label "`+docker.LabelContainer+`"}} {{.Label "`+docker.LabelWarm+`"}} {{.Names}} {{.State}}`).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v %s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 { // no warm label
			f = []string{f[0], "", f[1], f[2]}
		}
		if len(f) != 4 {
			continue
		}
		id, warm, name, state := f[0], f[1], f[2], f[3]
		if warm == "true" {
			claimed := strings.TrimPrefix(name, "threadbox-"+instance+"-")
			if claimed == id {
				continue
			}
			id = claimed
		}
		got[id] = state
	}
	return got
}

// openRecords opens the database the servers of env share.
func openRecords(t *testing.T, env map[string]string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), env["DATABASE_URL"], env["DATA_DIR"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// waitFor polls cond until it holds or the time is up, then fails with
// what describe says.
func waitFor(t *testing.T, within time.Duration, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, describe())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// orphans returns what breaks "nothing runs without a live record": a
// sandbox whose record is missing or not running (or held by a holder
// named in stale), and a running record without a sandbox.
func orphans(t *testing.T, st *store.Store, instance string, stale ...string) []string {
	ctx := context.Background()
	var bad []string
	boxes := sandboxes(t, instance)
	for id, state := range boxes {
		c, err := st.Containers().Container(ctx, id)
		switch {
		case err != nil:
			bad = append(bad, id+": sandbox ("+state+") without a record")
		case state != "running" || c.State() != container.Running:
			bad = append(bad, id+": sandbox "+state+", record "+string(c.State()))
		case c.Holder() == "" || slicesContains(stale, c.Holder()):
			bad = append(bad, id+": held by "+c.Holder())
		}
	}
	running, _ := st.Containers().ContainersInState(ctx, container.Running)
	for _, c := range running {
		if _, ok := boxes[c.ID()]; !ok {
			bad = append(bad, c.ID()+": running record without a sandbox")
		}
	}
	return bad
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// lastStatus is the status of the thread's last message.
func lastStatus(s *server, tok, tid string) string {
	r := s.do("GET", appAPI+"/thread/"+tid+"/messages", tok, nil)
	var body struct {
		Data []struct {
			Role   string `json:"role"`
			Status string `json:"status"`
		} `json:"data"`
	}
	if json.Unmarshal(r.body, &body) != nil || len(body.Data) == 0 {
		return fmt.Sprintf("(%d %s)", r.status, r.body)
	}
	last := body.Data[len(body.Data)-1]
	return last.Role + " " + last.Status
}

// TestCrashAndRestart: threadbox is killed (kill -9) with two sandboxes
// running, one of them in the middle of a command; the next start adopts
// them (no sandbox without a live record, no running record without a
// sandbox), the interrupted turn shows as failed, the files are intact,
// the next command works, and an adopted sandbox left unused is
// idle-stopped. Then a graceful stop (SIGTERM) and a start: the same.
func TestCrashAndRestart(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, dbURL string) {
		env := childEnv(t, dbURL, map[string]string{
			"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner",
			"LEASE_TTL": "2s", "SWEEP_INTERVAL": "300ms", "SANDBOX_IDLE": "1h",
		})
		instance := env["THREADBOX_INSTANCE"]
		st := openRecords(t, env)
		ctx := context.Background()
		first := startChild(t, env)
		f := newWSFixture(t, first.server)
		kept, busy := f.tid, f.thread(t, f.admin, f.pid)
		if r := first.do("POST", appAPI+"/thread/"+kept+"/messages", f.admin, codeTurn("echo kept > /mnt/user-data/outputs/kept.txt")); r.status != 200 {
			t.Fatalf("first turn: %d %s", r.status, r.body)
		}
		// A turn whose command is in flight when the process dies.
		go post(first.base, appAPI+"/thread/"+busy+"/messages", f.admin, codeTurn("echo started > /mnt/user-data/outputs/started.txt; sleep 60"))
		waitFor(t, 30*time.Second, func() bool {
			return first.do("GET", appAPI+"/thread/"+busy+"/download-file?path=/mnt/user-data/outputs/started.txt", f.admin, nil).status == 200
		}, func() string { return "the command never started" })
		if s := lastStatus(first.server, f.admin, busy); s != "assistant running" {
			t.Fatalf("a turn in flight shows as %q", s)
		}
		rec, err := st.Containers().Container(ctx, kept)
		if err != nil || rec.State() != container.Running || rec.Backend() != "docker" || rec.Holder() == "" {
			t.Fatalf("record of a running sandbox: %+v %v", rec, err)
		}
		dead := rec.Holder()
		t0 := time.Now()
		step := func(what string) { t.Logf("%5.1fs %s", time.Since(t0).Seconds(), what) }
		first.kill()

		// The next start, after the leases of the dead process lapsed.
		env["SANDBOX_IDLE"] = "3s"
		second := startChild(t, env)
		waitFor(t, 30*time.Second, func() bool {
			b := sandboxes(t, instance)
			return len(orphans(t, st, instance, dead)) == 0 && b[kept] == "running"
		}, func() string {
			return fmt.Sprintf("orphans %v, sandboxes %v\n%s", orphans(t, st, instance, dead), sandboxes(t, instance), second.stdout.String())
		})
		// The sweep logs what it adopted once the whole sweep is done,
		// after the records above say so.
		waitFor(t, 10*time.Second, func() bool {
			out := second.stdout.String()
			return strings.Contains(out, `"swept sandboxes"`) && strings.Contains(out, kept)
		}, func() string { return "the start did not log what it adopted:\n" + second.stdout.String() })
		step("adopted")
		waitFor(t, 10*time.Second, func() bool { return lastStatus(second.server, f.admin, busy) == "assistant failed" },
			func() string { return "the interrupted turn shows as " + lastStatus(second.server, f.admin, busy) })
		for tid, file := range map[string]string{kept: "kept", busy: "started"} {
			r := second.do("GET", appAPI+"/thread/"+tid+"/download-file?path=/mnt/user-data/outputs/"+file+".txt", f.admin, nil)
			if r.status != 200 || string(r.body) != file+"\n" {
				t.Fatalf("%s after the crash: %d %q", file, r.status, r.body)
			}
		}
		// (The offline runner model runs the blocks of every user message
		// since the last complete answer: the next command goes to the other
		// thread, so the interrupted sleep is not run again.)
		r := second.do("POST", appAPI+"/thread/"+kept+"/messages", f.admin, codeTurn("cat /mnt/user-data/outputs/kept.txt; echo next"))
		if r.status != 200 || !strings.Contains(string(r.body), `kept\nnext`) {
			t.Fatalf("next command after the crash: %d %s", r.status, r.body)
		}
		step("next command")
		// The adopted sandbox nobody uses is idle-stopped; its record says so.
		waitFor(t, 20*time.Second, func() bool {
			c, _ := st.Containers().Container(ctx, busy)
			return sandboxes(t, instance)[busy] == "" && c.State() == container.Idle
		}, func() string { return fmt.Sprintf("adopted sandbox not idle-stopped: %v", sandboxes(t, instance)) })

		// A graceful stop leaves what the next start understands.
		holder := func() string { c, _ := st.Containers().Container(ctx, kept); return c.Holder() }
		before := holder()
		step("idle-stopped")
		if r := second.do("POST", appAPI+"/thread/"+kept+"/messages", f.admin, codeTurn("echo up")); r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
		second.term(t)
		step("stopped")
		if bad := orphans(t, st, instance); len(bad) != 0 {
			t.Fatalf("after SIGTERM: %v", bad)
		}
		env["SANDBOX_IDLE"] = "1h"
		third := startChild(t, env)
		// Its leases were given back: the next start adopts at once.
		waitFor(t, 5*time.Second, func() bool {
			return len(orphans(t, st, instance, before)) == 0 && sandboxes(t, instance)[kept] == "running"
		}, func() string {
			return fmt.Sprintf("after the restart: %v %v\n%s", orphans(t, st, instance, before), sandboxes(t, instance), third.stdout.String())
		})
		step("adopted again")
		r = third.do("POST", appAPI+"/thread/"+kept+"/messages", f.admin, codeTurn("cat /mnt/user-data/outputs/kept.txt"))
		if r.status != 200 || !strings.Contains(string(r.body), `kept\n`) {
			t.Fatalf("command after a graceful restart: %d %s", r.status, r.body)
		}
		// The product's API answers inside the adopted sandbox (its bridge
		// listens again: the old server let go of the agent first).
		api := `python3 -c "import os,urllib.request as u; print('api', u.urlopen(u.Request(os.environ['ANTHROPIC_BASE_URL']+'/v1/models', headers={'Authorization': 'Bearer '+os.environ['ANTHROPIC_AUTH_TOKEN']})).status)"`
		r = third.do("POST", appAPI+"/thread/"+kept+"/messages", f.admin, codeTurn(api))
		if r.status != 200 || !strings.Contains(string(r.body), `api 200`) {
			t.Fatalf("the API from inside the adopted sandbox: %d %s", r.status, r.body)
		}
		third.term(t)
	})
}

// TestSweepExpiresAndReleases: with CONTAINER_MAX_AGE a few seconds, an
// abandoned container goes with its files, disk image and loop device
// after a sweep; a thread's container stays (its files live as long as
// the thread) and, once its sandbox is idle-stopped, its disk is unmounted
// too: no loop device is left for a container not in use.
func TestSweepExpiresAndReleases(t *testing.T) {
	bin := needDocker(t)
	if os.Geteuid() != 0 {
		missing(t, "disk quotas need root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		missing(t, "disk quotas need mkfs.ext4")
	}
	env := childEnv(t, "", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner", "SANDBOX_DISK_QUOTA": "loop",
		"SANDBOX_DISK_BYTES": "67108864", "CONTAINER_MAX_AGE": "4s", "SWEEP_INTERVAL": "300ms", "SANDBOX_IDLE": "1s",
	})
	s := startChild(t, env)
	f := newWSFixture(t, s.server)
	if r := s.upload(f.admin, "abandoned", "", "a.txt", "abandoned"); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, codeTurn("echo mine > /mnt/user-data/outputs/mine.txt")); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	loops := func() string {
		out, _ := exec.Command("losetup", "-a").CombinedOutput()
		var mine []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, env["DATA_DIR"]) {
				mine = append(mine, l)
			}
		}
		return strings.Join(mine, "\n")
	}
	ents, _ := os.ReadDir(filepath.Join(env["DATA_DIR"], "containers"))
	var abandoned string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "--abandoned") {
			abandoned = e.Name()
		}
	}
	// Its quota image is loop-mounted, or was and the sweep already
	// released the mount (idle for a second on a loaded machine); either
	// way the mount is gone at the end.
	released := func() bool {
		for _, line := range strings.Split(s.stdout.String(), "\n") {
			var l struct {
				Msg      string   `json:"msg"`
				Released []string `json:"released"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "swept sandboxes" && slices.Contains(l.Released, abandoned) {
				return true
			}
		}
		return false
	}
	image := filepath.Join(env["DATA_DIR"], "disks", abandoned+".ext4")
	if _, err := os.Stat(image); abandoned == "" || err != nil || !(strings.Contains(loops(), abandoned) || released()) {
		t.Fatalf("abandoned container %q: image %v, loops %s, released %v", abandoned, err, loops(), released())
	}
	waitFor(t, 30*time.Second, func() bool {
		_, dirErr := os.Stat(filepath.Join(env["DATA_DIR"], "containers", abandoned))
		_, imgErr := os.Stat(image)
		return os.IsNotExist(dirErr) && os.IsNotExist(imgErr) && loops() == "" && len(sandboxes(t, env["THREADBOX_INSTANCE"])) == 0
	}, func() string {
		return fmt.Sprintf("left: loops %q, sandboxes %v\n%s", loops(), sandboxes(t, env["THREADBOX_INSTANCE"]), s.stdout.String())
	})
	if r := s.do("GET", "/api/gpt/v1/files?scope_id=abandoned", f.admin, nil); r.status != 404 {
		t.Errorf("abandoned container after its maximum age: %d %s", r.status, r.body)
	}
	r := s.do("GET", appAPI+"/thread/"+f.tid+"/download-file?path=/mnt/user-data/outputs/mine.txt", f.admin, nil)
	if r.status != 200 || string(r.body) != "mine\n" {
		t.Fatalf("the thread's file after the sweeps: %d %q", r.status, r.body)
	}
	s.term(t)
}

// TestTwoServersOneDatabase: two threadbox processes on one PostgreSQL
// database and one data folder: a thread's turn runs in one of them at a
// time, and a sandbox one of them runs is never booted by the other while
// it runs: it is handed over, once idle, to the one that asks for it.
func TestTwoServersOneDatabase(t *testing.T) {
	bin := needDocker(t)
	dbURL := storetest.PostgresURL(t)
	env := childEnv(t, dbURL, map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner", "SWEEP_INTERVAL": "300ms",
	})
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one := startChild(t, env)
	env2 := map[string]string{}
	for k, v := range env {
		env2[k] = v
	}
	env2["LISTEN_ADDR"] = freeAddr(t)
	two := startChild(t, env2)
	f := newWSFixture(t, one.server)
	tid := f.tid

	type answer struct {
		status int
		body   string
	}
	done := make(chan answer, 1)
	go func() {
		st, body, _ := post(one.base, appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("sleep 4; echo one"))
		done <- answer{st, body}
	}()
	waitFor(t, 30*time.Second, func() bool { return sandboxes(t, env["THREADBOX_INSTANCE"])[tid] == "running" },
		func() string { return "the first turn never booted its sandbox" })
	r := two.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("echo two"))
	if r.status != 409 || r.errorType(t) != "invalid_request_error" || !strings.Contains(string(r.body), "a turn is already running") {
		t.Fatalf("a second turn of the thread on the other server: %d %s", r.status, r.body)
	}
	a := <-done
	if a.status != 200 || !strings.Contains(a.body, `one\n`) {
		t.Fatalf("first turn: %d %s", a.status, a.body)
	}
	// The sandbox runs on the first server: the second asks for it (the
	// hand-over of docs/lifecycle.md), the first hands it over once idle, and the second boots it over
	// the same files; there is never a second sandbox of the container.
	r = two.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("echo two; ls /mnt/user-data/outputs >/dev/null && echo files-here"))
	if r.status != 200 || !strings.Contains(string(r.body), `two\n`) || strings.Contains(string(r.body), "held by another threadbox server") {
		t.Fatalf("a turn on the server not holding the sandbox: %d %s", r.status, r.body)
	}
	if n := len(sandboxes(t, env["THREADBOX_INSTANCE"])); n != 1 {
		t.Fatalf("%d sandboxes for one container", n)
	}
	// The first server's turns keep working on it.
	r = one.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("echo again"))
	if r.status != 200 || !strings.Contains(string(r.body), `again\n`) {
		t.Fatalf("turn on the holding server: %d %s", r.status, r.body)
	}
	one.term(t)
	two.term(t)
}
