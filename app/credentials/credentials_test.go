package credentials

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"threadbox/app/files"
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
		ct := files.Content{File: files.File{Path: "/p", MIMEType: "image/png", SizeBytes: 3, Downloadable: true, ETag: "e"}, Body: &body{Reader: bytes.NewReader([]byte("png"))}}
		if _, err := svc.Apply(context.Background(), user.Principal{OrgID: "o"}, ct, Provenance{}); err != nil {
			t.Fatal(err)
		}
	}
	if sg.n != 1 {
		t.Fatalf("signed %d times, want once", sg.n)
	}
	var nilSvc *Service
	if nilSvc.Wants(files.File{MIMEType: "image/png", Downloadable: true}) {
		t.Fatal("a nil service wants to sign")
	}
}
