package files

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/file/filetype"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// List limits of the Files API (docs/api.md).
const (
	DefaultListLimit = 20
	MaxListLimit     = 1000
)

// File is the Files API's file object. The web layer adds the constant
// fields (type "file", namespace "session", scope type "session").
type File struct {
	ID           string // file.EncodeID(Path)
	Path         string // absolute sandbox path
	Key          string // the upload key, for uploads and outputs; "" for workspace files
	CreatedAt    time.Time
	Filename     string
	MIMEType     string
	SizeBytes    int64
	Downloadable bool      // true for outputs (and workspace files), false for uploads
	ETag         string    // changes whenever the file's content may have
	ScopeID      string    // the scope_id as the client gave it
	Inline       bool      // the content may be served with disposition=inline
	ExpiresAt    time.Time // zero: the file does not expire
}

// Page is one page of a listing.
type Page struct {
	Data    []File
	FirstID string // "" when Data is empty
	LastID  string
	HasMore bool
}

// ListParams select a page of a listing.
type ListParams struct {
	Limit    int    // 1..MaxListLimit; 0 means DefaultListLimit
	AfterID  string // the page after this file
	BeforeID string // the page before this file
	Prefix   string // only files whose key starts with it
}

// UploadRequest is one upload (POST /files, or a thread's upload-file).
type UploadRequest struct {
	ScopeID        string
	Key            string // the path= parameter; empty means Filename
	Filename       string // the multipart file name
	Body           io.Reader
	Limit          int64  // the server's cap in bytes; the org policy's cap applies too
	IdempotencyKey string // optional
	// ExpiresIn, when set, is how long after the upload the file expires
	// (MinExpiry..MaxExpiry): then it is deleted and answers 404.
	ExpiresIn time.Duration
}

// Content is an opened file to send: its metadata and its bytes. The caller
// closes Body.
type Content struct {
	File File
	Body io.ReadSeekCloser
	// Source names what holds the bytes, telling apart files of the same
	// path in two containers: "container:" and the storage id of the
	// container the file is in, or "blob:" and the SHA-256 of stored
	// content. File.ScopeID cannot: a scope id as the client gave it names
	// a container of each user's own (no scope id, the default one).
	Source string
}

// Deps are what a Service needs.
type Deps struct {
	Store       Store
	Containers  Containers
	Policies    Policies
	Idempotency Idempotency      // nil means an in-memory map kept one day
	Quota       Quota            // nil means no storage quota is checked
	Records     Records          // nil means no expiry and no retained outputs
	Blobs       Blobs            // where retained outputs are kept; nil means none is
	Now         func() time.Time // nil means time.Now
	// MaxRetainedBytes bounds what Retain writes to the blob store for one
	// container, quota or not: an output larger is not retained, and the
	// holes its outputs write out may not pass it together. Zero means
	// DefaultMaxRetainedBytes.
	MaxRetainedBytes int64
}

// DefaultMaxRetainedBytes is Deps.MaxRetainedBytes' default, the default
// of ARTIFACT_MAX_BYTES too: the blob store of retained files is on the
// host's disk as the artifacts' is.
const DefaultMaxRetainedBytes = 1 << 30

// Service runs the Files API use cases.
type Service struct {
	store      Store
	containers Containers
	policies   Policies
	idem       Idempotency
	quota      Quota
	records    Records
	blobs      Blobs
	now        func() time.Time
	table      file.Table
	maxRetain  int64
}

// New returns the Files API use cases over d.
func New(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Idempotency == nil {
		d.Idempotency = NewMemoryIdempotency(0, d.Now)
	}
	if d.MaxRetainedBytes <= 0 {
		d.MaxRetainedBytes = DefaultMaxRetainedBytes
	}
	return &Service{
		store:      d.Store,
		containers: d.Containers,
		policies:   d.Policies,
		idem:       d.Idempotency,
		quota:      d.Quota,
		records:    d.Records,
		blobs:      d.Blobs,
		now:        d.Now,
		table:      file.DefaultTable(),
		maxRetain:  d.MaxRetainedBytes,
	}
}

