package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/microvm"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/store/storetest"
)

// TestSandboxToolsMicroVM runs a Messages API turn's code tools in a
// microVM: a Python session keeps its state across calls, and a command in
// the VM reaches threadbox's Messages API through the sandbox's API bridge
// with its own token; booted for the turn, and claimed from the warm pool
// (a warm VM restored from the template). Under emulation a VM boots in seconds, so this runs
// with the whole microvm suite (`make test-microvm`, MICROVM_CONFORMANCE=full)
// rather than in `make test`.
func TestSandboxToolsMicroVM(t *testing.T) {
	if os.Getenv("MICROVM_CONFORMANCE") != "full" {
		t.Skip("runs with `make test-microvm` (MICROVM_CONFORMANCE=full): an emulated VM boots in seconds")
	}
	bin := needAgent(t)
	if os.Geteuid() != 0 {
		missing(t, "the microvm backend needs root")
	}
	needMicroVM(t)
	accel := microVMAccel()
	for _, pool := range []string{"0", "1"} {
		t.Run("warm pool "+pool, func(t *testing.T) {
			s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "microvm", "MICROVM_ACCEL": accel,
				"THREADBOX_AGENT_BIN": bin, "SANDBOX_MEMORY_BYTES": "536870912", "SANDBOX_WARM_POOL": pool, "LOG_LEVEL": "info"})
			tok := s.bootstrap("acme", "admin@acme.test")
			if pool == "1" {
				// The turn's sandbox is the warm VM, restored from the
				// template, once the owner counts it ready.
				waitFor(t, 3*time.Minute, func() bool {
					r := s.do("GET", "/api/gpt/v1/sandbox/backends", tok, nil)
					rows, _ := r.json(t)["data"].([]any)
					if len(rows) != 1 {
						return false
					}
					wp, _ := rows[0].(map[string]any)["warm_pool"].(map[string]any)
					return wp["ready"] == 1.0
				}, func() string { return "no warm VM ready" })
			}
			cl := msgClient(s, tok)
			fake.Push(steps(
				call("repl_execute", map[string]any{"code": "n = 5"}),
				call("repl_execute", map[string]any{"code": "n * 2"}),
				call("sandbox_bash", map[string]any{"command": `uname -r; curl -sS -m 60 -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" -H 'content-type: application/json' -d '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"`}),
			), textStep("from inside the VM"), textStep("ok"))
			calls, _ := sandboxTurn(t, cl, "vm1")
			if calls[1].str("value") != "10" {
				t.Fatalf("repl state: %v / %v", calls[0].Content, calls[1].Content)
			}
			out := calls[2].str("stdout")
			if !strings.Contains(out, "from inside the VM") {
				t.Fatalf("curl from the VM: %q (stderr %q)", out, calls[2].str("stderr"))
			}
			t.Logf("in the VM: %q", out)
			if host, _ := exec.Command("uname", "-r").Output(); strings.HasPrefix(out, strings.TrimSpace(string(host))+"\n") {
				t.Errorf("the VM runs the host's kernel %q", host)
			}
			if logs := s.stdout.String() + s.stderr.String(); pool == "1" && (!strings.Contains(logs, "warm sandbox claimed") || !strings.Contains(logs, `"from_template":true`)) {
				t.Errorf("the turn's sandbox was not a warm VM restored from the template; the log:\n%s", logs)
			}
		})
	}
}

// needMicroVM fails or skips the test unless the microvm backend can boot
// VMs here: root, the sandbox root filesystem and the guest with its QEMU.
func needMicroVM(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "the microvm backend needs root")
	}
	if local.FindRootFS(os.Getenv) == "" || microvm.GuestQEMU(microvm.FindGuest(os.Getenv)) == "" {
		missing(t, "no sandbox root filesystem (make sandbox-image) or microVM guest with its QEMU (make microvm-guest)")
	}
}

// microVMAccel is the tests' accelerator: MICROVM_ACCEL, else emulation.
func microVMAccel() string {
	if a := os.Getenv("MICROVM_ACCEL"); a != "" {
		return a
	}
	return microvm.AccelTCG
}

