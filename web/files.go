package web

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"threadbox/app/credentials"
	"threadbox/app/files"
	"threadbox/domain/fault"
	"threadbox/domain/file"
)

// DefaultMaxUploadBytes is the server's upload cap when Options leave it
// unset (the org policy's cap applies too).
const DefaultMaxUploadBytes int64 = 5 << 30

// filesPrefix is the Files API's base path; the key of a PUT and the file
// id of the per-file routes are read from the raw path after it.
const filesPrefix = "/api/gpt/v1/files"

// contentCSP is sent with every file content response: a downloaded file
// never runs script or loads anything in the server's origin.
const contentCSP = "sandbox; default-src 'none'"

// previewCSP is the policy of an HTML or SVG file served for a live
// preview (?disposition=preview), as chat apps show such artifacts: its
// own inline script and style and data: or blob: images run in a sandbox
// of an opaque origin (no same-origin access, no top navigation, forms
// or popups), nothing is loaded from the network, and only this origin's
// pages may frame it.
const previewCSP = "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; " +
	"img-src data: blob:; font-src data:; media-src data: blob:; form-action 'none'; base-uri 'none'; frame-ancestors 'self'"

// livePreview reports whether a file of type mime is previewed live, in a
// sandboxed frame under previewCSP: HTML and SVG.
func livePreview(mime string) bool {
	base, _, _ := strings.Cut(mime, ";")
	switch strings.ToLower(strings.TrimSpace(base)) {
	case "text/html", "image/svg+xml":
		return true
	}
	return false
}

// fileScope is the scope of a file object.
type fileScope struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// fileObject is the Files API's file object (docs/api.md).
type fileObject struct {
	ID           string     `json:"id"`
	CreatedAt    time.Time  `json:"created_at"`
	Filename     string     `json:"filename"`
	MIMEType     string     `json:"mime_type"`
	SizeBytes    int64      `json:"size_bytes"`
	Type         string     `json:"type"`
	Downloadable bool       `json:"downloadable"`
	ExpiresAt    *time.Time `json:"expires_at"`
	ETag         string     `json:"etag"`
	Namespace    string     `json:"namespace"`
	Scope        fileScope  `json:"scope"`
}

func viewFile(f files.File) fileObject {
	o := fileObject{
		ID: f.ID, CreatedAt: f.CreatedAt, Filename: f.Filename, MIMEType: f.MIMEType,
		SizeBytes: f.SizeBytes, Type: "file", Downloadable: f.Downloadable, ETag: f.ETag,
		Namespace: "session", Scope: fileScope{ID: f.ScopeID, Type: "session"},
	}
	if !f.ExpiresAt.IsZero() {
		t := f.ExpiresAt.UTC()
		o.ExpiresAt = &t
	}
	return o
}

// expiresIn parses expires_in_seconds (a query parameter or a form
// field): a whole number of seconds.
func expiresIn(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < int64(files.MinExpiry.Seconds()) || n > int64(files.MaxExpiry.Seconds()) {
		return 0, fault.Errorf(fault.Invalid, "expires_in_seconds must be a whole number between %d and %d", int(files.MinExpiry.Seconds()), int(files.MaxExpiry.Seconds()))
	}
	return time.Duration(n) * time.Second, nil
}

type fileDeleted struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

type prefixDeleted struct {
	Prefix       string `json:"prefix"`
	DeletedCount int    `json:"deleted_count"`
	Type         string `json:"type"`
}

// rawTail returns the raw (undecoded) request path after the Files API's
// base path and its slash: Fiber's route matching is case-insensitive and
// its parameters are not what the client sent byte for byte, so keys and
// ids are always taken from the original path.
func rawTail(c *fiber.Ctx) (string, bool) {
	raw := string(c.Request().URI().PathOriginal())
	if len(raw) <= len(filesPrefix) || !strings.EqualFold(raw[:len(filesPrefix)], filesPrefix) || raw[len(filesPrefix)] != '/' {
		return "", false
	}
	return raw[len(filesPrefix)+1:], true
}

// Draining bounds: what is left of a refused or finished upload body is
// read and discarded up to these, so that the client (still sending) reads
// the response instead of a connection reset, and the connection can serve
// another request; past them the connection is closed after the response.
const (
	drainMax  = 1 << 30
	drainTime = 10 * time.Second
)