// Upload stores an uploaded file at its key (or its file name) and returns
// its file object. With an IdempotencyKey, a repeat of the same request
// returns the first result without storing again, and a reuse of the key
// for another file or scope is a conflict, as is a repeat while the first
// upload is still running.
func (s *Service) Upload(ctx context.Context, p user.Principal, req UploadRequest) (File, error) {
	key := req.Key
	if key == "" {
		key = req.Filename
	}
	if err := s.checkExpiry(req.ExpiresIn); err != nil {
		return File{}, err
	}
	if req.IdempotencyKey == "" {
		return s.put(ctx, p, req.ScopeID, key, req.Body, req.Limit, req.ExpiresIn)
	}
	if len(req.IdempotencyKey) > 255 {
		return File{}, fault.New(fault.Invalid, "Idempotency-Key is longer than 255 characters")
	}
	idemKey := p.OrgID + "\x00" + p.UserID + "\x00" + req.IdempotencyKey
	if p.Kind == user.SandboxToken {
		// A sandbox token's keys are its container's own: its uploads
		// without scope_id go to that container, not to the user's default
		// one, and it may not learn of the user's uploads elsewhere.
		idemKey += "\x00sandbox\x00" + p.ContainerID
	}
	fingerprint := req.ScopeID + "\x00" + key
	saved, claimed, err := s.idem.Claim(ctx, idemKey, fingerprint)
	if err != nil {
		return File{}, fmt.Errorf("files: idempotency claim: %w", err)
	}
	switch {
	case claimed:
	case saved.Fingerprint != fingerprint:
		return File{}, fault.New(fault.Conflict, "Idempotency-Key was already used for a different upload")
	case saved.Pending:
		return File{}, fault.New(fault.Conflict, "an upload with this Idempotency-Key is still in progress; retry it when that one has finished")
	default:
		return saved.File, nil
	}
	// The claim is settled even when the client has gone: a claim left
	// behind would hold the key until ClaimTTL.
	settle := context.WithoutCancel(ctx)
	f, err := s.put(ctx, p, req.ScopeID, key, req.Body, req.Limit, req.ExpiresIn)
	if err != nil {
		if rerr := s.idem.Release(settle, idemKey); rerr != nil {
			return File{}, errors.Join(err, fmt.Errorf("files: idempotency release: %w", rerr))
		}
		return File{}, err
	}
	if err := s.idem.Save(settle, idemKey, Saved{Fingerprint: fingerprint, File: f, At: s.now()}); err != nil {
		return File{}, fmt.Errorf("files: idempotency save: %w", err)
	}
	return f, nil
}

// Put stores a raw body at key, S3-style (PUT /files/{key}, a thread's
// put-file), and returns its file object.
func (s *Service) Put(ctx context.Context, p user.Principal, scopeID, key string, body io.Reader, limit int64) (File, error) {
	return s.put(ctx, p, scopeID, key, body, limit, 0)
}

