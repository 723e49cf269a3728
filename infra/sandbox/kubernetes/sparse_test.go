package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"threadbox/domain/sandbox"
	"threadbox/infra/fsroot"
	"threadbox/infra/sandbox/agent/fileop"
	"threadbox/infra/sparse/sparsetest"
)

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// TestOpenKeepsHoles: a sparse file of the pod (code can make one of
// terabytes with `truncate -s`) crosses the files sidecar's stream as its
// data, and neither the opened file's spool nor the snapshot mirror on
// threadbox's disk takes more room than that data; both read as the file.
func TestOpenKeepsHoles(t *testing.T) {
	root := t.TempDir()
	d := fsroot.Dirs{Workspace: filepath.Join(root, "w"), Uploads: filepath.Join(root, "u"), Outputs: filepath.Join(root, "o"), Skills: filepath.Join(root, "s")}
	for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const size = 256 << 20
	head, tail := bytes.Repeat([]byte("head"), 1024), []byte("tail")
	sparsetest.Make(t, filepath.Join(d.Workspace, "big"), size,
		sparsetest.Piece{Off: 0, Data: string(head)}, sparsetest.Piece{Off: size - int64(len(tail)), Data: string(tail)})

	// The sidecar's side, as `threadbox-agent file` runs it.
	pod := fsroot.NewContainers(func(string) fsroot.Dirs { return d }, fsroot.Options{})
	pr, pw := io.Pipe()
	sent := &countingWriter{w: pw}
	go func() {
		req := fileop.Request{Op: fileop.OpOpenExtents, Path: sandbox.WorkspaceDir + "/big"}
		pw.CloseWithError(fileop.Serve(context.Background(), pod, d.Skills, req, nil, sent))
	}()
	defer pr.Close()

	// Threadbox's side.
	br := bufio.NewReader(pr)
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var rep fileop.Reply
	if err := json.Unmarshal(line, &rep); err != nil || rep.Error != nil || rep.Info == nil || rep.Info.Size != size {
		t.Fatalf("reply %s: %v", line, err)
	}
	f := &Files{TempDir: t.TempDir()}
	body, err := f.spool(br, rep.Info.Size, false)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if n := sent.n.Load(); n > 1<<20 {
		t.Errorf("the sidecar sent %d bytes for a file of %d data bytes", n, len(head)+len(tail))
	}
	if sp, ok := body.(*os.File); !ok {
		t.Fatalf("a file of %d bytes spooled as %T", size, body)
	} else if a := sparsetest.AllocatedFile(t, sp); a > 1<<20 {
		t.Errorf("the spooled file takes %d bytes of threadbox's disk", a)
	}

	dst := filepath.Join(t.TempDir(), "mirror", "big")
	if err := writeMirror(dst, body); err != nil {
		t.Fatal(err)
	}
	mf, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if a := sparsetest.AllocatedFile(t, mf); a > 1<<20 {
		t.Errorf("the mirror's copy takes %d bytes of threadbox's disk", a)
	}
	if st, err := mf.Stat(); err != nil || st.Size() != size {
		t.Fatalf("mirror's copy: %v, %v", st, err)
	}
	got := make([]byte, len(head))
	if _, err := mf.ReadAt(got, 0); err != nil || !bytes.Equal(got, head) {
		t.Errorf("mirror's head %q, %v", got[:8], err)
	}
	got = make([]byte, len(tail))
	if _, err := mf.ReadAt(got, size-int64(len(tail))); err != nil || !bytes.Equal(got, tail) {
		t.Errorf("mirror's tail %q, %v", got, err)
	}
	zero := make([]byte, 4096)
	if _, err := mf.ReadAt(zero, size/2); err != nil || !bytes.Equal(zero, make([]byte, 4096)) {
		t.Errorf("mirror's middle is not zeros: %v", err)
	}
}

// TestSpoolWhole: a file sent whole (an older agent's open) is spooled as
// its bytes, in memory or in a temporary file, and a stream that ends
// before its size is an error.
func TestSpoolWhole(t *testing.T) {
	f := &Files{TempDir: t.TempDir()}
	for _, size := range []int{10, memoryLimit + 4096} {
		data := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		body, err := f.spool(bytes.NewReader(data), int64(size), true)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%d bytes spooled whole read back as %d bytes (%v)", size, len(got), err)
		}
		if _, err := f.spool(bytes.NewReader(data[:size-1]), int64(size), true); err == nil {
			t.Errorf("a whole stream of %d bytes short of one spooled", size)
		}
	}
}
