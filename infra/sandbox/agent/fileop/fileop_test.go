package fileop_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"threadbox/domain/file"
	"threadbox/domain/sandbox"
	"threadbox/infra/fsroot"
	"threadbox/infra/sandbox/agent/fileop"
)

func TestErrorRoundTrip(t *testing.T) {
	mountErr := &file.MountError{Path: "/etc/x", Err: file.ErrNoMount}
	for _, err := range []error{
		fmt.Errorf("fsroot: %w", file.ErrNotFound),
		fmt.Errorf("fsroot: %w: %w", file.ErrNotDir, file.ErrNotFound),
		fmt.Errorf("fsroot: %w", file.ErrSymlink),
		fmt.Errorf("fsroot: %w", file.ErrNotRegular),
		fmt.Errorf("fsroot: %w", file.ErrReadOnly),
		fmt.Errorf("fsroot: %w: %w", file.ErrDiskFull, file.ErrTooLarge),
		fmt.Errorf("fsroot: %w", file.ErrServerDiskFull),
		fmt.Errorf("fsroot: %w", mountErr),
	} {
		b, jerr := json.Marshal(fileop.EncodeError(err))
		if jerr != nil {
			t.Fatal(jerr)
		}
		var e fileop.Error
		if jerr := json.Unmarshal(b, &e); jerr != nil {
			t.Fatal(jerr)
		}
		got := e.Err()
		if got.Error() != err.Error() {
			t.Errorf("message %q, want %q", got, err)
		}
		for _, want := range []error{file.ErrNotFound, file.ErrNotDir, file.ErrSymlink, file.ErrNotRegular, file.ErrReadOnly, file.ErrDiskFull, file.ErrTooLarge, file.ErrServerDiskFull, file.ErrNoMount} {
			if errors.Is(got, want) != errors.Is(err, want) {
				t.Errorf("%v: errors.Is(%v) = %v across the wire", err, want, errors.Is(got, want))
			}
		}
		var me *file.MountError
		if errors.As(err, &me) {
			var got2 *file.MountError
			if !errors.As(got, &got2) || got2.Path != me.Path || got2.Error() != me.Error() {
				t.Errorf("mount error across the wire: %v", got)
			}
		}
	}
}

// folders returns fsroot over temporary folders, as the files sidecar has
// them at the sandbox paths.
func folders(t testing.TB) (*fsroot.Containers, fsroot.Dirs) {
	t.Helper()
	root := t.TempDir()
	d := fsroot.Dirs{Workspace: filepath.Join(root, "w"), Uploads: filepath.Join(root, "u"), Outputs: filepath.Join(root, "o"), Skills: filepath.Join(root, "s")}
	for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return fsroot.NewContainers(func(string) fsroot.Dirs { return d }, fsroot.Options{}), d
}

// serve runs req and splits stdout into progress lines, the reply and the
// rest.
func serve(t *testing.T, fs fileop.Files, skillsDir string, req fileop.Request, stdin []byte) (progress []string, rep fileop.Reply, rest []byte) {
	t.Helper()
	var out bytes.Buffer
	if err := fileop.Serve(context.Background(), fs, skillsDir, req, bytes.NewReader(stdin), &out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&out)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no reply in %q", out.String())
		}
		if strings.HasPrefix(line, "+") {
			progress = append(progress, strings.TrimSpace(line))
			continue
		}
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatal(err)
		}
		break
	}
	rest, _ = io.ReadAll(br)
	return progress, rep, rest
}

func chunked(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, fileop.EncodeChunk(p)...)
	}
	return b
}

func TestServeWriteOpenAndCutShort(t *testing.T) {
	fs, d := folders(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), fileop.ProgressEvery/16+100)
	req := fileop.Request{Op: fileop.OpWrite, Path: "/mnt/user-data/uploads/a/b.txt", Limit: -1}
	progress, rep, _ := serve(t, fs, d.Skills, req, chunked(data[:1000], data[1000:], nil))
	if rep.Error != nil || rep.Info == nil || rep.Info.Size != int64(len(data)) {
		t.Fatalf("write reply %+v", rep)
	}
	if len(progress) == 0 || progress[len(progress)-1] != fmt.Sprintf("+%d", len(data)) {
		t.Errorf("progress %v, want it to end at +%d", progress, len(data))
	}
	if b, err := os.ReadFile(filepath.Join(d.Uploads, "a", "b.txt")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("stored %d bytes, %v", len(b), err)
	}

	_, rep, rest := serve(t, fs, d.Skills, fileop.Request{Op: fileop.OpOpen, Path: "/mnt/user-data/uploads/a/b.txt"}, nil)
	if rep.Error != nil || !bytes.Equal(rest, data) {
		t.Errorf("open: %+v, %d bytes", rep.Error, len(rest))
	}

	// Stdin that ends without the end mark stores nothing and keeps what
	// was there.
	_, rep, _ = serve(t, fs, d.Skills, req, chunked([]byte("partial")))
	if rep.Error == nil {
		t.Fatal("a cut-short write succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(d.Uploads, "a", "b.txt")); !bytes.Equal(b, data) {
		t.Error("a cut-short write changed the file")
	}
	if ents, _ := os.ReadDir(filepath.Join(d.Uploads, "a")); len(ents) != 1 {
		t.Errorf("a cut-short write left %d entries", len(ents))
	}

	_, rep, _ = serve(t, fs, d.Skills, fileop.Request{Op: fileop.OpWrite, Path: "/mnt/user-data/outputs/x", Limit: 3}, chunked([]byte("four"), nil))
	if rep.Error == nil || !errors.Is(rep.Error.Err(), file.ErrTooLarge) {
		t.Errorf("write past the limit: %+v", rep.Error)
	}
	if err := os.Symlink("/etc", filepath.Join(d.Outputs, "etc")); err != nil {
		t.Fatal(err)
	}
	_, rep, _ = serve(t, fs, d.Skills, fileop.Request{Op: fileop.OpOpen, Path: "/mnt/user-data/outputs/etc/passwd"}, nil)
	if rep.Error == nil || !errors.Is(rep.Error.Err(), file.ErrSymlink) {
		t.Errorf("open through a symlink: %+v", rep.Error)
	}
	_, rep, _ = serve(t, fs, d.Skills, fileop.Request{Op: fileop.OpRemovePrefix, Mount: "uploads", Prefix: "a/"}, nil)
	if rep.Error != nil || rep.Count != 1 {
		t.Errorf("remove prefix: %+v", rep)
	}
}