func (s *Service) put(ctx context.Context, p user.Principal, scopeID, key string, body io.Reader, limit int64, expiresIn time.Duration) (File, error) {
	sandboxPath, err := file.KeyPath(key)
	if err != nil {
		return File{}, fault.Errorf(fault.Invalid, "invalid file path %q: keys are UTF-8 and relative, contain no '..' or empty segments, no backslash or control character, and do not end in '/'", key)
	}
	policy, err := s.policies.OrgPolicy(ctx, p.OrgID)
	if err != nil {
		return File{}, fmt.Errorf("files: policy: %w", err)
	}
	if !policy.Allows(org.Uploads) {
		return File{}, org.Refusal(org.Uploads)
	}
	if max := policy.MaxUploadBytes(); max > 0 && (limit <= 0 || max < limit) {
		limit = max
	}
	// The org's storage quota caps the upload at what is left, checked
	// before the container is made: a refused upload leaves nothing.
	storage, left := policy.Quotas().Limit(org.StorageBytesPerOrg), int64(-1)
	if storage > 0 && s.quota != nil {
		if left, err = s.quota.StorageLeft(ctx, p.OrgID); err != nil {
			return File{}, err
		}
		if left >= 0 && (limit <= 0 || left < limit) {
			limit = left
		} else {
			left = -1 // the upload cap is the smaller: it is the one named
		}
	}
	cid, err := s.containers.Container(ctx, p, scopeID, true)
	if err != nil {
		return File{}, err
	}
	head := &headReader{r: body}
	info, err := s.store.Write(ctx, cid, sandboxPath, head, limit)
	if err != nil {
		if errors.Is(err, file.ErrServerDiskFull) || errors.Is(err, file.ErrDiskFull) {
			return File{}, writeErr(err, key)
		}
		if errors.Is(err, file.ErrTooLarge) && left >= 0 {
			return File{}, fault.Wrap(fault.TooLarge, fault.MessageOf(org.StorageExceeded(storage, storage-left, 0)), err)
		}
		if errors.Is(err, file.ErrTooLarge) {
			return File{}, fault.Wrap(fault.TooLarge, fmt.Sprintf("file exceeds the upload limit of %d bytes", limit), err)
		}
		return File{}, writeErr(err, key)
	}
	loc, err := s.table.Resolve(sandboxPath)
	if err != nil {
		return File{}, fmt.Errorf("files: %w", err)
	}
	f := s.fileOf(scopeID, loc.Mount, info, head.buf)
	// A file written anew starts without an expiry, and takes the place
	// of a retained file at its path.
	if f.ExpiresAt, err = s.noteWrite(ctx, p, cid, sandboxPath, info.Created, expiresIn); err != nil {
		return File{}, err
	}
	return f, nil
}

