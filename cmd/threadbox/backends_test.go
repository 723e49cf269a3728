package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"threadbox/infra/sandbox/local"
)

func TestSandboxBackendSetting(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		// local is never a silent fallback: it serves only when listed.
		{"unset is docker alone", map[string]string{}, []string{"docker"}},
		{"local when listed", map[string]string{"SANDBOX_BACKEND": "docker,local"}, []string{"docker", "local"}},
		{"local alone", map[string]string{"SANDBOX_BACKEND": "local"}, []string{"local"}},
		{"none", map[string]string{"SANDBOX_BACKEND": ","}, nil},
		// Backends that cannot run here are listed, never a configuration error.
		{"microVMs and providers", map[string]string{"SANDBOX_BACKEND": "microvm,firecracker,e2b,superserve,blaxel"},
			[]string{"microvm", "firecracker", "e2b", "superserve", "blaxel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["DATA_DIR"] = t.TempDir()
			cfg, err := loadConfig(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.SandboxBackend, tt.want) {
				t.Errorf("SandboxBackend %q, want %q", cfg.SandboxBackend, tt.want)
			}
		})
	}
}

// TestMicroVMAndProviderBackends: firecracker is the microvm backend with
// the Firecracker VMM, unavailable where its binary is missing; e2b,
// superserve and blaxel are unavailable, needing their provider's service;
// microvm without an accelerator says so, and a bad MICROVM_ACCEL is a
// configuration error.
func TestMicroVMAndProviderBackends(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cfg, err := loadConfig(func(k string) string {
		return map[string]string{"DATA_DIR": t.TempDir(), "THREADBOX_CACHE_DIR": t.TempDir(), "SANDBOX_BACKEND": "firecracker,microvm,e2b,superserve,blaxel"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	bs, _ := newBackends(cfg, nil, slog.New(slog.DiscardHandler))
	want := map[string]string{
		"firecracker": "firecracker: the firecracker VMM: binary firecracker not found",
		"microvm":     "microvm: QEMU (`make microvm-guest` unpacks it",
		"e2b":         "e2b: not available: needs the provider's service: an E2B account",
		"superserve":  "superserve: not available: needs the provider's service: a Superserve account",
		"blaxel":      "blaxel: not available: needs the provider's service: a Blaxel account",
	}
	if len(bs) != len(want) {
		t.Fatalf("%d backends, want %d", len(bs), len(want))
	}
	for _, b := range bs {
		err := b.Available(context.Background())
		if err == nil || !strings.HasPrefix(err.Error(), want[b.Name()]) {
			t.Errorf("%s: Available = %v, want it to start %q", b.Name(), err, want[b.Name()])
		}
	}
	if _, err := loadConfig(func(k string) string {
		return map[string]string{"DATA_DIR": t.TempDir(), "MICROVM_ACCEL": "fast"}[k]
	}); err == nil || !strings.Contains(err.Error(), "MICROVM_ACCEL") {
		t.Errorf("MICROVM_ACCEL=fast: %v, want a configuration error", err)
	}
	if _, err := loadConfig(func(k string) string {
		return map[string]string{"DATA_DIR": t.TempDir(), "MICROVM_TEMPLATE": "maybe"}[k]
	}); err == nil || !strings.Contains(err.Error(), "MICROVM_TEMPLATE") {
		t.Errorf("MICROVM_TEMPLATE=maybe: %v, want a configuration error", err)
	}
}

// scrapeToken is the METRICS_TOKEN of the servers whose readiness report
// a test reads in full.
const scrapeToken = "scrape-secret"

// logLine is one line of serve's JSON log.
type logLine struct {
	Level   string `json:"level"`
	Msg     string `json:"msg"`
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

func logLines(t *testing.T, s *server) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(s.stderr.String()), "\n") {
		if l == "" {
			continue
		}
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("log line not JSON: %q", l)
		}
		out = append(out, ll)
	}
	return out
}

// TestUnavailableBackendsSayWhy starts servers whose configured backends
// lack a prerequisite: each says why once in the start-up log (an error
// line), in GET /readyz (503 when none can serve) and in the capability
// matrix; the local backend also warns that it is a development jail.
func TestUnavailableBackendsSayWhy(t *testing.T) {
	emptyRoot := t.TempDir()
	tests := []struct {
		name       string
		env        map[string]string
		dockerHost string
		backend    string
		reason     string // in the reason of the unavailable backend
		jail       bool   // the development-jail warning is logged and shown
	}{
		{"local without root filesystem", map[string]string{"SANDBOX_BACKEND": "local", "THREADBOX_ROOTFS": emptyRoot},
			"", "local", "local: ", true},
		{"local without agent", map[string]string{"SANDBOX_BACKEND": "local", "THREADBOX_AGENT_BIN": "/nonexistent/threadbox-agent"},
			"", "local", "local: ", true},
		{"docker without daemon", map[string]string{"SANDBOX_BACKEND": "docker"},
			"unix:///nonexistent/threadbox-test/docker.sock", "docker", "docker: daemon", false},
		{"docker client cannot be made", map[string]string{"SANDBOX_BACKEND": "docker"},
			"nonsense:/x", "docker", "docker: client", false},
		{"firecracker without its binary", map[string]string{"SANDBOX_BACKEND": "firecracker"},
			"", "firecracker", "firecracker: the firecracker VMM: binary firecracker not found", false},
		{"superserve needs its provider", map[string]string{"SANDBOX_BACKEND": "superserve"},
			"", "superserve", "superserve: not available: needs the provider's service", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.dockerHost != "" {
				t.Setenv("DOCKER_HOST", tt.dockerHost)
			}
			tt.env["LOG_LEVEL"] = "warn"
			tt.env["METRICS_TOKEN"] = scrapeToken
			s := startServer(t, "", tt.env)
			var errs, warns []logLine
			for _, l := range logLines(t, s) {
				switch {
				case l.Level == "ERROR" && l.Msg == "sandbox backend unavailable":
					errs = append(errs, l)
				case l.Level == "WARN" && strings.Contains(l.Msg, "development jail"):
					warns = append(warns, l)
				}
			}
			if len(errs) != 1 || errs[0].Backend != tt.backend || !strings.Contains(errs[0].Reason, tt.reason) {
				t.Fatalf("want one error line for %s naming %q; got %+v\nlog:\n%s", tt.backend, tt.reason, errs, s.stderr.String())
			}
			reason := errs[0].Reason
			if tt.jail != (len(warns) == 1) || len(warns) > 1 {
				t.Errorf("development-jail warnings %+v, want %v (one line)", warns, tt.jail)
			}
			if tt.jail && !strings.Contains(warns[0].Msg, "not a sandbox for untrusted code") {
				t.Errorf("warning %q", warns[0].Msg)
			}

			// Everyone learns only that the server is not ready; the scrape
			// token shows why.
			if r := s.do("GET", "/readyz", "", nil); r.status != 503 || string(r.body) != `{"status":"not ready"}` {
				t.Errorf("readyz without the scrape token: %d %s", r.status, r.body)
			}
			r := s.do("GET", "/readyz", scrapeToken, nil)
			var ready struct {
				Status          string
				Database        string
				SandboxBackends []struct {
					Name      string
					Available bool
					Reason    string
				} `json:"sandbox_backends"`
			}
			if err := json.Unmarshal(r.body, &ready); err != nil || r.status != 503 || ready.Status != "not ready" || ready.Database != "ok" ||
				len(ready.SandboxBackends) != 1 || ready.SandboxBackends[0].Available || ready.SandboxBackends[0].Reason != reason {
				t.Errorf("readyz %d %s: want 503, not ready, the reason %q", r.status, r.body, reason)
			}

			tok := s.bootstrap("acme", "admin@acme.test")
			r = s.do("GET", "/api/gpt/v1/sandbox/backends", tok, nil)
			var matrix struct {
				Data []struct {
					Name      string
					Available bool
					Reason    string
					Warning   string
				}
			}
			if err := json.Unmarshal(r.body, &matrix); err != nil || r.status != 200 || len(matrix.Data) != 1 {
				t.Fatalf("matrix %d %s", r.status, r.body)
			}
			row := matrix.Data[0]
			if row.Name != tt.backend || row.Available || row.Reason != reason {
				t.Errorf("matrix row %+v: want %s unavailable with %q", row, tt.backend, reason)
			}
			if tt.jail != strings.Contains(row.Warning, "development jail") {
				t.Errorf("matrix row warning %q, want development jail: %v", row.Warning, tt.jail)
			}
		})
	}
}