// TestMicroVMSandboxSurvivesRestart: a graceful shutdown checkpoints the
// microVM it holds (its processes would end with the process), and the
// next request after the restart restores it from its archive in the blob
// store (this host's copy removed, as on another host): a background
// process an earlier bash call started still runs, /tmp is kept, and the
// guest's clock is the host's.
func TestMicroVMSandboxSurvivesRestart(t *testing.T) {
	bin := needAgent(t)
	needMicroVM(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "microvm", "MICROVM_ACCEL": microVMAccel(),
		"THREADBOX_AGENT_BIN": bin, "SANDBOX_MEMORY_BYTES": "536870912", "SANDBOX_WARM_POOL": "0", "LOG_LEVEL": "info"})
	tok := s.bootstrap("acme", "admin@acme.test")
	r := bashTurn(t, s, fake, tok, "durable", "setsid sh -c 'echo $$ > /tmp/bg.pid; while :; do sleep 1; done' >/dev/null 2>&1 </dev/null & "+
		"echo kept > /tmp/kept; for i in $(seq 100); do test -s /tmp/bg.pid && break; sleep 0.1; done; cat /tmp/bg.pid")
	pid := strings.TrimSpace(r.Stdout)
	if r.ReturnCode != 0 || pid == "" {
		t.Fatalf("starting the background process: %+v", r)
	}
	s.stop()
	if a := archivesIn(s.dataDir); len(a) != 1 {
		t.Fatalf("checkpoint archives after the graceful shutdown: %v, want one; the log:\n%s", a, s.stdout.String()+s.stderr.String())
	}
	if err := os.RemoveAll(filepath.Join(s.dataDir, "checkpoints")); err != nil {
		t.Fatal(err)
	}
	env := maps.Clone(s.env)
	env["LISTEN_ADDR"] = freeAddr(t)
	s2 := &server{t: t, base: "http://" + env["LISTEN_ADDR"], dataDir: s.dataDir, env: env, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	s2.run(t, []string{"serve"}, 20*time.Second)
	before := time.Now()
	r = bashTurn(t, s2, fake, tok, "durable", "cat /tmp/kept; kill -0 "+pid+" && echo alive; date +%s%N")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 3 || lines[0] != "kept" || lines[1] != "alive" || r.Stderr != "" {
		t.Fatalf("after the restart: %+v, want /tmp and the background process back; the log:\n%s", r, s2.stdout.String()+s2.stderr.String())
	}
	var guest int64
	if _, err := fmt.Sscan(lines[2], &guest); err != nil {
		t.Fatalf("date: %q", lines[2])
	}
	if off := sandboxtest.ClockOff(before, time.Now(), guest); off < -5*time.Second || off > 5*time.Second {
		t.Errorf("after the restore the guest's clock is %v off the host's", off)
	}
	if logs := s2.stdout.String() + s2.stderr.String(); !strings.Contains(logs, "sandbox restored from its checkpoint") {
		t.Errorf("the sandbox was not restored from its checkpoint; the log:\n%s", logs)
	}
}

// TestMicroVMHandOver: two threadbox processes on one PostgreSQL database
// and one data folder, under the microvm backend. A thread's VM runs on
// the first; a turn on the second asks for it, the first checkpoints the
// VM as it hands it over, and the second restores it: a background
// process and /tmp are there, and no note of a fresh start.
func TestMicroVMHandOver(t *testing.T) {
	bin := needAgent(t)
	needMicroVM(t)
	dbURL := storetest.PostgresURL(t)
	env := childEnv(t, dbURL, map[string]string{
		"SANDBOX_BACKEND": "microvm", "MICROVM_ACCEL": microVMAccel(), "THREADBOX_AGENT_BIN": bin,
		"SANDBOX_MEMORY_BYTES": "536870912", "SANDBOX_WARM_POOL": "0", "MODEL_PROVIDER": "runner",
		"SWEEP_INTERVAL": "300ms", "LOG_LEVEL": "info",
	})
	one, two := handOver(t, env)
	if logs := two.stdout.String(); !strings.Contains(logs, "sandbox restored from its checkpoint") {
		t.Errorf("the second server did not restore the VM from its checkpoint; its log:\n%s", logs)
	}
	one.term(t)
	two.term(t)
}