// List returns a page of the container's uploaded and output files, sorted
// by creation time (then id). Workspace files are not listed: they are the
// sandbox's scratch space, reachable by id.
func (s *Service) List(ctx context.Context, p user.Principal, scopeID string, lp ListParams) (Page, error) {
	if lp.Limit == 0 {
		lp.Limit = DefaultListLimit
	}
	if lp.Limit < 1 || lp.Limit > MaxListLimit {
		return Page{}, fault.Errorf(fault.Invalid, "limit must be between 1 and %d", MaxListLimit)
	}
	if lp.AfterID != "" && lp.BeforeID != "" {
		return Page{}, fault.New(fault.Invalid, "after_id and before_id cannot be used together")
	}
	cid, err := s.containers.Container(ctx, p, scopeID, false)
	live := err == nil
	if err != nil {
		// A container removed at its maximum age lists its retained
		// outputs, if it has any.
		var rerr error
		if cid, rerr = s.retainedScope(ctx, p, scopeID, err); rerr != nil {
			return Page{}, rerr
		}
	}
	recs, err := s.containerRecords(ctx, cid)
	if err != nil {
		return Page{}, err
	}
	type entry struct {
		mount file.Mount
		info  file.Info
		id    string
		rec   *Record
	}
	var all []entry
	seen := map[string]bool{}
	for _, m := range []file.Mount{file.Uploads, file.Outputs} {
		if !live {
			break
		}
		root, _ := s.table.Path(m, ".")
		infos, err := s.store.Walk(ctx, cid, root)
		if err != nil && !errors.Is(err, file.ErrNotFound) {
			return Page{}, readErr(err, root)
		}
		for _, info := range infos {
			key, _ := file.KeyOf(m, info.Rel)
			if !strings.HasPrefix(key, lp.Prefix) {
				continue
			}
			sp, _ := s.table.Path(m, info.Rel)
			seen[sp] = true
			if r, ok := recs[sp]; ok && r.Expired(s.now()) {
				continue
			}
			all = append(all, entry{mount: m, info: info, id: file.EncodeID(sp)})
		}
	}
	for sp, r := range recs {
		loc, err := s.table.Resolve(sp)
		if err != nil || seen[sp] || !r.Retained() || r.Expired(s.now()) {
			continue
		}
		if key, _ := file.KeyOf(loc.Mount, loc.Rel); !strings.HasPrefix(key, lp.Prefix) {
			continue
		}
		all = append(all, entry{mount: loc.Mount, info: file.Info{Rel: loc.Rel, Created: r.CreatedAt, Size: r.SizeBytes}, id: file.EncodeID(sp), rec: &r})
	}
	slices.SortFunc(all, func(a, b entry) int {
		if c := a.info.Created.Compare(b.info.Created); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	indexOf := func(id, param string) (int, error) {
		for i, e := range all {
			if e.id == id {
				return i, nil
			}
		}
		return 0, fault.Errorf(fault.Invalid, "%s %q does not name a listed file", param, id)
	}
	start, end := 0, min(lp.Limit, len(all))
	hasMore := len(all) > end
	switch {
	case lp.AfterID != "":
		i, err := indexOf(lp.AfterID, "after_id")
		if err != nil {
			return Page{}, err
		}
		start, end = i+1, min(i+1+lp.Limit, len(all))
		hasMore = len(all) > end
	case lp.BeforeID != "":
		i, err := indexOf(lp.BeforeID, "before_id")
		if err != nil {
			return Page{}, err
		}
		start, end = max(0, i-lp.Limit), i
		hasMore = start > 0
	}
	page := Page{Data: []File{}, HasMore: hasMore}
	for _, e := range all[start:end] {
		if e.rec != nil {
			page.Data = append(page.Data, s.retainedFile(ctx, scopeID, *e.rec))
			continue
		}
		sp, _ := s.table.Path(e.mount, e.info.Rel)
		f := s.fileOf(scopeID, e.mount, e.info, s.sniff(ctx, cid, sp))
		if r, ok := recs[sp]; ok {
			f.ExpiresAt = r.ExpiresAt
		}
		page.Data = append(page.Data, f)
	}
	if n := len(page.Data); n > 0 {
		page.FirstID, page.LastID = page.Data[0].ID, page.Data[n-1].ID
	}
	return page, nil
}

// Metadata returns the file object of a file of the container: an upload,
// an output or a workspace file.
func (s *Service) Metadata(ctx context.Context, p user.Principal, scopeID, fileID string) (File, error) {
	at, err := s.find(ctx, p, scopeID, fileID)
	if err != nil {
		return File{}, err
	}
	if at.retained() {
		return s.retainedFile(ctx, scopeID, *at.rec), nil
	}
	info, err := s.store.Stat(ctx, at.cid, at.loc.Path)
	if err != nil {
		return File{}, readErr(err, fileID)
	}
	if info.Dir {
		return File{}, notFound(fileID)
	}
	f := s.fileOf(scopeID, at.loc.Mount, info, s.sniff(ctx, at.cid, at.loc.Path))
	f.ExpiresAt = at.expiresAt()
	return f, nil
}

// Open opens a file's content for download, under the org policy: outputs
// and workspace files need downloads.generated, uploads need
// downloads.uploaded.
func (s *Service) Open(ctx context.Context, p user.Principal, scopeID, fileID string) (Content, error) {
	at, err := s.find(ctx, p, scopeID, fileID)
	if err != nil {
		return Content{}, err
	}
	if at.retained() {
		return s.openRetained(ctx, p, scopeID, *at.rec)
	}
	ct, err := s.open(ctx, p, scopeID, at.cid, at.loc, fileID)
	ct.File.ExpiresAt = at.expiresAt()
	return ct, err
}

// OpenPath is Open by sandbox path (a thread's download-file?path=).
func (s *Service) OpenPath(ctx context.Context, p user.Principal, scopeID, sandboxPath string) (Content, error) {
	loc, err := s.table.Resolve(sandboxPath)
	if err != nil || loc.Mount == file.Skills || loc.Rel == "." {
		return Content{}, fault.Errorf(fault.NotFound, "file not found: %s", sandboxPath)
	}
	cid, err := s.containers.Container(ctx, p, scopeID, false)
	if err != nil {
		return Content{}, err
	}
	return s.open(ctx, p, scopeID, cid, loc, sandboxPath)
}

func (s *Service) open(ctx context.Context, p user.Principal, scopeID, cid string, loc file.Location, name string) (Content, error) {
	feature := org.DownloadsGenerated
	if loc.Mount == file.Uploads {
		feature = org.DownloadsUploaded
	}
	policy, err := s.policies.OrgPolicy(ctx, p.OrgID)
	if err != nil {
		return Content{}, fmt.Errorf("files: policy: %w", err)
	}
	if !policy.Allows(feature) {
		return Content{}, org.Refusal(feature)
	}
	body, info, err := s.store.Open(ctx, cid, loc.Path)
	if err != nil {
		return Content{}, readErr(err, name)
	}
	head := make([]byte, filetype.SniffLen)
	n, err := io.ReadFull(body, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		body.Close()
		return Content{}, fmt.Errorf("files: read %s: %w", name, err)
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		body.Close()
		return Content{}, fmt.Errorf("files: rewind %s: %w", name, err)
	}
	return Content{File: s.fileOf(scopeID, loc.Mount, info, head[:n]), Body: body, Source: "container:" + cid}, nil
}

// Delete removes one file (uploaded, output or workspace) and returns its id.
func (s *Service) Delete(ctx context.Context, p user.Principal, scopeID, fileID string) (string, error) {
	at, err := s.find(ctx, p, scopeID, fileID)
	if err != nil {
		return "", err
	}
	if at.rec != nil {
		// A retained file, or one with an expiry: its record goes, and so
		// does the file in its container if there is one.
		if err := s.forget(ctx, *at.rec); err != nil {
			return "", err
		}
		if !at.live {
			return fileID, nil
		}
		if err := s.store.Remove(ctx, at.cid, at.loc.Path); err != nil && !errors.Is(err, file.ErrNotFound) {
			return "", readErr(err, fileID)
		}
		return fileID, nil
	}
	cid, loc := at.cid, at.loc
	info, err := s.store.Stat(ctx, cid, loc.Path)
	if err != nil {
		// A symlink or special file left by the sandbox can still be removed.
		if !errors.Is(err, file.ErrSymlink) && !errors.Is(err, file.ErrNotRegular) {
			return "", readErr(err, fileID)
		}
	} else if info.Dir {
		return "", notFound(fileID)
	}
	if err := s.store.Remove(ctx, cid, loc.Path); err != nil {
		return "", readErr(err, fileID)
	}
	return fileID, nil
}

// DeletePrefix removes every uploaded file whose key starts with prefix
// and returns how many. The prefix is a plain string prefix ("data/20"
// matches "data/2026/a.csv"); end it with "/" to stay within a folder.
func (s *Service) DeletePrefix(ctx context.Context, p user.Principal, scopeID, prefix string) (int, error) {
	if err := validatePrefix(prefix); err != nil {
		return 0, err
	}
	cid, err := s.containers.Container(ctx, p, scopeID, false)
	if err != nil {
		return 0, err
	}
	n, err := s.store.RemovePrefix(ctx, cid, file.Uploads, prefix)
	if err != nil {
		return n, readErr(err, prefix)
	}
	return n, nil
}

// validatePrefix checks a delete prefix: a key or the start of one,
// possibly ending in "/". The empty prefix is refused so that a missing
// parameter never deletes everything.
func validatePrefix(prefix string) error {
	bad := fault.Errorf(fault.Invalid, "invalid prefix %q: give a relative key prefix such as \"data/2026/\"", prefix)
	if prefix == "" {
		return fault.New(fault.Invalid, "prefix is required")
	}
	if err := file.ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return bad
	}
	if strings.HasSuffix(prefix, "//") {
		return bad
	}
	return nil
}

// sniff returns the first bytes of a file for MIME detection, or nil.
func (s *Service) sniff(ctx context.Context, cid, sandboxPath string) []byte {
	body, _, err := s.store.Open(ctx, cid, sandboxPath)
	if err != nil {
		return nil
	}
	defer body.Close()
	head := make([]byte, filetype.SniffLen)
	n, _ := io.ReadFull(body, head)
	return head[:n]
}

// fileOf builds the file object of info in mount m.
func (s *Service) fileOf(scopeID string, m file.Mount, info file.Info, head []byte) File {
	p, _ := s.table.Path(m, info.Rel)
	key, _ := file.KeyOf(m, info.Rel)
	name := path.Base(info.Rel)
	t := filetype.Detect(name, head)
	return File{
		ID:           file.EncodeID(p),
		Path:         p,
		Key:          key,
		CreatedAt:    info.Created.UTC(),
		Filename:     name,
		MIMEType:     t.MIME,
		SizeBytes:    info.Size,
		Downloadable: m != file.Uploads,
		ETag:         etag(info),
		ScopeID:      scopeID,
		Inline:       t.Inline,
	}
}

// etag is a hash of what changes when a file is rewritten (inode, size,
// modification and status change times), so it costs no read of the
// content. It is not the content's MD5. The status change time is what
// code in the sandbox cannot set back: a file rewritten in place at the
// same size, its modification time then restored, still gets a new ETag,
// and no cache keyed by it (a signed download's) serves the old content.
func etag(info file.Info) string {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], info.Inode)
	binary.LittleEndian.PutUint64(b[8:], uint64(info.Size))
	binary.LittleEndian.PutUint64(b[16:], uint64(info.Modified.UnixNano()))
	binary.LittleEndian.PutUint64(b[24:], uint64(info.Changed.UnixNano()))
	sum := md5.Sum(b[:])
	return hex.EncodeToString(sum[:])
}

