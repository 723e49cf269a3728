package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/microvm"
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
	if local.FindRootFS(os.Getenv) == "" || microvm.GuestQEMU(microvm.FindGuest(os.Getenv)) == "" {
		missing(t, "no sandbox root filesystem (make sandbox-image) or microVM guest with its QEMU (make microvm-guest)")
	}
	accel := os.Getenv("MICROVM_ACCEL")
	if accel == "" {
		accel = microvm.AccelTCG
	}
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