// requestBody is the request body as a stream (the server streams request
// bodies), or the buffered body when there is none. It remembers the end:
// fasthttp's chunked stream must not be read past it. A body that ends
// before its Content-Length, or fails to read (a chunked body cut inside
// a chunk), is errTornBody: fasthttp's stream reports a client that left
// mid-upload as a plain EOF or an unexpected one, which would store the
// torn upload as if it were complete, or answer it as the server's
// failure (500, logged at ERROR).
//
// A chunked body cut between two chunks ends, in fasthttp's stream, with
// the same io.EOF as one that ended with its last chunk: there the client
// connection tells them apart — one that has been closed (end of file on
// a non-blocking peek) did not send its last chunk.
type requestBody struct {
	r    io.Reader
	eof  bool
	want int64 // the declared Content-Length; negative when none
	got  int64
	peer net.Conn // the client connection of a streamed chunked body
}

// bodyReader returns the request's body as a stream. One request has one:
// the reader is kept in the request's user values, where guardRequests
// finds what the handler left unread.
func bodyReader(c *fiber.Ctx) *requestBody {
	if c.Context().RequestBodyStream() != nil {
		return requestBodyOf(c.Context())
	}
	return &requestBody{r: bytes.NewReader(c.Body()), want: -1}
}

// requestBodyOf returns the reader of a request's streamed body, made on
// first use.
func requestBodyOf(ctx *fasthttp.RequestCtx) *requestBody {
	if b, ok := ctx.UserValue(requestBodyKey{}).(*requestBody); ok {
		return b
	}
	b := &requestBody{r: ctx.RequestBodyStream(), want: int64(ctx.Request.Header.ContentLength())}
	if b.want < 0 {
		b.peer = ctx.Conn()
	}
	ctx.SetUserValue(requestBodyKey{}, b)
	return b
}

// requestBodyKey keys a request's body reader in its locals.
type requestBodyKey struct{}

// Read reads the body until its end.
func (b *requestBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	b.got += int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if b.want >= 0 && b.got < b.want {
			return n, errTornBody
		}
		if b.peer != nil && peerClosed(b.peer) {
			return n, fmt.Errorf("%w (a chunked body cut between chunks)", errTornBody)
		}
		b.eof = true
	default:
		// A chunked body cut inside a chunk (io.ErrUnexpectedEOF, which
		// copy loops take for the end), a connection reset: the client
		// left, its request failed, not the server.
		return n, fmt.Errorf("%w (%v)", errTornBody, err) // not %w: copy loops take ErrUnexpectedEOF for the end
	}
	return n, err
}

// errTornBody is a request body that ended before its Content-Length (or
// its last chunk). It
// is not io.EOF nor io.ErrUnexpectedEOF, which copy loops (io.ReadFull)
// take for the end of the input.
var errTornBody = errors.New("the request body ended before its Content-Length (the client left)")

// finish discards what is left of the body (within the draining bounds),
// or marks the connection to be closed after the response. guardRequests
// calls it after every request that left its body unread.
func (b *requestBody) finish(ctx *fasthttp.RequestCtx) {
	deadline := time.Now().Add(drainTime)
	buf := make([]byte, 32<<10)
	for n := int64(0); n < drainMax && time.Now().Before(deadline); {
		m, err := b.Read(buf)
		n += int64(m)
		if b.eof {
			return
		}
		if err != nil {
			break
		}
	}
	ctx.SetConnectionClose()
}

// uploadFile is POST /files: a multipart body whose "file" part is stored
// at the key in "path" (query or a form field before the file) or at its
// file name, read as a stream.
func (s *Server) uploadFile(c *fiber.Ctx) error {
	return s.receiveUpload(c, func(req files.UploadRequest) (files.File, error) {
		req.ScopeID = c.Query("scope_id")
		return s.svc.Files.Upload(c.UserContext(), principal(c), req)
	})
}