// TestServeSkills: the skills folder comes to hold exactly the tar's
// tree; names out of the folder, links and trees past the limit are
// refused and leave it as it was.
func TestServeSkills(t *testing.T) {
	fs, d := folders(t)
	if err := os.MkdirAll(filepath.Join(d.Skills, "old", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := func(entries ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				tw.Write(bytes.Repeat([]byte("s"), int(h.Size)))
			}
		}
		tw.Close()
		return chunked(b.Bytes(), nil)
	}
	req := fileop.Request{Op: fileop.OpSkills, Path: sandbox.SkillsDir, Limit: 100}
	_, rep, _ := serve(t, fs, d.Skills, req, tree(
		&tar.Header{Name: "csv/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "csv/SKILL.md", Typeflag: tar.TypeReg, Size: 5, Mode: 0o644},
		&tar.Header{Name: "pdf/lib/a.py", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
	))
	if rep.Error != nil {
		t.Fatal(rep.Error.Message)
	}
	var got []string
	filepath.WalkDir(d.Skills, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(d.Skills, p)
			got = append(got, rel)
		}
		return nil
	})
	if strings.Join(got, ",") != "csv/SKILL.md,pdf/lib/a.py" {
		t.Errorf("skills folder holds %v", got)
	}
	for _, bad := range [][]byte{
		tree(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1}),
		tree(&tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Size: 1}),
		tree(&tar.Header{Name: "csv/link", Typeflag: tar.TypeSymlink, Linkname: "/etc"}),
		tree(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 101}),
	} {
		if _, rep, _ := serve(t, fs, d.Skills, req, bad); rep.Error == nil {
			t.Error("a bad tree was installed")
		}
	}
	if ents, _ := os.ReadDir(d.Skills); len(ents) != 2 {
		t.Errorf("after refused trees the folder has %d entries", len(ents))
	}
	if _, err := fileop.ParseRequest(`{"op":"skills","path":"/mnt/user-data/outputs"}`); err == nil {
		t.Error("skills into another folder accepted")
	}
}

func TestParseRequest(t *testing.T) {
	for _, tt := range []struct {
		arg string
		ok  bool
	}{
		{`{"op":"stat","path":"/mnt/user-data/outputs"}`, true},
		{`{"op":"remove-prefix","mount":"outputs","prefix":"a"}`, true},
		{`{"op":"remove-prefix","mount":"/etc"}`, false},
		{`{"op":"stat"}`, false},
		{`{"op":"chmod","path":"/x"}`, false},
		{`{"op":"stat","path":"/x","extra":1}`, false},
		{`{"op":"write-extents","path":"/x","size":1099511627776,"limit":5}`, true},
		{`{"op":"write-extents","path":"/x","size":-1}`, false},
		{`not json`, false},
	} {
		if _, err := fileop.ParseRequest(tt.arg); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.arg, err)
		}
	}
	args, err := fileop.Request{Op: fileop.OpStat, Path: "/p"}.Args("/agent")
	if err != nil || len(args) != 3 || args[1] != fileop.Command {
		t.Fatalf("args %q %v", args, err)
	}
	if r, err := fileop.ParseRequest(args[2]); err != nil || r.Path != "/p" {
		t.Errorf("round trip: %+v %v", r, err)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(`{"op":"write","path":"/mnt/user-data/uploads/x","limit":5}`)
	f.Add(`{"op":"remove-prefix","mount":"skills"}`)
	f.Fuzz(func(t *testing.T, arg string) {
		r, err := fileop.ParseRequest(arg)
		if err != nil {
			return
		}
		args, err := r.Args("/a")
		if err != nil {
			t.Fatal(err)
		}
		if r2, err := fileop.ParseRequest(args[2]); err != nil || r2 != r {
			t.Errorf("round trip of %q: %+v %v", arg, r2, err)
		}
	})
}

// FuzzWriteStdin feeds arbitrary stdin to a write: it never stores more
// bytes than stdin holds, and stores only when stdin ends with the end
// mark.
func FuzzWriteStdin(f *testing.F) {
	f.Add(chunked([]byte("abc"), nil))
	f.Add(chunked([]byte("abc")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	fs, d := folders(f)
	skillsDir := d.Skills
	f.Fuzz(func(t *testing.T, stdin []byte) {
		var out bytes.Buffer
		req := fileop.Request{Op: fileop.OpWrite, Path: "/mnt/user-data/outputs/f", Limit: -1}
		if err := fileop.Serve(context.Background(), fs, skillsDir, req, bytes.NewReader(stdin), &out); err != nil {
			t.Fatal(err)
		}
		line := out.Bytes()[bytes.LastIndexByte(bytes.TrimSuffix(out.Bytes(), []byte("\n")), '\n')+1:]
		var rep fileop.Reply
		if err := json.Unmarshal(line, &rep); err != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		if rep.Error == nil && rep.Info.Size > int64(len(stdin)) {
			t.Errorf("stored %d bytes from %d of stdin", rep.Info.Size, len(stdin))
		}
	})
}
