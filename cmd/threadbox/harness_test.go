package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/sandbox/docker"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/store/storetest"
	"threadbox/web"
	"threadbox/web/openapitest"
)

// server is a threadbox started through run() for one test.
type server struct {
	t       *testing.T
	base    string
	dataDir string
	env     map[string]string
	stdout  *syncBuffer
	stderr  *syncBuffer // the JSON log
	stop    func()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// databases lists the databases every API test runs on.
func databases(t *testing.T, fn func(t *testing.T, dbURL string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, "") })
	t.Run("postgres", func(t *testing.T) { fn(t, storetest.PostgresURL(t)) })
}

func startServer(t *testing.T, dbURL string, extra map[string]string) *server {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	env := map[string]string{
		"LISTEN_ADDR":        addr,
		"DATA_DIR":           filepath.Join(dir, "data"),
		"DATABASE_URL":       dbURL,
		"SANDBOX_BACKEND":    "local",
		"LOG_LEVEL":          "error",
		"SANDBOX_DISK_QUOTA": "none",
		// Tests count the sandboxes of their instance: the warm pool's
		// (on by default) would be among them. Its own tests turn it on
		// (TestWarmPoolServesNewThreads).
		"SANDBOX_WARM_POOL": "0",
	}
	// Where the sandbox image's root filesystem is: the test process's own
	// settings, so a server finds what the tests' checks found.
	for _, k := range []string{"THREADBOX_CACHE_DIR", "THREADBOX_ROOTFS"} {
		if v := os.Getenv(k); v != "" {
			env[k] = v
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	if env["THREADBOX_INSTANCE"] == "" {
		// Its own instance (the same for a restart on the same data), so
		// that a test server never adopts or removes the sandboxes of a
		// threadbox running on the machine; its sandboxes go at the end.
		sum := sha256.Sum256([]byte(env["DATA_DIR"]))
		env["THREADBOX_INSTANCE"] = "test" + hex.EncodeToString(sum[:6])
	}
	instance := env["THREADBOX_INSTANCE"]
	pool := filepath.Join(env["DATA_DIR"], "pool")
	sandboxtest.Cleanup(t, func() { _ = docker.RemoveInstance(context.Background(), instance, pool) }) // without a daemon there are none
	s := &server{t: t, base: "http://" + addr, dataDir: env["DATA_DIR"], env: env, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	s.run(t, []string{"serve"}, 20*time.Second)
	return s
}

// run runs the command args of s's binary until the test ends (s.stop
// ends it earlier) and waits until it answers /healthz, at most ready.
func (s *server) run(t *testing.T, args []string, ready time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, s.getenv, s.stdout, s.stderr) }()
	var once sync.Once // a test may stop the server before the cleanup does
	s.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s returned %v", args[0], err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s of cancel", args[0])
			}
		})
	}
	sandboxtest.Cleanup(t, s.stop)
	deadline := time.Now().Add(ready)
	for {
		resp, err := http.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case err := <-done:
			t.Fatalf("%s exited: %v\n%s", args[0], err, s.stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not come up within %s:\n%s", ready, s.stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// modelServer starts a threadbox whose model is a scripted fake upstream
// in provider's wire format (closed when the test ends); settings add to
// the model settings or override them.
func modelServer(t *testing.T, dbURL, provider string, settings map[string]string) (*server, *fakeupstream.Server) {
	t.Helper()
	fake := fakeupstream.New()
	t.Cleanup(fake.Close)
	env := map[string]string{"MODEL_PROVIDER": provider, "MODEL_BASE_URL": fake.URL(), "MODEL_NAME": "fake-model"}
	maps.Copy(env, settings)
	return startServer(t, dbURL, env), fake
}

func (s *server) getenv(k string) string { return s.env[k] }

// cli runs a threadbox subcommand against the same data and database.
func (s *server) cli(args ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), args, s.getenv, &out, io.Discard)
	return strings.TrimSpace(out.String()), err
}

// bootstrap creates an org with an admin and returns the admin's token.
func (s *server) bootstrap(org, email string) string {
	s.t.Helper()
	tok, err := s.cli("admin", "bootstrap", "--org", org, "--email", email)
	if err != nil {
		s.t.Fatalf("bootstrap: %v", err)
	}
	return tok
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("not JSON (%d): %s", r.status, r.body)
	}
	return m
}

