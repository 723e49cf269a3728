package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"threadbox/infra/blob"
	"threadbox/infra/sandbox/sandboxtest"
	"threadbox/infra/store/storetest"
)

// replicaSet is the replica harness: threadbox processes on one throwaway
// PostgreSQL database, one data folder and one bucket of the S3-compatible
// server scripts/s3-start.sh started, behind HAProxy (round-robin, no
// affinity), all on loopback. lb is a client of the load balancer.
type replicaSet struct {
	lb       *server
	replicas []*child
	env      map[string]string
	bucket   string
	s3       *minio.Client
	store    *gate // between the replicas and the S3 server
}

// needHAProxy returns the HAProxy binary (Debian's haproxy package).
func needHAProxy(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("haproxy")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/haproxy"); serr == nil {
			return "/usr/sbin/haproxy"
		}
		missing(t, "haproxy is missing (apt-get install haproxy): %v", err)
	}
	return p
}

// needS3 returns the options of the test S3-compatible server with a
// bucket of the test's own, and a client of it.
func needS3(t *testing.T) (blob.S3Options, *minio.Client) {
	t.Helper()
	raw := os.Getenv("TEST_BLOB_URL")
	if raw == "" {
		missing(t, "TEST_BLOB_URL is unset: scripts/test.sh starts the S3-compatible server (scripts/s3-start.sh)")
	}
	o, err := blob.ParseS3URL(raw)
	if err != nil {
		t.Fatal(err)
	}
	o.Bucket = fmt.Sprintf("replicas-%d", time.Now().UnixNano()%1e12)
	o.AccessKey, o.SecretKey = os.Getenv("TEST_S3_ACCESS_KEY"), os.Getenv("TEST_S3_SECRET_KEY")
	u, _ := url.Parse(o.Endpoint)
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""), Region: o.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return o, c
}

// gate is a TCP relay that can be shut, so a test can take the object
// store away from the replicas and bring it back.
type gate struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   bool
	conns  map[net.Conn]bool
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target, open: true, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); g.set(false) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.relay(c)
		}
	}()
	return g
}