// TestReadyWithoutSandboxBackends: with code execution switched off (no
// backend configured) the server is ready and logs no backend error.
func TestReadyWithoutSandboxBackends(t *testing.T) {
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": ",", "LOG_LEVEL": "warn", "METRICS_TOKEN": scrapeToken})
	r := s.do("GET", "/readyz", scrapeToken, nil)
	if r.status != 200 || string(r.body) != `{"status":"ready","database":"ok","blob_store":"ok","sandbox_backends":[]}` {
		t.Errorf("readyz %d %s", r.status, r.body)
	}
	for _, l := range logLines(t, s) {
		if l.Level == "ERROR" {
			t.Errorf("error logged: %+v", l)
		}
	}
}

// TestLocalBackendAsRootPrivateDataDir runs commands in the local backend
// with threadbox as root and a DATA_DIR it creates itself (mode 0700) under
// a 0700 folder: the jail's user (uid 1000) cannot traverse either, yet the
// jail reaches its folders, and the operator's folders keep their modes.
func TestLocalBackendAsRootPrivateDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "this case needs root (threadbox as root, jails as uid 1000)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		missing(t, "bubblewrap is missing: %v", err)
	}
	if local.FindRootFS(os.Getenv) == "" {
		missing(t, "no sandbox root filesystem (sandbox/build-offline.sh --rootfs-only)")
	}
	bin := needAgent(t)
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(private, "data") // threadbox creates it
	s := startServer(t, "", map[string]string{
		"SANDBOX_BACKEND": "local", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner", "DATA_DIR": data,
	})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	prompt := "```bash\nid -u\necho kept > notes.txt && cat notes.txt\nls /mnt/user-data\necho out > $OUTPUT_DIR/r.txt\n```\n"
	msg, err := cl.Messages.New(context.Background(), msgParams("", userText(prompt), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) < 3 || msg.Content[2].Type != "bash_code_execution_tool_result" ||
		msg.Content[2].AsBashCodeExecutionToolResult().Content.Type != "bash_code_execution_result" {
		t.Fatalf("the command did not run: %v\nlog:\n%s", msg.Content, s.stderr.String())
	}
	_, r := bashResult(t, msg.Content, 1) // after the runner's opening text
	if r.Stdout != "1000\nkept\noutputs\nuploads\n" || r.ReturnCode != 0 {
		t.Fatalf("in the jail: stdout %q stderr %q code %d", r.Stdout, r.Stderr, r.ReturnCode)
	}
	if len(r.Content) != 1 {
		t.Errorf("output files %v, want r.txt", r.Content)
	}
	for dir, want := range map[string]os.FileMode{private: 0o700, data: 0o700} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %o", dir, fi.Mode(), err, want)
		}
	}
	if r := s.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Errorf("readyz %d %s", r.status, r.body)
	}
}