func notFound(id string) error {
	return fault.Errorf(fault.NotFound, "file not found: %s", id)
}

// readErr maps a store error met while reading or deleting.
func readErr(err error, name string) error {
	var me *file.MountError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, file.ErrNotFound), errors.Is(err, file.ErrSymlink),
		errors.Is(err, file.ErrNotRegular), errors.As(err, &me):
		return fault.Wrap(fault.NotFound, "file not found: "+name, err)
	case errors.Is(err, file.ErrReadOnly):
		return fault.Wrap(fault.Forbidden, "read-only folder: "+name, err)
	case errors.Is(err, file.ErrTooLarge):
		return fault.Wrap(fault.TooLarge, "too many files", err)
	}
	return fault.Wrap(fault.Internal, "file storage error", err)
}

// writeErr maps a store error met while writing key.
func writeErr(err error, key string) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, file.ErrSymlink):
		return fault.Wrap(fault.Invalid, fmt.Sprintf("cannot write %q: the path goes through a symbolic link", key), err)
	case errors.Is(err, file.ErrNotRegular):
		return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot write %q: a folder is in the way", key), err)
	case errors.Is(err, file.ErrNotDir):
		return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot write %q: a parent is a file", key), err)
	case errors.Is(err, file.ErrReadOnly):
		return fault.Wrap(fault.Forbidden, fmt.Sprintf("cannot write %q: read-only folder", key), err)
	case errors.Is(err, file.ErrServerDiskFull):
		return fault.Wrap(fault.Unavailable, "the server's disk is full; try again later", err)
	case errors.Is(err, file.ErrDiskFull):
		return fault.Wrap(fault.TooLarge, fmt.Sprintf("cannot write %q: the container's disk is full; delete files in it to make room", key), err)
	}
	return fault.Wrap(fault.Internal, "file storage error", err)
}

// headReader passes r through, keeping its first SniffLen bytes.
type headReader struct {
	r   io.Reader
	buf []byte
}

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := filetype.SniffLen - len(h.buf); room > 0 && n > 0 {
		h.buf = append(h.buf, p[:min(n, room)]...)
	}
	return n, err
}