// errorType returns error.type of an error envelope, checking its shape.
func (r response) errorType(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	e, _ := m["error"].(map[string]any)
	if m["type"] != "error" || e == nil || e["message"] == "" {
		t.Fatalf("not an error envelope: %s", r.body)
	}
	return e["type"].(string)
}

func (s *server) do(method, path, token string, body any, hdr ...string) response {
	s.t.Helper()
	var (
		rd      io.Reader
		reqBody []byte
	)
	switch b := body.(type) {
	case nil:
	case string:
		reqBody = []byte(b)
	case []byte:
		reqBody = b
	default:
		reqBody, _ = json.Marshal(b)
	}
	if body != nil {
		rd = bytes.NewReader(reqBody)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	checkOpenAPI(s.t, req, reqBody, resp, b)
	return response{resp.StatusCode, resp.Header, b}
}

// openAPIDoc is the validator of the API document (web/openapi.json),
// loaded once for every test.
var openAPIDoc = sync.OnceValues(func() (*openapitest.Validator, error) {
	return openapitest.Load(web.OpenAPIDocument())
})

// checkOpenAPI checks one exchange against the API document: every request
// s.do sends and the official SDK clients of msgClient send is checked,
// with its answer, by web/openapitest's rule (docs/openapi.md): a request
// the document refuses must be refused by the server, and every answer
// must have a documented status and match its schema; event streams and
// file bytes by status and content type only. A mismatch fails the test.
// THREADBOX_TEST_OPENAPI=off switches the check off (to tell a document
// problem from a server one). respBody is nil when the body was not read.
func checkOpenAPI(t *testing.T, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	if os.Getenv("THREADBOX_TEST_OPENAPI") == "off" {
		return
	}
	v, err := openAPIDoc()
	if err != nil {
		t.Errorf("openapi: %v", err)
		return
	}
	if err := v.Check(context.Background(), req, reqBody, resp, respBody); err != nil {
		t.Errorf("openapi: %v", err)
	}
	if file := os.Getenv("THREADBOX_TEST_OPENAPI_OPS"); file != "" {
		recordOperation(t, v, file, req.Method, req.URL.EscapedPath(), resp.StatusCode)
	}
}

// opsMu serialises recordOperation's appends.
var opsMu sync.Mutex

// recordOperation appends "operationId status" to file for a documented
// exchange: with THREADBOX_TEST_OPENAPI_OPS set, a run lists the
// operations and statuses its tests exercised (docs/openapi.md).
func recordOperation(t *testing.T, v *openapitest.Validator, file, method, path string, status int) {
	t.Helper()
	route, _, err := v.Find(method, path)
	if err != nil {
		return
	}
	opsMu.Lock()
	defer opsMu.Unlock()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("openapi: record the operation: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s %d\n", route.Operation.OperationID, method, status); err != nil {
		t.Errorf("openapi: record the operation: %v", err)
	}
}

// openAPITransport checks each exchange of an http.Client against the API
// document (checkOpenAPI): the transport of the official SDK's clients in
// the tests. An event stream is checked by its status and content type
// and passed on unread.
type openAPITransport struct {
	t    *testing.T
	next http.RoundTripper
}

// RoundTrip sends req and checks the exchange.
func (o openAPITransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("openapi transport: read the request body: %w", err)
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := o.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	var respBody []byte
	if req.Method != http.MethodHead && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		respBody, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("openapi transport: read the response body: %w", err)
		}
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
	}
	checkOpenAPI(o.t, req, reqBody, resp, respBody)
	return resp, nil
}

// missing reports a missing service: a failure under CI=true, where every
// service the tests need is installed by .ci/run, and a skip elsewhere.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// needDocker returns the agent binary for a docker-backed server, after
// checking that Docker answers and the sandbox image is built.
func needDocker(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", "threadbox-sandbox:latest").CombinedOutput(); err != nil {
		missing(t, "docker or the image threadbox-sandbox:latest is missing (make sandbox-image): %v %s", err, out)
	}
	return needAgent(t)
}

// needAgent returns the absolute path of the agent binary:
// $THREADBOX_AGENT_BIN, else the checkout's bin/threadbox-agent.
func needAgent(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("THREADBOX_AGENT_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "threadbox-agent")
	}
	abs, err := filepath.Abs(bin)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		missing(t, "agent binary missing (make agent): %v", err)
	}
	return abs
}
