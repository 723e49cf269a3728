// Package credentials decides which downloads carry Content Credentials
// and derives their signed form (docs/content-credentials.md): generated
// files (outputs of code, workspace files and artifacts, not uploads) of a
// signed media type, in an org whose policy has contentCredentials on, are
// served with a C2PA manifest embedded; every other download is served
// byte for byte. The stored file is never changed.
package credentials

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"threadbox/app/files"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// Provenance names where a generated file came from, for the manifest's
// threadbox assertion.
type Provenance struct {
	Org       string
	Thread    string // the thread, when the file is a thread's
	Container string // the Files API container (scope), otherwise
	ToolUseID string // the tool call that wrote the file, when known
	Path      string // the file's sandbox path
}

// Signed is the signed form of a file: its size, its bytes (read from the
// stored file as they are sent) and a tag that differs between two signed
// forms of the same file.
type Signed struct {
	Size int64
	At   func(stored io.ReaderAt) io.ReaderAt
	Tag  string
}

// Signer embeds a signed manifest in a file (infra/c2pa through the
// server's wiring).
type Signer interface {
	// Signs reports whether files of the MIME type are signed.
	Signs(mime string) bool
	// Sign returns the signed form of the size bytes of r. A file whose
	// structure is not its type's returns an error wrapping ErrUnsignable.
	Sign(ctx context.Context, r io.ReaderAt, size int64, mime string, p Provenance) (Signed, error)
}

// ErrUnsignable marks a file the signer cannot embed a manifest in; it is
// then served as written.
var ErrUnsignable = errors.New("credentials: the file cannot carry a manifest")

// Policies returns an org's policy (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Service signs downloads.
type Service struct {
	signer   Signer
	policies Policies
	log      *slog.Logger
	mu       sync.Mutex
	cache    map[string]Signed
	order    []string
}

// cacheSize bounds the signed forms kept: each is a manifest of a few KB
// and the offsets of the stored file's ranges, so a range request or a
// repeat download of an unchanged file gets the same bytes.
const cacheSize = 1024

// New returns the service; a nil signer signs nothing.
func New(signer Signer, policies Policies, log *slog.Logger) *Service {
	return &Service{signer: signer, policies: policies, log: log, cache: map[string]Signed{}}
}

// Wants reports whether a download of f may be signed (a generated file
// of a signed type), before the org's policy is read.
func (s *Service) Wants(f files.File) bool {
	return s != nil && s.signer != nil && f.Downloadable && s.signer.Signs(f.MIMEType)
}

// Apply returns the content to send for a download: ct itself, or its
// signed form when the file is generated, of a signed type, and the org's
// policy has contentCredentials on. The signed form's SizeBytes is the
// signed size and its ETag the stored file's with the signature's tag; its
// Body still closes the stored file. The signed form is kept for a repeat
// download of the file from the same source (ct.Source): its path and tag,
// and the scope id as the client gave it, are alike for files in two
// users' containers. A content that names no source is signed each time.
func (s *Service) Apply(ctx context.Context, p user.Principal, ct files.Content, prov Provenance) (files.Content, error) {
	if !s.Wants(ct.File) {
		return ct, nil
	}
	policy, err := s.policies.OrgPolicy(ctx, p.OrgID)
	if err != nil {
		ct.Body.Close()
		return files.Content{}, fmt.Errorf("credentials: policy: %w", err)
	}
	if !policy.Allows(org.ContentCredentials) {
		return ct, nil
	}
	prov.Org = p.OrgID
	if prov.Path == "" {
		prov.Path = ct.File.Path
	}
	stored := readerAt(ct.Body)
	key := ""
	if ct.Source != "" {
		key = strings.Join([]string{ct.Source, ct.File.Path, ct.File.ETag, fmt.Sprint(ct.File.SizeBytes), prov.Org, prov.Thread, prov.Container, prov.ToolUseID}, "\x00")
	}
	sig, ok := s.cached(key)
	if !ok {
		sig, err = s.signer.Sign(ctx, stored, ct.File.SizeBytes, ct.File.MIMEType, prov)
		if errors.Is(err, ErrUnsignable) {
			s.log.Warn("content credentials: file served unsigned", "path", ct.File.Path, "mime", ct.File.MIMEType, "err", err)
			return ct, nil
		}
		if err != nil {
			ct.Body.Close()
			return files.Content{}, fmt.Errorf("credentials: sign %s: %w", ct.File.Path, err)
		}
		s.keep(key, sig)
	}
	f := ct.File
	f.SizeBytes = sig.Size
	f.ETag = ct.File.ETag + "-c2pa-" + sig.Tag
	return files.Content{File: f, Body: &signedBody{SectionReader: io.NewSectionReader(sig.At(stored), 0, sig.Size), c: ct.Body}, Source: ct.Source}, nil
}

// cached returns the signed form kept under key; the empty key has none.
func (s *Service) cached(key string) (Signed, bool) {
	if key == "" {
		return Signed{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.cache[key]
	return v, ok
}

// keep keeps a signed form under key, unless key is empty.
func (s *Service) keep(key string, v Signed) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cache[key]; ok {
		return
	}
	if len(s.order) >= cacheSize {
		delete(s.cache, s.order[0])
		s.order = s.order[1:]
	}
	s.cache[key] = v
	s.order = append(s.order, key)
}

// signedBody is the signed form's bytes; Close closes the stored file.
type signedBody struct {
	*io.SectionReader
	c io.Closer
}

func (b *signedBody) Close() error { return b.c.Close() }

// readerAt reads a stored file at offsets: directly when it can (a file
// on disk), otherwise by seeking under a lock.
func readerAt(r io.ReadSeeker) io.ReaderAt {
	if ra, ok := r.(io.ReaderAt); ok {
		return ra
	}
	return &seekReaderAt{r: r}
}

type seekReaderAt struct {
	mu sync.Mutex
	r  io.ReadSeeker
}

func (s *seekReaderAt) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.r.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	n, err := io.ReadFull(s.r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}
