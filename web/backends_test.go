package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/backends"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// stubBackend is a sandbox.Backend that names itself and answers what the
// matrix asks; it calls nothing else.
type stubBackend struct {
	sandbox.Backend
	name       string
	err        error
	warning    string
	checkpoint sandbox.CheckpointSupport
}

func (b stubBackend) Warning() string                 { return b.warning }
func (b stubBackend) Name() string                    { return b.name }
func (b stubBackend) Available(context.Context) error { return b.err }
func (b stubBackend) Isolation() string               { return backends.IsolationProcessJail }
func (b stubBackend) EnforcedLimits(context.Context) ([]string, string) {
	return []string{"memory", "pids"}, "cgroup v1"
}
func (b stubBackend) Checkpoints(context.Context) sandbox.CheckpointSupport { return b.checkpoint }

func TestSandboxBackendsHandler(t *testing.T) {
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Backends: backends.New([]sandbox.Backend{
		stubBackend{name: "docker", err: errors.New("docker: daemon: down"), checkpoint: sandbox.FilesOnly("files only: no CRIU")},
		stubBackend{name: "local", warning: "development jail: not a sandbox for untrusted code",
			checkpoint: sandbox.CheckpointSupport{Supported: true, Mechanism: "gVisor checkpoints"}},
	})}}
	tests := []struct {
		name   string
		p      user.Principal
		status int
		errTyp string
	}{
		{"admin", user.Principal{UserID: "u", OrgID: "o", Role: user.Admin}, 200, ""},
		{"member", user.Principal{UserID: "u", OrgID: "o", Role: user.Member}, 403, "permission_error"},
		{"sandbox token of an admin", user.Principal{UserID: "u", OrgID: "o", Role: user.Admin, Kind: user.SandboxToken}, 403, "permission_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
			app.Get("/b", func(c *fiber.Ctx) error { c.Locals(principalKey, tt.p); return c.Next() }, srv.sandboxBackends)
			resp, err := app.Test(httptest.NewRequest("GET", "/b", nil))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d body %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.errTyp != "" {
				var e struct {
					Type  string                `json:"type"`
					Error struct{ Type string } `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != tt.errTyp {
					t.Errorf("body %s, want a %s envelope", body, tt.errTyp)
				}
				return
			}
			var got struct {
				Data []map[string]any `json:"data"`
			}
			if err := json.Unmarshal(body, &got); err != nil || len(got.Data) != 2 {
				t.Fatalf("body %s: %v", body, err)
			}
			d, l := got.Data[0], got.Data[1]
			if d["name"] != "docker" || d["primary"] != true || d["available"] != false || d["reason"] != "docker: daemon: down" {
				t.Errorf("docker row %v", d)
			}
			if l["name"] != "local" || l["available"] != true || l["isolation"] != "process jail" || l["limit_mechanism"] != "cgroup v1" || len(l["limits"].([]any)) != 2 {
				t.Errorf("local row %v", l)
			}
			if _, ok := l["reason"]; ok {
				t.Errorf("available backend has a reason: %v", l)
			}
			if l["warning"] != "development jail: not a sandbox for untrusted code" {
				t.Errorf("local row %v: want its warning", l)
			}
			if _, ok := d["warning"]; ok {
				t.Errorf("docker row %v has a warning", d)
			}
			if c, _ := d["checkpoint"].(map[string]any); c["supported"] != false || c["reason"] != "files only: no CRIU" || c["mechanism"] != nil {
				t.Errorf("docker row %v: want files only with the reason", d)
			}
			if c, _ := l["checkpoint"].(map[string]any); c["supported"] != true || c["mechanism"] != "gVisor checkpoints" || c["reason"] != nil {
				t.Errorf("local row %v: want checkpoints with the mechanism", l)
			}
		})
	}
}

// TestReadyz: the probe's answer for everyone is the status alone; a
// caller with the scrape token gets what each check found and why one
// failed; a wrong token is anyone.
func TestReadyz(t *testing.T) {
	dbDown := func(context.Context) error { return errors.New("dial tcp: connection refused") }
	dbUp := func(context.Context) error { return nil }
	noImage := errors.New("docker: image threadbox-sandbox:latest (build it with `make sandbox-image`): no such image")
	tests := []struct {
		name     string
		ready    func(context.Context) error
		backends []sandbox.Backend
		status   int
		body     string // for the scrape token
	}{
		{"database and a backend up", dbUp, []sandbox.Backend{stubBackend{name: "docker"}}, 200,
			`{"status":"ready","database":"ok","sandbox_backends":[{"name":"docker","available":true}]}`},
		{"no backend configured: code execution off", dbUp, nil, 200,
			`{"status":"ready","database":"ok","sandbox_backends":[]}`},
		{"the only backend down", dbUp, []sandbox.Backend{stubBackend{name: "docker", err: noImage}}, 503,
			`{"status":"not ready","database":"ok","sandbox_backends":[{"name":"docker","available":false,"reason":` + quote(noImage.Error()) + `}]}`},
		{"primary down, fallback up", dbUp, []sandbox.Backend{stubBackend{name: "docker", err: noImage}, stubBackend{name: "local"}}, 200,
			`{"status":"ready","database":"ok","sandbox_backends":[{"name":"docker","available":false,"reason":` + quote(noImage.Error()) + `},{"name":"local","available":true}]}`},
		{"database down", dbDown, []sandbox.Backend{stubBackend{name: "docker"}}, 503,
			`{"status":"not ready","database":"unreachable or not migrated","sandbox_backends":[{"name":"docker","available":true}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := Services{Ready: tt.ready}
			if tt.backends != nil {
				svc.Backends = backends.New(tt.backends)
			}
			srv := New(svc, slog.New(slog.DiscardHandler), Options{MetricsToken: "scrape-secret"})
			public := `{"status":"ready"}`
			if tt.status != 200 {
				public = `{"status":"not ready"}`
			}
			for _, c := range []struct{ auth, body string }{
				{"", public},
				{"Bearer a-wrong-token", public},
				{"Bearer scrape-secret", tt.body},
			} {
				req := httptest.NewRequest("GET", "/readyz", nil)
				if c.auth != "" {
					req.Header.Set("Authorization", c.auth)
				}
				resp, err := srv.App().Test(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tt.status || string(body) != c.body {
					t.Errorf("with %q: got %d %s\nwant %d %s", c.auth, resp.StatusCode, body, tt.status, c.body)
				}
			}
		})
	}
}

// countingBackend counts its Available calls; while gate is open (not
// nil and not closed) each call waits for it.
type countingBackend struct {
	sandbox.Backend
	calls atomic.Int64
	gate  chan struct{}
}

func (b *countingBackend) Name() string { return "docker" }
func (b *countingBackend) Available(context.Context) error {
	b.calls.Add(1)
	if b.gate != nil {
		<-b.gate
	}
	return nil
}

// TestReadyzProbesOncePerInterval: a flood of GET /readyz asks the
// backends once per interval, requests that arrive during a probe share
// its result, and a probe older than the interval is run again.
func TestReadyzProbesOncePerInterval(t *testing.T) {
	b := &countingBackend{gate: make(chan struct{})}
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Backends: backends.New([]sandbox.Backend{b})}}
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	app := fiber.New()
	app.Get("/readyz", newReadiness(srv, time.Second, clock).serve)
	get := func() int {
		resp, err := app.Test(httptest.NewRequest("GET", "/readyz", nil), -1)
		if err != nil {
			t.Error(err)
			return 0
		}
		return resp.StatusCode
	}

	// 20 requests at once while the first probe waits on the backend.
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Add(1)
		go func() { defer wg.Done(); statuses[i] = get() }()
	}
	for b.calls.Load() == 0 {
		runtime.Gosched()
	}
	close(b.gate)
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Errorf("request %d: %d", i, st)
		}
	}
	for range 50 {
		if st := get(); st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("the backend was asked %d times for 70 requests within one interval, want once", n)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	get()
	get()
	if n := b.calls.Load(); n != 2 {
		t.Fatalf("after the interval the backend was asked %d times in all, want 2", n)
	}
}

// quote returns s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