// receiveUpload reads a multipart upload as a stream and hands its "file"
// part to store (POST /files, a thread's upload-file).
func (s *Server) receiveUpload(c *fiber.Ctx, store func(files.UploadRequest) (files.File, error)) error {
	mt, params, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	if err != nil || mt != fiber.MIMEMultipartForm || params["boundary"] == "" {
		return fault.New(fault.Invalid, "the request must be multipart/form-data with a 'file' field")
	}
	body := bodyReader(c)
	key, keyGiven := c.Query("path"), c.Request().URI().QueryArgs().Has("path")
	var ttl time.Duration
	if v := c.Query("expires_in_seconds"); v != "" {
		if ttl, err = expiresIn(v); err != nil {
			return err
		}
	}
	// multipart reads in 4 KiB steps; the buffer in between turns those
	// into few large reads of the connection.
	mr := multipart.NewReader(bufio.NewReaderSize(body, multipartBuffer), params["boundary"])
	var (
		stored   files.File
		uploaded bool
	)
	// refuse answers err for a body found bad after its file was stored
	// (a field after it, the body's end): the file is removed again,
	// unless an Idempotency-Key remembers it.
	refuse := func(err error) error {
		if uploaded && c.Get("Idempotency-Key") == "" {
			_, _ = s.svc.Files.Delete(c.UserContext(), principal(c), stored.ScopeID, stored.ID)
		}
		return err
	}
	for {
		part, err := mr.NextPart()
		// Only a bare io.EOF is the closing boundary; NextPart wraps the
		// io.EOF of a body that ended without one.
		if err == io.EOF {
			break
		}
		if err != nil {
			return refuse(fault.Wrap(fault.Invalid, "malformed multipart body", err))
		}
		switch name := part.FormName(); {
		case name == "path":
			v, err := io.ReadAll(io.LimitReader(part, file.MaxKeyLen+1))
			if err != nil {
				return refuse(fault.Wrap(fault.Invalid, "malformed multipart body", err))
			}
			if len(v) > file.MaxKeyLen {
				return refuse(fault.Errorf(fault.Invalid, "path is longer than %d bytes", file.MaxKeyLen))
			}
			if uploaded {
				return refuse(fault.New(fault.Invalid, "the 'path' field must come before the 'file' field"))
			}
			if keyGiven && string(v) != key {
				return fault.New(fault.Invalid, "path was given twice with different values")
			}
			key, keyGiven = string(v), true
		case name == "expires_in_seconds":
			// The official SDKs send it after the file: it then applies to
			// the file stored, which a bad value removes again.
			v, err := io.ReadAll(io.LimitReader(part, 64))
			if err != nil {
				return refuse(fault.Wrap(fault.Invalid, "malformed multipart body", err))
			}
			d, err := expiresIn(string(v))
			if err == nil && uploaded {
				var expiring files.File
				if expiring, err = s.svc.Files.Expire(c.UserContext(), principal(c), stored.ScopeID, stored.ID, d); err == nil {
					stored = expiring
				}
			}
			if err != nil {
				return refuse(err)
			}
			ttl = d
		case name == "file" && !uploaded:
			filename := partFilename(part)
			if !keyGiven && (filename == "" || strings.ContainsAny(filename, "/\\\r\n")) {
				return fault.Errorf(fault.Invalid, "invalid file name %q: give a plain file name or a 'path'", filename)
			}
			stored, err = store(files.UploadRequest{
				Key:            key,
				Filename:       filename,
				Body:           fillReader{part},
				Limit:          s.maxUpload,
				IdempotencyKey: c.Get("Idempotency-Key"),
				ExpiresIn:      ttl,
			})
			if err != nil {
				return err
			}
			uploaded = true
		default:
			if _, err := io.Copy(io.Discard, part); err != nil {
				return refuse(fault.Wrap(fault.Invalid, "malformed multipart body", err))
			}
		}
	}
	if !uploaded {
		return fault.New(fault.Invalid, "multipart field 'file' is required")
	}
	return c.JSON(viewFile(stored))
}

// multipartBuffer is the read buffer under a multipart upload.
const multipartBuffer = 256 << 10

// fillReader fills each read as far as it can: a multipart part returns a
// few KiB per read, and fuller reads mean fewer, larger file writes. A
// part that ends without a boundary after it (the body ended first) is
// errUnclosedMultipart, never the end of the file: its bytes may stop
// anywhere.
type fillReader struct{ r io.Reader }

func (f fillReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := f.r.Read(p[n:])
		n += m
		switch {
		case err == nil:
		case errors.Is(err, io.ErrUnexpectedEOF):
			return n, errUnclosedMultipart // not %w: copy loops take ErrUnexpectedEOF for the end
		default:
			return n, err
		}
	}
	return n, nil
}

// errUnclosedMultipart is a multipart body whose part ended without the
// boundary that closes it: the body was cut short, or framed wrongly (a
// Content-Length shorter than the body), so the part is not stored.
var errUnclosedMultipart = errors.New("malformed multipart body: it ended before the boundary that closes its part")

