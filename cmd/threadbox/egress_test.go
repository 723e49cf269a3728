package main

import (
	"archive/zip"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"golang.org/x/net/dns/dnsmessage"

	"threadbox/infra/llm/fakeupstream"
	"threadbox/infra/sandbox/local"
)

// TestEgressPolicyAndLedgerAPI: the egress switch and allowlist are set by
// admins through the feature policy and audited; a bad pattern refuses
// the whole patch; the ledger is for admins, with its filters checked.
func TestEgressPolicyAndLedgerAPI(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		r := s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"egress": map[string]any{"enabled": true, "allow": []string{"PyPI.example", "*.git.example:443"}}})
		var v struct {
			Egress struct {
				Enabled bool     `json:"enabled"`
				Allow   []string `json:"allow"`
			} `json:"egress"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &v) != nil || !v.Egress.Enabled || strings.Join(v.Egress.Allow, " ") != "pypi.example *.git.example:443" {
			t.Fatalf("egress on: %d %s", r.status, r.body)
		}
		for _, bad := range []any{
			map[string]any{"egress": map[string]any{"allow": []string{"ok.example", "*.com"}}},
			map[string]any{"egress": map[string]any{"allow": []string{"http://x.example/"}}},
			map[string]any{"egress": map[string]any{"allowed": []string{"x.example"}}},
		} {
			if r := s.do("PATCH", "/api/v1/app/org/features", a, bad); r.status != 400 {
				t.Fatalf("%v: %d %s", bad, r.status, r.body)
			}
		}
		r = s.do("GET", "/api/v1/app/org/audit", a, nil)
		if r.status != 200 || !strings.Contains(string(r.body), `"egress":{"enabled":true,"allow":["pypi.example","*.git.example:443"]}`) || !strings.Contains(string(r.body), `"egress":{"enabled":false,"allow":[]}`) {
			t.Fatalf("audit log lacks the egress change: %s", r.body)
		}
		r = s.do("GET", "/api/v1/app/org/egress?allowed=false&limit=10", a, nil)
		if r.status != 200 || string(r.body) != `{"data":[],"has_more":false}` {
			t.Fatalf("empty ledger: %d %s", r.status, r.body)
		}
		for _, q := range []string{"allowed=maybe", "limit=0", "after=yesterday", "cursor=zz", "format=xml"} {
			if r := s.do("GET", "/api/v1/app/org/egress?"+q, a, nil); r.status != 400 {
				t.Fatalf("%s: %d", q, r.status)
			}
		}
		if r := s.do("GET", "/api/v1/app/org/egress?format=csv", a, nil); r.status != 200 || !strings.HasPrefix(string(r.body), "id,at,user_id,thread_id,container_id,host,port,address,allowed,rule,reason,bytes_up,bytes_down,duration_ms") {
			t.Fatalf("csv: %d %s", r.status, r.body)
		}
		r = s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": "m@acme.test", "role": "member"})
		if r.status != 201 && r.status != 200 {
			t.Fatalf("member: %d %s", r.status, r.body)
		}
		m, err := s.cli("token", "create", "--email", "m@acme.test", "--name", "m", "--ttl", "1h")
		if err != nil {
			t.Fatal(err)
		}
		if r := s.do("GET", "/api/v1/app/org/egress", m, nil); r.status != 403 {
			t.Fatalf("a member read the ledger: %d", r.status)
		}
		if r := s.do("PATCH", "/api/v1/app/org/features", m, map[string]any{"egress": map[string]any{"enabled": false}}); r.status != 403 {
			t.Fatalf("a member switched egress: %d", r.status)
		}
	})
}

// egressWorld is what the sandbox reaches through the proxy in the egress
// tests, all on the host's loopback: a DNS server for the proxy, an HTTPS
// server with a test CA holding a simple package index (one wheel) and a
// git HTTP backend, and a plain HTTP server.
type egressWorld struct {
	dns       string // host:port
	tlsPort   string
	plainPort string
	caPEM     string
	caFile    string // caPEM in a file, for EGRESS_UPSTREAM_ROOTS

	mu    sync.Mutex
	auth  []string            // the Authorization headers /api/echo was sent
	alpns map[string][]string // the ALPN protocols each TLS name was last offered
}

// saw reports whether /api/echo was sent the Authorization value v.
func (w *egressWorld) saw(v string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.auth, v)
}

func (w *egressWorld) alpn(name string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.alpns[name]
}

func newEgressWorld(t *testing.T) *egressWorld {
	t.Helper()
	w := &egressWorld{alpns: map[string][]string{}}
	w.dns = serveTestDNS(t, map[string][]net.IP{
		"api.test.":    {net.IPv4(127, 0, 0, 1)},
		"docs.test.":   {net.IPv4(127, 0, 0, 1)},
		"pypi.test.":   {net.IPv4(127, 0, 0, 1)},
		"git.test.":    {net.IPv4(127, 0, 0, 1)},
		"plain.test.":  {net.IPv4(127, 0, 0, 1)},
		"other.test.":  {net.IPv4(127, 0, 0, 1)},
		"rebind.test.": {net.IPv4(127, 0, 0, 1), net.IPv4(169, 254, 169, 254)},
	})
	caPEM, cert := testCA(t, "pypi.test", "git.test", "other.test", "rebind.test", "api.test", "docs.test")
	w.caPEM = caPEM
	w.caFile = filepath.Join(t.TempDir(), "upstream-roots.pem")
	if err := os.WriteFile(w.caFile, []byte(caPEM), 0o644); err != nil {
		t.Fatal(err)
	}

	wheel, wheelSum := testWheel(t)
	repos := testGitRepo(t)
	gitExec, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		missing(t, "git is missing: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/tbegress-probe/", func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, `<!DOCTYPE html><html><body><a href="/files/tbegress_probe-1.0-py3-none-any.whl#sha256=%s">tbegress_probe-1.0-py3-none-any.whl</a></body></html>`, wheelSum)
	})
	mux.HandleFunc("/files/tbegress_probe-1.0-py3-none-any.whl", func(rw http.ResponseWriter, r *http.Request) {
		rw.Write(wheel)
	})
	mux.HandleFunc("/api/echo", func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.auth = append(w.auth, r.Header.Get("Authorization"))
		w.mu.Unlock()
		io.WriteString(rw, "api ok")
	})
	mux.HandleFunc("/doc.html", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(rw, "<html><head><title>Release notes</title><script>ignored()</script></head><body><h1>Release 7</h1><p>The build number is 90417.</p></body></html>")
	})
	mux.HandleFunc("/hello", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "hello") })
	mux.Handle("/git/", &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(gitExec)), "git-http-backend"), Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"},
	})
	tlsSrv := httptest.NewUnstartedServer(mux)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		w.mu.Lock()
		w.alpns[h.ServerName] = slices.Clone(h.SupportedProtos)
		w.mu.Unlock()
		return nil, nil
	}}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "plain hello")
	}))
	t.Cleanup(plain.Close)
	_, w.tlsPort, _ = net.SplitHostPort(tlsSrv.Listener.Addr().String())
	_, w.plainPort, _ = net.SplitHostPort(plain.Listener.Addr().String())
	return w
}

// TestEgressThroughProxy runs egressThroughProxy in real sandboxes of the
// Docker backend (runc and gVisor) and of the local jail;
// TestKubernetesEgressThroughProxy runs it on the test cluster.
func TestEgressThroughProxy(t *testing.T) {
	w := newEgressWorld(t)
	backends := []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"docker-runc", func(t *testing.T) map[string]string {
			return map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": needDocker(t)}
		}},
		{"docker-runsc", func(t *testing.T) map[string]string {
			bin := needDocker(t)
			if _, err := exec.LookPath("runsc"); err != nil {
				missing(t, "runsc is not installed: %v", err)
			}
			return map[string]string{"SANDBOX_BACKEND": "docker", "SANDBOX_RUNTIME": "runsc", "THREADBOX_AGENT_BIN": bin}
		}},
		{"local", func(t *testing.T) map[string]string {
			bin := needAgent(t)
			if _, err := exec.LookPath("bwrap"); err != nil {
				missing(t, "bubblewrap is missing: %v", err)
			}
			if local.FindRootFS(os.Getenv) == "" {
				missing(t, "no sandbox root filesystem (make sandbox-image)")
			}
			return map[string]string{"SANDBOX_BACKEND": "local", "THREADBOX_AGENT_BIN": bin}
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			egressThroughProxy(t, w, b.name, b.env(t))
		})
	}
}

// TestKubernetesEgressThroughProxy is TestEgressThroughProxy on the test
// cluster.
func TestKubernetesEgressThroughProxy(t *testing.T) {
	w := newEgressWorld(t)
	kubeconfig, ns, _ := needKubernetes(t)
	egressThroughProxy(t, w, "kubernetes", map[string]string{"SANDBOX_BACKEND": "kubernetes", "KUBECONFIG": kubeconfig, "K8S_NAMESPACE": ns, "K8S_NETWORK_POLICY": "unenforced",
		"K8S_HOST_PATH_VOLUMES": "true", "K8S_IMAGE_PULL_POLICY": "Never", "THREADBOX_AGENT_BIN": needAgent(t)})
}

// egressThroughProxy runs real tools in a real sandbox of the backend env
// chooses, through the egress proxy: pip installs a wheel from a package
// index over HTTPS, git clones over HTTPS, curl fetches over plain HTTP; a
// host not listed, a listed private address, a name resolving to an
// internal address and a raw socket to an outside address all fail, the
// first three in the ledger and named in the tool result; a secret's host
// gets the secret; and a policy
// change reaches the running sandbox.
func egressThroughProxy(t *testing.T, w *egressWorld, name string, env map[string]string) {
	env["EGRESS_RESOLVER"] = w.dns
	env["EGRESS_ALLOW_PRIVATE"] = "127.0.0.1"
	env["EGRESS_UPSTREAM_ROOTS"] = w.caFile
	s, fake := modelServer(t, "", "anthropic", env)
	a := s.bootstrap("acme", "admin@acme.test")
	allow := []string{"pypi.test", "git.test", "plain.test", "10.0.0.1", "rebind.test", "api.test"}
	if r := s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"egress": map[string]any{"enabled": true, "allow": allow}}); r.status != 200 {
		t.Fatalf("egress on: %d %s", r.status, r.body)
	}
	// A secret bound to api.test, made before the sandbox's first
	// connection reads the policy.
	secret := "tb-secret-" + name + "-" + hex.EncodeToString([]byte(name))[:6] + "-value"
	if r := s.do("PUT", "/api/v1/app/org/egress/secrets/api-token", a, map[string]any{"hosts": []string{"api.test"}, "header": "Authorization", "value": "Bearer " + secret}); r.status != 201 || strings.Contains(string(r.body), secret) {
		t.Fatalf("secret: %d %s", r.status, r.body)
	}
	cl := msgClient(s, a)
	ca := "cat > /tmp/ca.pem <<'PEM'\n" + w.caPEM + "PEM\n"
	fake.Push(steps(
		call("sandbox_bash", map[string]any{"command": ca + "pip install -q --no-cache-dir --index-url https://pypi.test:" + w.tlsPort + "/simple/ --cert /tmp/ca.pem --target /tmp/pylib tbegress-probe && PYTHONPATH=/tmp/pylib python3 -c 'import tbegress_probe; print(tbegress_probe.VALUE)'", "timeout_seconds": 120}),
		call("sandbox_bash", map[string]any{"command": "GIT_SSL_CAINFO=/tmp/ca.pem git clone -q https://git.test:" + w.tlsPort + "/git/probe.git /tmp/probe && cat /tmp/probe/README", "timeout_seconds": 120}),
		call("sandbox_bash", map[string]any{"command": "curl -fsS -m 20 http://plain.test:" + w.plainPort + "/"}),
		call("sandbox_bash", map[string]any{"command": "curl -fsS -m 20 --cacert /tmp/ca.pem https://other.test:" + w.tlsPort + "/"}),
		call("sandbox_bash", map[string]any{"command": "curl -fsS -m 20 http://10.0.0.1:" + w.plainPort + "/"}),
		call("sandbox_bash", map[string]any{"command": "curl -fsS -m 20 --cacert /tmp/ca.pem https://rebind.test:" + w.tlsPort + "/"}),
		call("sandbox_bash", map[string]any{"command": "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)\""}),
	), textStep("done"))
	calls, _ := sandboxTurn(t, cl, "egress1")
	if len(calls) != 7 {
		t.Fatalf("%d calls", len(calls))
	}
	for i, want := range []string{"42\n", "probe repository\n", "plain hello"} {
		if c := calls[i]; c.str("stdout") != want || c.num("exit_code") != 0 {
			t.Fatalf("call %d: stdout %q, want %q; stderr %q", i, c.str("stdout"), want, c.str("stderr"))
		}
	}
	for i, host := range map[int]string{3: "other.test:" + w.tlsPort, 4: "10.0.0.1:" + w.plainPort, 5: "rebind.test:" + w.tlsPort} {
		c := calls[i]
		if c.num("exit_code") == 0 || !strings.Contains(c.str("stderr"), "[threadbox] Egress refused: "+host+" (") {
			t.Fatalf("call %d (%s): exit %v, stderr %q", i, host, c.num("exit_code"), c.str("stderr"))
		}
	}
	if c := calls[6]; c.num("exit_code") == 0 || !strings.Contains(c.str("stderr"), "Network is unreachable") && !strings.Contains(c.str("stderr"), "No route to host") {
		t.Fatalf("a raw socket to an outside address: exit %v, stderr %q", c.num("exit_code"), c.str("stderr"))
	}

	// The ledger has every connection made through the proxy.
	want := map[string]string{"pypi.test": "pypi.test", "git.test": "git.test", "plain.test": "plain.test",
		"other.test": "no-match", "10.0.0.1": "private-address", "rebind.test": "private-address"}
	var recs []map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := s.do("GET", "/api/v1/app/org/egress?limit=1000", a, nil)
		var page struct {
			Data []map[string]any `json:"data"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &page) != nil {
			t.Fatalf("ledger: %d %s", r.status, r.body)
		}
		recs = page.Data
		seen := map[string]bool{}
		for _, rec := range recs {
			if want[rec["host"].(string)] == rec["rule"] {
				seen[rec["host"].(string)] = true
			}
		}
		if len(seen) == len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger lacks connections: saw %v in %v", seen, recs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, rec := range recs {
		if rec["host"] == "pypi.test" && (rec["allowed"] != true || rec["bytes_down"].(float64) < 1000 || rec["address"] != "127.0.0.1" || rec["thread_id"] == nil || rec["container_id"] == "") {
			t.Fatalf("pypi record %v", rec)
		}
	}

	// Every backend mounts the trust folder, where a secret's host is
	// reached with the install's CA.
	egressSecretInSandbox(t, w, s, a, cl, fake, secret)

	// A policy change reaches the running sandbox within seconds.
	if r := s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"egress": map[string]any{"allow": []string{"pypi.test"}}}); r.status != 200 {
		t.Fatalf("allowlist change: %d %s", r.status, r.body)
	}
	fake.Push(steps(call("sandbox_bash", map[string]any{"command": "for i in $(seq 80); do code=$(curl -s -o /dev/null -w '%{http_code}' http://plain.test:" + w.plainPort + "/); [ \"$code\" = 403 ] && echo refused && break; sleep 0.25; done"})), textStep("ok"))
	calls, _ = sandboxTurn(t, cl, "egress1")
	if calls[0].str("stdout") != "refused\n" {
		t.Fatalf("plain.test still reachable after it left the allowlist: %q", calls[0].str("stdout"))
	}
}

