package credentials

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"threadbox/app/files"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// prefixSigner "signs" PNGs by putting a marker before the bytes; a file
// starting with "bad" is unsignable. It counts its signings.
type prefixSigner struct{ n int }

func (p *prefixSigner) Signs(mime string) bool { return mime == "image/png" }

func (p *prefixSigner) Sign(_ context.Context, r io.ReaderAt, size int64, mime string, prov Provenance) (Signed, error) {
	head := make([]byte, 3)
	if _, err := r.ReadAt(head, 0); err == nil && string(head) == "bad" {
		return Signed{}, ErrUnsignable
	}
	p.n++
	mark := []byte("[" + prov.Org + "]")
	return Signed{Size: size + int64(len(mark)), Tag: "t", At: func(stored io.ReaderAt) io.ReaderAt {
		return &joined{mark: mark, rest: io.NewSectionReader(stored, 0, size)}
	}}, nil
}

type joined struct {
	mark []byte
	rest *io.SectionReader
}

func (j *joined) ReadAt(b []byte, off int64) (int, error) {
	all, _ := io.ReadAll(io.NewSectionReader(j.rest, 0, j.rest.Size()))
	all = append(append([]byte{}, j.mark...), all...)
	if off >= int64(len(all)) {
		return 0, io.EOF
	}
	n := copy(b, all[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

type policies struct{ p org.Policy }

func (p policies) OrgPolicy(context.Context, string) (org.Policy, error) { return p.p, nil }

type body struct {
	*bytes.Reader
	closed bool
}

func (b *body) Close() error { b.closed = true; return nil }

func TestApply(t *testing.T) {
	off := org.DefaultPolicy().WithContentCredentials(false)
	cases := []struct {
		name     string
		mime     string
		content  string
		uploaded bool
		policy   org.Policy
		want     string
	}{
		{"generated PNG is signed", "image/png", "png-bytes", false, org.DefaultPolicy(), "[org_1]png-bytes"},
		{"uploaded PNG as written", "image/png", "png-bytes", true, org.DefaultPolicy(), "png-bytes"},
		{"text as written", "text/plain", "hello", false, org.DefaultPolicy(), "hello"},
		{"policy off: as written", "image/png", "png-bytes", false, off, "png-bytes"},
		{"unsignable: as written", "image/png", "bad-png", false, org.DefaultPolicy(), "bad-png"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := New(&prefixSigner{}, policies{tc.policy}, slog.New(slog.DiscardHandler))
			b := &body{Reader: bytes.NewReader([]byte(tc.content))}
			ct := files.Content{File: files.File{Path: "/mnt/user-data/outputs/x", MIMEType: tc.mime, SizeBytes: int64(len(tc.content)), Downloadable: !tc.uploaded, ETag: "e"}, Body: b}
			got, err := svc.Apply(context.Background(), user.Principal{OrgID: "org_1"}, ct, Provenance{Thread: "thr_1"})
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(got.Body)
			if string(out) != tc.want || got.File.SizeBytes != int64(len(tc.want)) {
				t.Fatalf("got %q (size %d), want %q", out, got.File.SizeBytes, tc.want)
			}
			if (got.File.ETag != "e") != (tc.want != tc.content) {
				t.Errorf("etag %q: a signed form needs its own", got.File.ETag)
			}
			got.Body.Close()
			if !b.closed {
				t.Error("closing the content did not close the stored file")
			}
		})
	}
}

// A second download of an unchanged file gets the signed form kept from
// the first: the same bytes, signed once.
func TestApplyKeepsTheSignedForm(t *testing.T) {
	sg := &prefixSigner{}
	svc := New(sg, policies{org.DefaultPolicy()}, slog.New(slog.DiscardHandler))
	for range 3 {
		ct := files.Content{File: files.File{Path: "/p", MIMEType: "image/png", SizeBytes: 3, Downloadable: true, ETag: "e"}, Body: &body{Reader: bytes.NewReader([]byte("png"))}, Source: "container:c"}
		if _, err := svc.Apply(context.Background(), user.Principal{OrgID: "o"}, ct, Provenance{}); err != nil {
			t.Fatal(err)
		}
	}
	if sg.n != 1 {
		t.Fatalf("signed %d times, want once", sg.n)
	}
	for range 2 {
		ct := files.Content{File: files.File{Path: "/p", MIMEType: "image/png", SizeBytes: 3, Downloadable: true, ETag: "e"}, Body: &body{Reader: bytes.NewReader([]byte("png"))}}
		if _, err := svc.Apply(context.Background(), user.Principal{OrgID: "o"}, ct, Provenance{}); err != nil {
			t.Fatal(err)
		}
	}
	if sg.n != 3 {
		t.Fatalf("signed %d times, want a content of no source signed each time", sg.n)
	}
	var nilSvc *Service
	if nilSvc.Wants(files.File{MIMEType: "image/png", Downloadable: true}) {
		t.Fatal("a nil service wants to sign")
	}
}

// hashSigner "signs" by putting the SHA-256 of the bytes it read before
// them, as a manifest binds the content it was made for.
type hashSigner struct{}

func (hashSigner) Signs(mime string) bool { return mime == "image/png" }

func (hashSigner) Sign(_ context.Context, r io.ReaderAt, size int64, _ string, _ Provenance) (Signed, error) {
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		return Signed{}, err
	}
	sum := sha256.Sum256(b)
	mark := []byte("[" + hex.EncodeToString(sum[:4]) + "]")
	return Signed{Size: size + int64(len(mark)), Tag: string(mark), At: func(stored io.ReaderAt) io.ReaderAt {
		return &joined{mark: mark, rest: io.NewSectionReader(stored, 0, size)}
	}}, nil
}

// userContainers gives each user a default container of their own, as
// app/containers does for a download with no scope_id.
type userContainers struct{}

func (userContainers) Container(_ context.Context, p user.Principal, scopeID string, _ bool) (string, error) {
	return p.UserID + "--" + cmp.Or(scopeID, "default"), nil
}

func (c userContainers) StorageID(ctx context.Context, p user.Principal, scopeID string) (string, error) {
	return c.Container(ctx, p, scopeID, false)
}

// twinStore holds one file per container at the same path, whose stat
// (size, modification time, inode) is the same in every container, as on
// per-container filesystem images made alike.
type twinStore struct {
	files.Store
	content map[string]string // by container storage id
}

func (s twinStore) Open(_ context.Context, cid, sandboxPath string) (io.ReadSeekCloser, file.Info, error) {
	c, ok := s.content[cid]
	if !ok {
		return nil, file.Info{}, file.ErrNotFound
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	info := file.Info{Rel: strings.TrimPrefix(sandboxPath, "/mnt/user-data/outputs/"), Size: int64(len(c)), Created: at, Modified: at, Inode: 12}
	return &body{Reader: bytes.NewReader([]byte(c))}, info, nil
}

// Two users of one org download a file from their default containers (no
// scope_id) at the same path with the same stat: each gets their own
// file signed, never the signed form kept from the other's.
func TestApplyKeepsNoSignedFormAcrossContainers(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n"
	content := map[string]string{"usr_a--default": png + "alice's", "usr_b--default": png + "bobby's"}
	fs := files.New(files.Deps{Store: twinStore{content: content}, Containers: userContainers{}, Policies: policies{org.DefaultPolicy()}})
	svc := New(hashSigner{}, policies{org.DefaultPolicy()}, slog.New(slog.DiscardHandler))
	id := file.EncodeID("/mnt/user-data/outputs/chart.png")
	for _, u := range []string{"usr_a", "usr_b"} {
		p := user.Principal{OrgID: "org_1", UserID: u}
		ct, err := fs.Open(context.Background(), p, "", id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := svc.Apply(context.Background(), p, ct, Provenance{}) // as the web layer makes it of no scope_id
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(got.Body)
		got.Body.Close()
		own := content[u+"--default"]
		sum := sha256.Sum256([]byte(own))
		if want := "[" + hex.EncodeToString(sum[:4]) + "]" + own; string(out) != want {
			t.Fatalf("%s got %q, want %q: a signed form made for another container's file", u, out, want)
		}
	}
}
