package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"threadbox/domain/fault"
)

// s3Test connects to the S3-compatible server scripts/s3-start.sh started
// (TEST_BLOB_URL) and makes a bucket of the test's own. Without one the
// test skips, and fails under CI=true.
func s3Test(t *testing.T) (*S3, S3Options) {
	t.Helper()
	raw := os.Getenv("TEST_BLOB_URL")
	if raw == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_BLOB_URL is unset: scripts/test.sh starts the S3-compatible server (scripts/s3-start.sh)")
		}
		t.Skip("TEST_BLOB_URL is unset (eval \"$(scripts/s3-start.sh)\")")
	}
	o, err := ParseS3URL(raw)
	if err != nil {
		t.Fatal(err)
	}
	o.AccessKey, o.SecretKey = os.Getenv("TEST_S3_ACCESS_KEY"), os.Getenv("TEST_S3_SECRET_KEY")
	o.Bucket = fmt.Sprintf("tb-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), time.Now().UnixNano()%1e9)
	o.Bucket = strings.ReplaceAll(o.Bucket, "_", "-")
	o.Create, o.Spool = true, t.TempDir()
	s, err := NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s, o
}

func TestParseS3URL(t *testing.T) {
	o, err := ParseS3URL("s3://bucket/some/prefix?endpoint=http://127.0.0.1:9000&region=eu-west-1")
	if err != nil || o.Bucket != "bucket" || o.Prefix != "some/prefix/" || o.Endpoint != "http://127.0.0.1:9000" || o.Region != "eu-west-1" {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range []string{"file:///x", "s3://", "s3://b?endpoint=ftp://x", "s3://b?endpoint=http://x&color=red"} {
		if _, err := ParseS3URL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestS3PutOpenRangeWalkRemove(t *testing.T) {
	ctx := context.Background()
	s, _ := s3Test(t)
	content := strings.Repeat("0123456789", 100_000) // 1 MB
	want := sha256.Sum256([]byte(content))
	sum, n, err := s.Put(ctx, strings.NewReader(content))
	if err != nil || sum != hex.EncodeToString(want[:]) || n != int64(len(content)) {
		t.Fatalf("put: %s %d %v", sum, n, err)
	}
	f, err := s.Open(ctx, sum)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	if string(b) != content {
		t.Fatalf("read %d bytes, want %d", len(b), len(content))
	}
	// A seek is a ranged read: what Range downloads use.
	if _, err := f.Seek(500_003, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 7)
	if _, err := io.ReadFull(f, part); err != nil || string(part) != "3456789" {
		t.Fatalf("ranged read %q %v", part, err)
	}
	f.Close()
	if entries, _ := os.ReadDir(s.spool); len(entries) != 0 {
		t.Fatalf("spool files left: %v", entries)
	}

	if _, err := s.Open(ctx, strings.Repeat("0", 64)); !fault.Is(err, fault.NotFound) {
		t.Fatalf("missing blob: %v", err)
	}
	if _, err := s.Open(ctx, "../../etc/passwd"); !fault.Is(err, fault.Invalid) {
		t.Fatalf("bad digest: %v", err)
	}

	var seen []string
	if err := s.Walk(ctx, func(sum string, written time.Time) error {
		if time.Since(written) > time.Hour {
			t.Errorf("write time %v", written)
		}
		seen = append(seen, sum)
		return nil
	}); err != nil || len(seen) != 1 || seen[0] != sum {
		t.Fatalf("walk: %v %v", seen, err)
	}
	// A young blob is spared by an age-bounded removal, removed by one
	// without bound; a second removal finds nothing.
	if ok, err := s.Remove(ctx, sum, time.Now().Add(-time.Hour)); ok || err != nil {
		t.Fatalf("young blob removed: %v %v", ok, err)
	}
	if ok, err := s.Remove(ctx, sum, time.Time{}); !ok || err != nil {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if ok, err := s.Remove(ctx, sum, time.Time{}); ok || err != nil {
		t.Fatalf("second remove: %v %v", ok, err)
	}
	if _, err := s.Open(ctx, sum); !fault.Is(err, fault.NotFound) {
		t.Fatalf("removed blob opens: %v", err)
	}
}

// failingReader fails after giving some bytes, as a client that goes away
// mid-upload.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("connection reset")
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

func TestS3NothingHalfWritten(t *testing.T) {
	ctx := context.Background()
	s, _ := s3Test(t)
	if _, _, err := s.Put(ctx, &failingReader{n: 3 << 20}); err == nil {
		t.Fatal("a failed upload succeeded")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Put(cctx, strings.NewReader("x")); err == nil {
		t.Fatal("put with a cancelled context succeeded")
	}
	n := 0
	if err := s.Walk(ctx, func(string, time.Time) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("objects left by failed uploads: %d %v", n, err)
	}
	if entries, _ := os.ReadDir(s.spool); len(entries) != 0 {
		t.Fatalf("spool files left: %v", entries)
	}
}

func TestS3Presign(t *testing.T) {
	ctx := context.Background()
	s, _ := s3Test(t)
	sum, _, err := s.Put(ctx, strings.NewReader("presigned bytes"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Presign(ctx, sum, "text/plain", `attachment; filename="a.txt"`, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Range", "bytes=10-")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || string(b) != "bytes" {
		t.Fatalf("presigned ranged GET: %d %q", resp.StatusCode, b)
	}
	if cd := resp.Header.Get("Content-Disposition"); cd != `attachment; filename="a.txt"` {
		t.Fatalf("Content-Disposition %q", cd)
	}
}

// TestS3Down: a store that refuses connections, and one that accepts them
// and never answers, are fault.Unavailable within the timeout, not hangs.
func TestS3Down(t *testing.T) {
	ctx := context.Background()
	_, o := s3Test(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := "http://" + closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	for _, endpoint := range []string{refusing, "http://" + silent.Addr().String()} {
		o := o
		o.Endpoint, o.Create, o.Timeout, o.Spool = endpoint, false, 500*time.Millisecond, t.TempDir()
		s, err := NewS3(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, _, perr := s.Put(ctx, strings.NewReader("hello"))
		_, oerr := s.Open(ctx, strings.Repeat("a", 64))
		rerr := s.Ready(ctx)
		took := time.Since(start)
		for what, err := range map[string]error{"put": perr, "open": oerr, "ready": rerr} {
			if !fault.Is(err, fault.Unavailable) {
				t.Errorf("%s on %s: %v, want unavailable", what, endpoint, err)
			}
		}
		if took > 20*time.Second {
			t.Errorf("%s: the calls took %v", endpoint, took)
		}
		if m, _ := filepath.Glob(filepath.Join(o.Spool, "*")); len(m) != 0 {
			t.Errorf("spool files left: %v", m)
		}
	}
}