// serveTestDNS answers A queries for names from the table on a loopback
// UDP port, and nothing else; it returns the port's address.
func serveTestDNS(t *testing.T, names map[string][]net.IP) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			ips, known := names[strings.ToLower(q.Name.String())]
			rcode := dnsmessage.RCodeSuccess
			if !known {
				rcode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				for _, ip := range ips {
					var a [4]byte
					copy(a[:], ip.To4())
					_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a})
				}
			}
			msg, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// testCA makes a CA and a server certificate it signs for names; it
// returns the CA in PEM and the server's key pair.
func testCA(t *testing.T, names ...string) (string, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "threadbox egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// testWheel builds a pure-Python wheel of the module tbegress_probe
// (VALUE = 42) and returns it with its SHA-256 in hex.
func testWheel(t *testing.T) ([]byte, string) {
	t.Helper()
	files := []struct{ name, body string }{
		{"tbegress_probe.py", "VALUE = 42\n"},
		{"tbegress_probe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tbegress-probe\nVersion: 1.0\n"},
		{"tbegress_probe-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: threadbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, _ := zw.Create(f.name)
		io.WriteString(w, f.body)
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("tbegress_probe-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("tbegress_probe-1.0.dist-info/RECORD")
	io.WriteString(w, record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// testGitRepo makes a folder of bare repositories holding probe.git, one
// commit with a README; it returns the folder.
func testGitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		missing(t, "git is missing: %v", err)
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.test", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run(work, "init", "-q")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("probe repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", "README")
	run(work, "commit", "-q", "-m", "probe")
	repos := filepath.Join(root, "repos")
	if err := os.MkdirAll(repos, 0o755); err != nil {
		t.Fatal(err)
	}
	run(root, "clone", "-q", "--bare", work, filepath.Join(repos, "probe.git"))
	return repos
}

// egressSecretInSandbox checks, with secret bound to api.test, in the
// running sandbox of the turn "egress1", that curl and Python reach
// api.test through the proxy, which terminates their TLS with the
// install's CA (trusted through the trust folder, with no option on the
// command line) and adds the secret as a header, while the secret is in
// no variable, no process environment and no file of the sandbox; that
// the ledger names the secret's rule; and that a host without a secret
// still sees the client's own TLS handshake.
func egressSecretInSandbox(t *testing.T, w *egressWorld, s *server, admin string, cl anthropic.Client, fake *fakeupstream.Server, secret string) {
	t.Helper()
	// The secret is looked for in two halves the command joins, so the
	// command's own text never holds it.
	half := len(secret) / 2
	find := "S=\"$(printf %s '" + secret[:half] + "' '" + secret[half:] + "')\"\n" +
		"echo env=$(env | grep -cF \"$S\")\n" +
		"echo environ=$(for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | grep -cF \"$S\")\n" +
		"echo files=$(grep -rlsF -e \"$S\" /tmp /home /mnt /opt /run /etc /var /root 2>/dev/null | head -3)\n"
	fake.Push(steps(
		call("sandbox_bash", map[string]any{"command": "curl -fsS -m 20 https://api.test:" + w.tlsPort + "/api/echo"}),
		call("sandbox_bash", map[string]any{"command": "python3 -c \"import urllib.request; print(urllib.request.urlopen('https://api.test:" + w.tlsPort + "/api/echo', timeout=20).read().decode())\""}),
		call("sandbox_bash", map[string]any{"command": "curl -fsS -m 20 --cacert /tmp/ca.pem https://git.test:" + w.tlsPort + "/hello"}),
		call("sandbox_bash", map[string]any{"command": find}),
	), textStep("done"))
	calls, _ := sandboxTurn(t, cl, "egress1")
	if len(calls) != 4 {
		t.Fatalf("%d calls", len(calls))
	}
	for i, want := range []string{"api ok", "api ok\n", "hello", "env=0\nenviron=0\nfiles=\n"} {
		if c := calls[i]; c.str("stdout") != want || c.num("exit_code") != 0 {
			t.Fatalf("secret call %d: stdout %q, want %q; stderr %q", i, c.str("stdout"), want, c.str("stderr"))
		}
	}
	if !w.saw("Bearer " + secret) {
		t.Fatal("api.test was not sent the secret")
	}
	// The proxy offers only HTTP/1.1 when it terminates TLS; curl offers
	// h2 too, so git.test saw curl's own handshake.
	if got := w.alpn("git.test"); !slices.Contains(got, "h2") {
		t.Fatalf("git.test was offered %v: not the client's own handshake", got)
	}
	if got := w.alpn("api.test"); !slices.Equal(got, []string{"http/1.1"}) {
		t.Fatalf("api.test was offered %v: not the proxy's handshake", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := s.do("GET", "/api/v1/app/org/egress?host=api.test&limit=10", admin, nil)
		if r.status == 200 && strings.Contains(string(r.body), `"rule":"api.test secret:api-token"`) {
			if strings.Contains(string(r.body), secret) {
				t.Fatal("the ledger holds the secret")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger lacks the secret's connection: %d %s", r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := s.do("GET", "/api/v1/app/org/egress/secrets", admin, nil); r.status != 200 || strings.Contains(string(r.body), secret) || !strings.Contains(string(r.body), `"name":"api-token"`) {
		t.Fatalf("secrets list: %d %s", r.status, r.body)
	}
}

// TestEgressSecretsAPI: org secrets are written by admins only, never read
// back (the list, the answers and the audit log lack the value), and
// checked (name, hosts, header, value); members are refused.
func TestEgressSecretsAPI(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		const value = "Bearer plain-secret-value-123"
		r := s.do("PUT", "/api/v1/app/org/egress/secrets/deploy", a, map[string]any{"hosts": []string{"api.example.com", "*.api.example.com:443"}, "header": "authorization", "value": value})
		if r.status != 201 || strings.Contains(string(r.body), "plain-secret") || !strings.Contains(string(r.body), `"header":"Authorization"`) {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		r = s.do("PUT", "/api/v1/app/org/egress/secrets/deploy", a, map[string]any{"hosts": []string{"api.example.com"}, "header": "X-Api-Key", "value": value + "-2"})
		if r.status != 200 || strings.Contains(string(r.body), "plain-secret") {
			t.Fatalf("replace: %d %s", r.status, r.body)
		}
		for _, bad := range []struct {
			name string
			body map[string]any
		}{
			{"bad%20name", map[string]any{"hosts": []string{"a.example"}, "header": "X-Key", "value": "v"}},
			{"x", map[string]any{"hosts": []string{"*.com"}, "header": "X-Key", "value": "v"}},
			{"x", map[string]any{"hosts": []string{}, "header": "X-Key", "value": "v"}},
			{"x", map[string]any{"hosts": []string{"a.example"}, "header": "Host", "value": "v"}},
			{"x", map[string]any{"hosts": []string{"a.example"}, "header": "X-Key", "value": "a\r\nX-Evil: 1"}},
			{"x", map[string]any{"hosts": []string{"a.example"}, "header": "X-Key", "value": ""}},
		} {
			if r := s.do("PUT", "/api/v1/app/org/egress/secrets/"+bad.name, a, bad.body); r.status != 400 {
				t.Fatalf("%s %v: %d %s", bad.name, bad.body, r.status, r.body)
			}
		}
		r = s.do("GET", "/api/v1/app/org/egress/secrets", a, nil)
		var list struct {
			Data []map[string]any `json:"data"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Data) != 1 || list.Data[0]["header"] != "X-Api-Key" || strings.Contains(string(r.body), "plain-secret") {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		if _, ok := list.Data[0]["value"]; ok {
			t.Fatalf("the list has a value field: %s", r.body)
		}
		r = s.do("GET", "/api/v1/app/org/audit", a, nil)
		for _, action := range []string{"org.egress_secrets.create", "org.egress_secrets.replace"} {
			if r.status != 200 || !strings.Contains(string(r.body), action) {
				t.Fatalf("audit lacks %s: %s", action, r.body)
			}
		}
		if strings.Contains(string(r.body), "plain-secret") {
			t.Fatal("the audit log holds the value")
		}
		r = s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": "m@acme.test", "role": "member"})
		if r.status != 201 && r.status != 200 {
			t.Fatalf("member: %d %s", r.status, r.body)
		}
		m, err := s.cli("token", "create", "--email", "m@acme.test", "--name", "m", "--ttl", "1h")
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []struct{ method, path string }{{"GET", "/api/v1/app/org/egress/secrets"}, {"PUT", "/api/v1/app/org/egress/secrets/deploy"}, {"DELETE", "/api/v1/app/org/egress/secrets/deploy"}} {
			if r := s.do(req.method, req.path, m, map[string]any{"hosts": []string{"a.example"}, "header": "X-Key", "value": "v"}); r.status != 403 {
				t.Fatalf("a member: %s %s: %d", req.method, req.path, r.status)
			}
		}
		if r := s.do("DELETE", "/api/v1/app/org/egress/secrets/deploy", a, nil); r.status != 204 {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
		if r := s.do("DELETE", "/api/v1/app/org/egress/secrets/deploy", a, nil); r.status != 404 {
			t.Fatalf("delete again: %d %s", r.status, r.body)
		}
		if r := s.do("GET", "/api/v1/app/org/audit", a, nil); !strings.Contains(string(r.body), "org.egress_secrets.delete") {
			t.Fatalf("audit lacks the delete: %s", r.body)
		}
	})
}