// partFilename returns the file name a multipart part declares, as sent
// (multipart.Part.FileName would silently strip folders), with the escapes
// browsers make in it undone: the HTML standard's multipart/form-data
// encoding sends `"` as %22 and CR and LF as %0D and %0A.
func partFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return browserEscapes.Replace(params["filename"])
}

// browserEscapes undoes the escapes of a browser's multipart file name.
var browserEscapes = strings.NewReplacer("%22", `"`, "%0D", "\r", "%0A", "\n", "%0d", "\r", "%0a", "\n")

// putFile is PUT /files/{key}: the raw body stored at key, S3-style. The
// key is the raw path, so percent-encoded separators and dots reach the
// key validator as sent.
func (s *Server) putFile(c *fiber.Ctx) error {
	raw, ok := rawTail(c)
	key, err := putKey(raw, ok, "a key is required: PUT /api/gpt/v1/files/{key}")
	if err != nil {
		return err
	}
	f, err := s.svc.Files.Put(c.UserContext(), principal(c), c.Query("scope_id"), key, bodyReader(c), s.maxUpload)
	return answer(c, f, err, viewFile)
}

// putKey returns the key of a PUT whose raw path tail is raw (ok false
// when the path has no tail): pathKey's, or missing when the tail is.
func putKey(raw string, ok bool, missing string) (string, error) {
	if !ok || raw == "" {
		return "", fault.New(fault.Invalid, missing)
	}
	return pathKey(raw)
}

// pathKey returns the upload key a raw URL path tail names. The raw key is
// checked first, so that encoded separators, dots and NULs are refused
// rather than decoded into a valid-looking key; then it is unescaped once,
// as any URL path is ("my%20file.txt"). A '%' that escapes nothing stays
// literal.
func pathKey(raw string) (string, error) {
	if err := file.ValidateKey(raw); err != nil {
		return "", fault.Errorf(fault.Invalid, "invalid file path %q: keys are UTF-8 and relative, contain no '..' or empty segments, no backslash or control character, and do not end in '/'", raw)
	}
	key, err := url.PathUnescape(raw)
	if err != nil {
		return raw, nil
	}
	return key, nil
}

// listFiles is GET /files.
func (s *Server) listFiles(c *fiber.Ctx) error {
	lp := files.ListParams{AfterID: c.Query("after_id"), BeforeID: c.Query("before_id"), Prefix: c.Query("prefix")}
	var err error
	if lp.Limit, err = queryLimit(c, lp.Limit, files.MaxListLimit); err != nil {
		return err
	}
	page, err := s.svc.Files.List(c.UserContext(), principal(c), c.Query("scope_id"), lp)
	if err != nil {
		return err
	}
	return c.JSON(idPageOf(views(page.Data, viewFile), page.HasMore, func(o fileObject) string { return o.ID }))
}

// fileRoute dispatches GET, HEAD and DELETE /files/{file_id}[/content] on
// the raw path: an id holding '/' (the standard base64 alphabet) is a 400,
// not an unknown route.
func (s *Server) fileRoute(c *fiber.Ctx) error {
	tail, _ := rawTail(c)
	id, content := tail, false
	if head, ok := strings.CutSuffix(tail, "/content"); ok && !strings.Contains(head, "/") {
		id, content = head, true
	}
	if _, err := file.DecodeID(id); err != nil {
		return fault.Errorf(fault.Invalid, "invalid file id %q: file ids are the unpadded base64url of the file's path", id)
	}
	switch {
	case content && c.Method() != fiber.MethodDelete:
		return s.fileContent(c, id)
	case content:
		return fault.New(fault.Invalid, "DELETE a file with /api/gpt/v1/files/{file_id}")
	case c.Method() == fiber.MethodHead:
		return s.fileHead(c, id)
	case c.Method() == fiber.MethodDelete:
		return s.deleteFile(c, id)
	}
	return s.fileMetadata(c, id)
}

func (s *Server) fileMetadata(c *fiber.Ctx, id string) error {
	f, err := s.svc.Files.Metadata(c.UserContext(), principal(c), c.Query("scope_id"), id)
	return answer(c, f, err, viewFile)
}