func (g *gate) relay(c net.Conn) {
	g.mu.Lock()
	if !g.open {
		g.mu.Unlock()
		c.Close()
		return
	}
	g.conns[c] = true
	g.mu.Unlock()
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns[up] = true
	g.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

// set opens or shuts the gate; shutting it drops every relayed connection.
func (g *gate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	if !open {
		for c := range g.conns {
			c.Close()
		}
		g.conns = map[net.Conn]bool{}
	}
}

func (g *gate) addr() string { return g.ln.Addr().String() }

// startReplicas starts n threadbox processes (Docker sandboxes, the runner
// model) and HAProxy in front of them.
func startReplicas(t *testing.T, n int, extra map[string]string) *replicaSet {
	t.Helper()
	bin := needDocker(t)
	haproxy := needHAProxy(t)
	o, s3c := needS3(t)
	dbURL := storetest.PostgresURL(t)
	u, _ := url.Parse(o.Endpoint)
	g := newGate(t, u.Host)
	blobURL := fmt.Sprintf("s3://%s?endpoint=%s&region=%s", o.Bucket, url.QueryEscape("http://"+g.addr()), o.Region)
	base := map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner",
		"BLOB_URL": blobURL, "BLOB_CREATE_BUCKET": "true",
		"AWS_ACCESS_KEY_ID": o.AccessKey, "AWS_SECRET_ACCESS_KEY": o.SecretKey,
		"LEASE_TTL": "10s", "SWEEP_INTERVAL": "1s", "LOG_LEVEL": "info",
		"METRICS_TOKEN": scrapeToken, // the readiness report's details
	}
	for k, v := range extra {
		base[k] = v
	}
	env := childEnv(t, dbURL, base)
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	rs := &replicaSet{env: env, bucket: o.Bucket, s3: s3c, store: g}
	var servers []string
	for i := range n {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		if i > 0 {
			e["LISTEN_ADDR"] = freeAddr(t)
		}
		rs.replicas = append(rs.replicas, startChild(t, e)) // one at a time: the first migrates
		servers = append(servers, fmt.Sprintf("  server r%d %s check inter 500ms fall 2 rise 1\n", i, e["LISTEN_ADDR"]))
	}
	lbAddr := freeAddr(t)
	cfg := "global\n  maxconn 512\n" +
		// http-reuse always: every idle server connection serves any
		// client, as the load balancers that share connections do, so that
		// a request body the server left unread would meet another client's
		// request here (web/bodyguard.go).
		"defaults\n  mode http\n  timeout connect 2s\n  timeout client 5m\n  timeout server 5m\n  retries 2\n  option redispatch\n  http-reuse always\n" +
		"frontend fe\n  bind " + lbAddr + "\n  default_backend be\n" +
		"backend be\n  balance roundrobin\n  option httpchk GET /healthz\n" + strings.Join(servers, "")
	cfgFile := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(haproxy, "-db", "-f", cfgFile)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rs.lb = &server{t: t, base: "http://" + lbAddr, dataDir: env["DATA_DIR"], env: env, stdout: out}
	waitFor(t, 20*time.Second, func() bool {
		resp, err := http.Get(rs.lb.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, func() string { return "haproxy did not come up: " + out.String() })
	return rs
}

// objects lists the keys of the replicas' bucket.
func (rs *replicaSet) objects(t *testing.T) []string {
	t.Helper()
	var keys []string
	for o := range rs.s3.ListObjects(context.Background(), rs.bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list bucket: %v", o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// TestReplicas checks scale-out through the load balancer: two
// threadbox replicas on one database, one data folder, one S3 bucket.
func TestReplicas(t *testing.T) {
	rs := startReplicas(t, 2, nil)
	lb, r0, r1 := rs.lb, rs.replicas[0], rs.replicas[1]
	f := newWSFixture(t, lb)

	// Every replica answers ready: the database and the object store.
	for _, r := range rs.replicas {
		resp := r.do("GET", "/readyz", scrapeToken, nil)
		if resp.status != 200 || resp.json(t)["blob_store"] != "ok" {
			t.Fatalf("readyz: %d %s", resp.status, resp.body)
		}
	}

	step(t, "skill versions", func() {
		// Uploads of one skill at once, half on each replica: each gets a
		// version of its own, 1 to n, and every upload succeeds.
		arch := wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("twice", "Uploaded at once")})
		const n = 8
		var wg sync.WaitGroup
		versions := make([]int, n)
		for i := range n {
			r := rs.replicas[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, body, err := postRaw(r.base, appAPI+"/skills", f.admin, arch, "application/zip")
				if err != nil || st != 201 {
					t.Errorf("upload %d: %d %s %v", i, st, body, err)
					return
				}
				var v struct{ Version int }
				if err := json.Unmarshal([]byte(body), &v); err != nil {
					t.Errorf("upload %d: %s", i, body)
				}
				versions[i] = v.Version
			}()
		}
		wg.Wait()
		slices.Sort(versions)
		for i, v := range versions {
			if v != i+1 {
				t.Fatalf("versions of %d simultaneous uploads on two replicas: %v", n, versions)
			}
		}
		// The archive is kept in the bucket, in the org's namespace (every
		// upload had the same content: one object).
		org := r0.do("GET", appAPI+"/me", f.admin, nil).json(t)["org_id"].(string)
		var archives []string
		for _, k := range rs.objects(t) {
			if strings.HasPrefix(k, "skill-archives/"+org+"/") {
				archives = append(archives, k)
			}
		}
		if len(archives) != 1 {
			t.Fatalf("skill archives in the bucket: %v", archives)
		}
	})

	step(t, "token revocation", func() {
		r := r0.do("POST", appAPI+"/tokens", f.admin, map[string]any{"name": "laptop"})
		if r.status != 201 {
			t.Fatalf("token: %d %s", r.status, r.body)
		}
		tok, id := r.json(t)["token"].(string), r.json(t)["id"].(string)
		for _, s := range []*child{r0, r1} {
			if r := s.do("GET", appAPI+"/me", tok, nil); r.status != 200 {
				t.Fatalf("fresh token: %d %s", r.status, r.body)
			}
		}
		if r := r0.do("DELETE", appAPI+"/tokens/"+id, f.admin, nil); r.status/100 != 2 {
			t.Fatalf("revoke: %d %s", r.status, r.body)
		}
		if r := r1.do("GET", appAPI+"/me", tok, nil); r.status != 401 {
			t.Fatalf("revoked on replica 0, replica 1 answers %d %s", r.status, r.body)
		}
		for range 2 {
			if r := lb.do("GET", appAPI+"/me", tok, nil); r.status != 401 {
				t.Fatalf("revoked token through the load balancer: %d %s", r.status, r.body)
			}
		}
	})

	step(t, "login throttle", func() {
		// Failed logins of one email, alternating between the replicas,
		// count together: the eleventh is refused wherever it lands.
		if r := r0.do("POST", appAPI+"/org/users", f.admin, map[string]any{"email": "thr@acme.test", "role": "member", "password": "throttled-password"}); r.status/100 != 2 {
			t.Fatalf("create user: %d %s", r.status, r.body)
		}
		for i := range 11 {
			r := rs.replicas[i%2].do("POST", appAPI+"/auth/login", "", map[string]any{"email": "thr@acme.test", "password": "a wrong guess"})
			want := 401
			if i == 10 {
				want = 429
			}
			if r.status != want {
				t.Fatalf("failed login %d (replica %d): %d %s", i+1, i%2, r.status, r.body)
			}
		}
	})

	step(t, "files api", func() {
		// Uploads, listing, downloads and deletions spread over the
		// replicas; an upload retried with its Idempotency-Key on the other
		// replica returns the first result and stores nothing.
		const scope = "replicas"
		q := "?scope_id=" + scope
		first := r0.upload(f.admin, scope, "", "once.txt", "first", "Idempotency-Key", "rep-key")
		again := r1.upload(f.admin, scope, "", "once.txt", "second", "Idempotency-Key", "rep-key")
		if first.status != 200 || again.status != 200 || string(first.body) != string(again.body) {
			t.Fatalf("idempotent upload on two replicas: %d %s / %d %s", first.status, first.body, again.status, again.body)
		}
		for i := range 4 {
			if r := lb.put(f.admin, scope, fmt.Sprintf("outputs/f%d.txt", i), fmt.Sprintf("content %d", i)); r.status != 200 {
				t.Fatalf("put %d through the balancer: %d %s", i, r.status, r.body)
			}
		}
		for range 2 {
			if r := lb.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/once.txt")+"/content"+q, f.admin, nil); r.status != 200 || string(r.body) != "first" {
				t.Fatalf("download through the balancer: %d %q", r.status, r.body)
			}
			list := lb.do("GET", filesAPI+q, f.admin, nil)
			if list.status != 200 || !strings.Contains(string(list.body), "f3.txt") || !strings.Contains(string(list.body), "once.txt") {
				t.Fatalf("list through the balancer: %d %s", list.status, list.body)
			}
			p := lb.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/f2.txt")+"/content"+q, f.admin, nil, "Range", "bytes=8-")
			if p.status != 206 || string(p.body) != "2" {
				t.Fatalf("range through the balancer: %d %q", p.status, p.body)
			}
		}
		if r := lb.do("DELETE", filesAPI+"/"+fileID("/mnt/user-data/outputs/f0.txt")+q, f.admin, nil); r.status/100 != 2 {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
		for _, s := range []*child{r0, r1} {
			if r := s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/f0.txt")+"/content"+q, f.admin, nil); r.status != 404 {
				t.Fatalf("deleted file on a replica: %d %s", r.status, r.body)
			}
		}
	})

	step(t, "messages api", func() {
		// The official SDK through the load balancer: each call lands on
		// the other replica; the container's sandbox moves with it.
		c := msgClient(lb, f.admin)
		ctx := context.Background()
		msg, err := c.Messages.New(ctx, msgParams("", userText("```bash\necho kept > /mnt/user-data/outputs/m.txt; echo first\n```"), codeExecTool...))
		if err != nil {
			t.Fatal(err)
		}
		if msg.Container.ID == "" {
			t.Fatalf("no container: %+v", msg)
		}
		for i := range 3 {
			stream := c.Messages.NewStreaming(ctx, msgParams(msg.Container.ID, userText(fmt.Sprintf("```bash\ncat /mnt/user-data/outputs/m.txt; echo call%d\n```", i)), codeExecTool...))
			var acc anthropic.Message
			for stream.Next() {
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			raw := acc.RawJSON()
			if !strings.Contains(raw, `kept\n`) || !strings.Contains(raw, fmt.Sprintf(`call%d\n`, i)) {
				t.Fatalf("call %d through the load balancer: %s", i, raw)
			}
		}
		// The calls were spread: the container's sandbox moved between
		// the replicas.
		for i, r := range rs.replicas {
			if !strings.Contains(r.stdout.String(), "sandbox handed over to another server") {
				t.Fatalf("replica %d never handed a sandbox over:\n%s", i, r.stdout.String())
			}
		}
	})

	step(t, "a streamed chat turn followed from another replica", func() {
		tid := f.thread(t, f.admin, f.pid)
		body, _ := json.Marshal(map[string]any{"content": "```bash\nfor i in $(seq 1 6); do echo tick$i; sleep 0.3; done\n```", "stream": true, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
		resp, own, cancel := openSSE(t, "POST", r0.base+appAPI+"/thread/"+tid+"/messages", f.admin, body)
		defer cancel()
		turnID := resp.Header.Get("Threadbox-Turn-Id")
		if resp.StatusCode != 200 || turnID == "" {
			t.Fatalf("start: %d %q", resp.StatusCode, turnID)
		}
		drain := func(evs <-chan liveEvent) (all string, last string) {
			for {
				ev, ok := nextEvent(t, evs, 60*time.Second)
				if !ok {
					return all, last
				}
				all += ev.data
				last = ev.name
			}
		}
		for _, base := range []string{r1.base, lb.base, lb.base} {
			_, evs, stop := openSSE(t, "GET", base+appAPI+"/thread/"+tid+"/turns/"+turnID+"/events", f.admin, nil, "Last-Event-ID", "0")
			all, last := drain(evs)
			stop()
			if !strings.Contains(all, "tick6") || last != "message_stop" {
				t.Fatalf("follower on %s: last event %q, events %s", base, last, all)
			}
		}
		if all, _ := drain(own); !strings.Contains(all, "tick6") {
			t.Fatalf("the turn's own stream: %s", all)
		}
	})

	var artifactID, sum string
	step(t, "turns and artifacts", func() {
		tid := f.thread(t, f.admin, f.pid)
		// Two turns of one thread at once on two replicas: one runs, the
		// other is the documented 409.
		type answer struct {
			status int
			body   string
		}
		done := make(chan answer, 2)
		for i, s := range []*child{r0, r1} {
			go func() {
				if i == 1 {
					time.Sleep(1500 * time.Millisecond)
				}
				st, body, _ := post(s.base, appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("sleep 3; echo ran"))
				done <- answer{st, body}
			}()
		}
		a, b := <-done, <-done
		if !(a.status == 409 && b.status == 200 || a.status == 200 && b.status == 409) {
			t.Fatalf("two turns at once: %d %s / %d %s", a.status, a.body, b.status, b.body)
		}
		if a.status == 409 && !strings.Contains(a.body, "a turn is already running") {
			t.Fatalf("409 body: %s", a.body)
		}

		// An output becomes an artifact stored in the S3 bucket, served
		// through the load balancer with its bytes, ETag and ranges.
		content := "replica artifact 0123456789\n"
		r := lb.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("printf 'replica artifact 0123456789\\n' > /mnt/user-data/outputs/report.txt"))
		if r.status != 200 {
			t.Fatalf("artifact turn: %d %s", r.status, r.body)
		}
		list := lb.do("GET", appAPI+"/project/"+f.pid+"/artifacts", f.admin, nil)
		for _, x := range list.json(t)["data"].([]any) {
			x := x.(map[string]any)
			if x["name"] == "report.txt" {
				artifactID, sum = x["id"].(string), x["sha256"].(string)
			}
		}
		if artifactID == "" {
			t.Fatalf("no artifact: %s", list.body)
		}
		if keys := rs.objects(t); !slices.Contains(keys, sum[:2]+"/"+sum) {
			t.Fatalf("artifact %s not in the bucket: %v", sum, keys)
		}
		if _, err := os.Stat(filepath.Join(rs.env["DATA_DIR"], "artifacts", sum[:2], sum)); err == nil {
			t.Fatal("the artifact was written to the local folder too")
		}
		for range 2 { // both replicas
			d := lb.do("GET", appAPI+"/artifact/"+artifactID+"/content", f.admin, nil)
			if d.status != 200 || string(d.body) != content || d.header.Get("ETag") != `"`+sum+`"` {
				t.Fatalf("download: %d %q %v", d.status, d.body, d.header)
			}
			p := lb.do("GET", appAPI+"/artifact/"+artifactID+"/content", f.admin, nil, "Range", "bytes=8-15")
			if p.status != 206 || string(p.body) != content[8:16] || p.header.Get("Content-Range") != fmt.Sprintf("bytes 8-15/%d", len(content)) {
				t.Fatalf("range: %d %q %v", p.status, p.body, p.header)
			}
		}
	})

	step(t, "rewind on either replica", func() {
		// A thread's snapshots are in the shared DATA_DIR and its rewinds
		// hold its turn lease: either replica rewinds it, and two rewinds
		// at once on two replicas leave it consistent, its files those of
		// the last answer its history keeps.
		tid := f.thread(t, f.admin, f.pid)
		var answers []string
		wants := []map[string]string{}
		for i, cmd := range []string{
			"echo one > /home/agent/workspace/a.txt",
			"echo two > /home/agent/workspace/a.txt; echo b > /home/agent/workspace/b.txt",
			"rm /home/agent/workspace/a.txt; echo three > /home/agent/workspace/b.txt",
		} {
			r := rs.replicas[i%2].do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn(cmd))
			mustStatus(t, cmd, r, 200)
			answers = append(answers, lastAnswer(t, f, f.admin, tid))
			wants = append(wants, threadFiles(t, lb, tid))
		}
		if !maps.Equal(wants[0], map[string]string{"workspace/a.txt": "one\n"}) || !maps.Equal(wants[2], map[string]string{"workspace/b.txt": "three\n"}) {
			t.Fatalf("the turns' files: %v", wants)
		}
		// One after the other, each on the other replica.
		for i, at := range []int{1, 0} {
			r := rs.replicas[i].do("POST", appAPI+"/thread/"+tid+"/rewind", f.admin, map[string]any{"message_id": answers[at]})
			mustStatus(t, fmt.Sprintf("rewind to turn %d on replica %d", at+1, i), r, 200)
			if got := threadFiles(t, lb, tid); !maps.Equal(got, wants[at]) {
				t.Fatalf("rewound on replica %d to turn %d: %v, want %v", i, at+1, got, wants[at])
			}
		}
		// A turn after it, then two rewinds at once to different turns.
		mustStatus(t, "a turn after the rewind", r1.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("echo four > /home/agent/workspace/d.txt")), 200)
		after := lastAnswer(t, f, f.admin, tid)
		afterFiles := threadFiles(t, lb, tid)
		targets := []string{answers[0], after}
		statuses := make([]int, 2)
		var wg sync.WaitGroup
		for i, s := range []*child{r0, r1} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = s.do("POST", appAPI+"/thread/"+tid+"/rewind", f.admin, map[string]any{"message_id": targets[i]}).status
			}()
		}
		wg.Wait()
		for _, st := range statuses {
			if st != 200 && st != 409 {
				t.Fatalf("rewinds at once: %v", statuses)
			}
		}
		live := liveIDs(t, f, f.admin, tid)
		last := live[len(live)-1]
		want := afterFiles
		if last == answers[0] {
			want = wants[0]
		} else if last != after {
			t.Fatalf("the history ends at %s, neither rewind's answer (%v)", last, targets)
		}
		for _, s := range []*child{r0, r1} {
			if ids := liveIDs(t, wsFixture{s: s.server, admin: f.admin}, f.admin, tid); !slices.Equal(ids, live) {
				t.Fatalf("replicas disagree on the history: %v / %v", ids, live)
			}
		}
		if got := threadFiles(t, lb, tid); !maps.Equal(got, want) {
			t.Fatalf("after rewinds at once (%v), the history ends at %s but the files are %v, want %v", statuses, last, got, want)
		}
	})

	step(t, "presigned downloads", func() {
		// A replica with BLOB_PRESIGN=true sends the client to the store,
		// after the same checks; the store answers with the bytes, the
		// type and disposition, and ranges.
		e := map[string]string{}
		for k, v := range rs.env {
			e[k] = v
		}
		e["LISTEN_ADDR"], e["BLOB_PRESIGN"] = freeAddr(t), "true"
		// Its store address is the test server's own (the gate is for
		// the replicas): a presigned URL names the host it was signed for.
		e["BLOB_URL"] = strings.Replace(e["BLOB_URL"], url.QueryEscape("http://"+rs.store.addr()), url.QueryEscape("http://"+rs.store.target), 1)
		p := startChild(t, e)
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		get := func(tok string, hdr ...string) *http.Response {
			req, _ := http.NewRequest("GET", p.base+appAPI+"/artifact/"+artifactID+"/content", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := noFollow.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkOpenAPI(t, req, nil, resp, b)
			return resp
		}
		resp := get(f.admin)
		loc := resp.Header.Get("Location")
		if resp.StatusCode != 307 || !strings.HasPrefix(loc, "http://"+rs.store.target+"/") || !strings.Contains(loc, "X-Amz-Signature") {
			t.Fatalf("presigned download: %d %v", resp.StatusCode, resp.Header)
		}
		// Another org's admin is refused, not redirected.
		if resp := get(f.out); resp.StatusCode != 404 {
			t.Fatalf("another org's download: %d", resp.StatusCode)
		}
		req, _ := http.NewRequest("GET", loc, nil)
		req.Header.Set("Range", "bytes=8-15")
		sr, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(sr.Body)
		sr.Body.Close()
		if sr.StatusCode != 206 || string(b) != "artifact" || !strings.HasPrefix(sr.Header.Get("Content-Disposition"), `attachment; filename="report.txt"`) ||
			!strings.HasPrefix(sr.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("the store's answer to the presigned URL: %d %q %v", sr.StatusCode, b, sr.Header)
		}
		p.term(t)
	})

	step(t, "object store down", func() {
		rs.store.set(false)
		defer rs.store.set(true)
		start := time.Now()
		for range 2 {
			d := lb.do("GET", appAPI+"/artifact/"+artifactID+"/content", f.admin, nil)
			if d.status != 503 || d.errorType(t) == "" {
				t.Fatalf("download with the store down: %d %s", d.status, d.body)
			}
		}
		for _, r := range rs.replicas {
			if resp := r.do("GET", "/readyz", scrapeToken, nil); resp.status != 503 || resp.json(t)["blob_store"] != "unreachable" {
				t.Fatalf("readyz with the store down: %d %s", resp.status, resp.body)
			}
		}
		if took := time.Since(start); took > 60*time.Second {
			t.Fatalf("answers with the store down took %v", took)
		}
		rs.store.set(true)
		if d := lb.do("GET", appAPI+"/artifact/"+artifactID+"/content", f.admin, nil); d.status != 200 {
			t.Fatalf("download with the store back: %d %s", d.status, d.body)
		}
	})

	step(t, "kill -9 takeover", func() {
		tid := f.thread(t, f.admin, f.pid)
		if r := r0.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("echo intact > /mnt/user-data/outputs/kept.txt")); r.status != 200 {
			t.Fatalf("first turn: %d %s", r.status, r.body)
		}
		go func() { _, _, _ = post(r0.base, appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("sleep 60")) }()
		waitFor(t, 20*time.Second, func() bool { return strings.HasSuffix(lastStatus(lb, f.admin, tid), "running") },
			func() string { return "the long turn never ran: " + lastStatus(lb, f.admin, tid) })
		r0.kill()
		killed := time.Now()
		var (
			status int
			body   string
			err    error
		)
		waitFor(t, 45*time.Second, func() bool {
			// Until the balancer's health check marks the dead replica
			// down (2 checks 500 ms apart), a request sent to it fails
			// at the transport: the client tries again, as a client would.
			status, body, err = post(lb.base, appAPI+"/thread/"+tid+"/messages", f.admin, codeTurn("cat /mnt/user-data/outputs/kept.txt; echo after"))
			if err != nil {
				time.Sleep(200 * time.Millisecond)
			}
			return err == nil && status == 200 && strings.Contains(body, `intact\n`) && strings.Contains(body, `after\n`)
		}, func() string {
			return fmt.Sprintf("no command succeeded after the kill: %d %s %v", status, body, err)
		})
		took := time.Since(killed)
		t.Logf("takeover after kill -9: %v (LEASE_TTL %s)", took.Round(time.Millisecond), rs.env["LEASE_TTL"])
		if took > 30*time.Second {
			t.Fatalf("takeover took %v, past the 30 s bound", took)
		}
		// The interrupted turn is failed, not running.
		r := lb.do("GET", appAPI+"/thread/"+tid+"/messages", f.admin, nil)
		var statuses []string
		for _, m := range r.json(t)["data"].([]any) {
			m := m.(map[string]any)
			if m["role"] == "assistant" {
				statuses = append(statuses, fmt.Sprint(m["status"]))
			}
		}
		if !slices.Contains(statuses, "failed") || slices.Contains(statuses, "running") {
			t.Fatalf("assistant statuses after the kill: %v (%s)", statuses, r.body)
		}
	})

	step(t, "project deletion deletes the objects", func() {
		if r := lb.do("DELETE", appAPI+"/project/"+f.pid, f.admin, nil); r.status/100 != 2 {
			t.Fatalf("delete project: %d %s", r.status, r.body)
		}
		if keys := rs.objects(t); slices.Contains(keys, sum[:2]+"/"+sum) {
			t.Fatalf("the artifact's object outlived its project: %v", keys)
		}
	})
}

// postRaw sends a raw body from any goroutine.
func postRaw(base, path, token string, body []byte, contentType string) (int, string, error) {
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// step runs one part of a long test, named in the log. (Not a subtest:
// the servers' clients report to the test that started them.)
func step(t *testing.T, name string, fn func()) {
	t.Helper()
	t.Logf("== %s", name)
	fn()
}