// fileHead is HEAD /files/{file_id}: the file object in X-File-* headers.
func (s *Server) fileHead(c *fiber.Ctx, id string) error {
	f, err := s.svc.Files.Metadata(c.UserContext(), principal(c), c.Query("scope_id"), id)
	if err != nil {
		return err
	}
	o := viewFile(f)
	c.Set("X-File-Id", o.ID)
	c.Set("X-File-Created-At", o.CreatedAt.Format(time.RFC3339Nano))
	c.Set("X-File-Filename", encodeExtValue(o.Filename)) // percent-encoded UTF-8
	c.Set("X-File-Mime-Type", o.MIMEType)
	c.Set("X-File-Size-Bytes", strconv.FormatInt(o.SizeBytes, 10))
	c.Set("X-File-Type", o.Type)
	c.Set("X-File-Downloadable", strconv.FormatBool(o.Downloadable))
	if o.ExpiresAt != nil {
		c.Set("X-File-Expires-At", o.ExpiresAt.Format(time.RFC3339))
	}
	c.Set("X-File-Etag", o.ETag)
	c.Set("X-File-Namespace", o.Namespace)
	c.Set("X-File-Scope-Id", encodeExtValue(o.Scope.ID))
	c.Set("X-File-Scope-Type", o.Scope.Type)
	c.Set(fiber.HeaderETag, strconv.Quote(o.ETag))
	return c.SendStatus(fiber.StatusOK)
}

func (s *Server) deleteFile(c *fiber.Ctx, id string) error {
	id, err := s.svc.Files.Delete(c.UserContext(), principal(c), c.Query("scope_id"), id)
	if err != nil {
		return err
	}
	return c.JSON(fileDeleted{ID: id, Type: "file_deleted"})
}

// deletePrefix is DELETE /files?prefix=: every uploaded file under prefix.
func (s *Server) deletePrefix(c *fiber.Ctx) error {
	prefix := c.Query("prefix")
	n, err := s.svc.Files.DeletePrefix(c.UserContext(), principal(c), c.Query("scope_id"), prefix)
	if err != nil {
		return err
	}
	return c.JSON(prefixDeleted{Prefix: prefix, DeletedCount: n, Type: "prefix_deleted"})
}

// fileContent is GET /files/{file_id}/content: the bytes, streamed from the
// open file (sendfile where the connection allows), with a single byte
// range when asked.
func (s *Server) fileContent(c *fiber.Ctx, id string) error {
	disp, err := disposition(c)
	if err != nil {
		return err
	}
	ct, err := s.svc.Files.Open(c.UserContext(), principal(c), c.Query("scope_id"), id)
	if err != nil {
		return err
	}
	if ct, err = s.withCredentials(c, ct, credentials.Provenance{Container: c.Query("scope_id")}); err != nil {
		return err
	}
	return sendContent(c, ct, disp)
}

// sendContent sends an opened file with the safe serving headers (nosniff,
// a sandboxing CSP, an RFC 6266 Content-Disposition, inline only for types
// that allow it) and a single byte range when asked. An HTML or SVG file
// asked for a preview is sent inline under previewCSP, which runs its
// scripts in a sandbox; any other file asked for a preview is sent as
// asked inline. It closes ct.Body.
func sendContent(c *fiber.Ctx, ct files.Content, disp string) error {
	f := ct.File
	csp := contentCSP
	if disp == "preview" {
		disp = "inline"
		if livePreview(f.MIMEType) {
			csp = previewCSP
		}
	}
	if disp == "inline" && !f.Inline && csp != previewCSP {
		disp = "attachment" // HTML, SVG, XML and the like are never shown inline but previewed
	}
	c.Set(fiber.HeaderContentType, f.MIMEType)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentSecurityPolicy, csp)
	c.Set(fiber.HeaderContentDisposition, contentDisposition(disp, f.Filename))
	c.Set(fiber.HeaderETag, strconv.Quote(f.ETag))
	c.Set(fiber.HeaderCacheControl, "private, no-cache")
	c.Set(fiber.HeaderAcceptRanges, "bytes")

	start, length, status := int64(0), f.SizeBytes, fiber.StatusOK
	if rh := c.Get(fiber.HeaderRange); rh != "" && ifRangeMatches(c.Get(fiber.HeaderIfRange), f.ETag) {
		st, n, ok, satisfiable := parseRange(rh, f.SizeBytes)
		switch {
		case ok && !satisfiable:
			ct.Body.Close()
			c.Set(fiber.HeaderContentRange, "bytes */"+strconv.FormatInt(f.SizeBytes, 10))
			c.Response().Header.Del(fiber.HeaderContentDisposition)
			return writeError(c, fiber.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("range %q is outside the file's %d bytes", rh, f.SizeBytes))
		case ok:
			start, length, status = st, n, fiber.StatusPartialContent
			c.Set(fiber.HeaderContentRange, "bytes "+strconv.FormatInt(st, 10)+"-"+strconv.FormatInt(st+n-1, 10)+"/"+strconv.FormatInt(f.SizeBytes, 10))
		}
	}
	if start > 0 {
		if _, err := ct.Body.Seek(start, io.SeekStart); err != nil {
			ct.Body.Close()
			return fault.Wrap(fault.Internal, "file storage error", err)
		}
	}
	c.Status(status)
	// fasthttp closes the stream once the response is written (or skipped
	// for HEAD).
	c.Context().SetBodyStream(newSendStream(ct.Body, length), int(length))
	return nil
}

// sendStream sends length bytes of an open file. Its WriteTo hands an
// io.LimitedReader over the file to the connection's buffered writer, so
// on a TCP connection the kernel copies with sendfile; the limit keeps a
// file growing under the download from overrunning Content-Length.
type sendStream struct {
	c  io.Closer
	lr io.LimitedReader
}

func newSendStream(f io.ReadSeekCloser, length int64) *sendStream {
	var r io.Reader = f
	if osf, ok := f.(*os.File); ok {
		r = osf // a syscall.Conn: sendfile-capable
	}
	return &sendStream{c: f, lr: io.LimitedReader{R: r, N: length}}
}

// Read reads from the file up to the length.
func (s *sendStream) Read(p []byte) (int, error) { return s.lr.Read(p) }

// WriteTo copies the rest of the length to w, zero-copy when w allows.
func (s *sendStream) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, &s.lr) }

// Close closes the file.
func (s *sendStream) Close() error { return s.c.Close() }

// parseRange parses a Range header for a file of size bytes. ok is false
// when the header is to be ignored (not a single well-formed byte range:
// the whole file is sent); satisfiable is false for a 416.
func parseRange(h string, size int64) (start, length int64, ok, satisfiable bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false, false
	}
	num := func(s string) (int64, bool) {
		if s == "" || strings.TrimLeft(s, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	if first == "" { // suffix: the last N bytes
		n, valid := num(last)
		if !valid {
			return 0, 0, false, false
		}
		if n == 0 || size == 0 {
			return 0, 0, true, false
		}
		n = min(n, size)
		return size - n, n, true, true
	}
	st, valid := num(first)
	if !valid {
		return 0, 0, false, false
	}
	end := size - 1
	if last != "" {
		e, valid := num(last)
		if !valid || e < st {
			return 0, 0, false, false
		}
		end = min(e, size-1)
	}
	if st >= size {
		return 0, 0, true, false
	}
	return st, end - st + 1, true, true
}

// ifRangeMatches reports whether a Range may be honoured under If-Range:
// absent, or the file's current strong ETag.
func ifRangeMatches(ifRange, etag string) bool {
	return ifRange == "" || ifRange == strconv.Quote(etag)
}

// contentDisposition builds an RFC 6266 header: an ASCII fallback name
// (quotes, backslashes, percent signs, controls and non-ASCII replaced)
// and the exact name as RFC 8187 filename*.
func contentDisposition(kind, name string) string {
	return kind + `; filename="` + asciiFallback(name) + `"; filename*=UTF-8''` + encodeExtValue(name)
}

func asciiFallback(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\' || ch == '%' {
			// One '_' per UTF-8 sequence rather than per byte.
			if ch >= 0xc0 || ch < 0x80 {
				b.WriteByte('_')
			}
			continue
		}
		b.WriteByte(ch)
	}
	if b.Len() == 0 {
		return "download"
	}
	return b.String()
}

// encodeExtValue percent-encodes every byte outside RFC 8187's attr-char.
func encodeExtValue(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if isAttrChar(ch) {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&0xf])
	}
	return b.String()
}

func isAttrChar(ch byte) bool {
	switch {
	case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9':
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", ch) >= 0
}

// disposition is a download's ?disposition=: attachment (the default),
// inline, or preview (inline, and an HTML or SVG file under previewCSP).
func disposition(c *fiber.Ctx) (string, error) {
	d := c.Query("disposition", "attachment")
	if d != "attachment" && d != "inline" && d != "preview" {
		return "", fault.New(fault.Invalid, "disposition must be 'inline', 'preview' or 'attachment'")
	}
	return d, nil
}
