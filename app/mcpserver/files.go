package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/files"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/file/filetype"
	"threadbox/domain/sandbox"
	"threadbox/domain/thread"
)

// The file tools and resources work on the session's container through
// the Files API's use cases, under the same policy (uploads, downloads)
// and quotas: list_files lists its uploads and outputs, read_file and
// delete_file take any file under its folders, write_file stores under
// uploads or outputs (workspace files are written with the text editor).

// uriScheme is the scheme of the container files' resource URIs:
// sandbox:///<container id>/<absolute sandbox path>, the container id as
// the client names it (a thread id, a container id, or "default").
const uriScheme = "sandbox:///"

// resourceTemplate matches every container file's URI.
const resourceTemplate = uriScheme + "{container}{+path}"

// fileURI is the resource URI of a container file.
func fileURI(scope, sandboxPath string) string {
	if scope == "" {
		scope = container.DefaultClientID
	}
	segs := strings.Split(strings.TrimPrefix(sandboxPath, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return uriScheme + url.PathEscape(scope) + "/" + strings.Join(segs, "/")
}

// parseURI returns the container and the sandbox path of a resource URI.
func parseURI(uri string) (scope, sandboxPath string, err error) {
	rest, ok := strings.CutPrefix(uri, uriScheme)
	if !ok {
		return "", "", fault.Errorf(fault.NotFound, "no resource %s: container files are %s<container>/<path>", uri, uriScheme)
	}
	s, p, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", fault.Errorf(fault.NotFound, "no resource %s: the URI names no file", uri)
	}
	if scope, err = url.PathUnescape(s); err != nil {
		return "", "", fault.Errorf(fault.NotFound, "no resource %s: %v", uri, err)
	}
	if sandboxPath, err = url.PathUnescape("/" + p); err != nil {
		return "", "", fault.Errorf(fault.NotFound, "no resource %s: %v", uri, err)
	}
	return scope, sandboxPath, nil
}

// link is the resource link of a container file (size < 0: unknown).
func link(scope, sandboxPath string, size int64) *mcp.ResourceLink {
	l := &mcp.ResourceLink{URI: fileURI(scope, sandboxPath), Name: path.Base(sandboxPath), Title: sandboxPath, MIMEType: filetype.Detect(path.Base(sandboxPath), nil).MIME}
	if size >= 0 {
		l.Size = &size
	}
	return l
}

// absPath makes a path the client gave absolute: a relative one resolves
// in the workspace, as the code-execution tools resolve it.
func absPath(p string) string {
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	return path.Join(sandbox.WorkspaceDir, p)
}

// fileObject is a file as the Files API shows it, with its sandbox path
// and resource URI.
type fileObject struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Path         string    `json:"path"`
	URI          string    `json:"uri"`
	Filename     string    `json:"filename"`
	MIMEType     string    `json:"mime_type"`
	SizeBytes    int64     `json:"size_bytes"`
	CreatedAt    time.Time `json:"created_at"`
	Downloadable bool      `json:"downloadable"`
	ETag         string    `json:"etag"`
	Scope        struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"scope"`
}

func viewFile(scope string, f files.File) fileObject {
	o := fileObject{ID: f.ID, Type: "file", Path: f.Path, URI: fileURI(scope, f.Path), Filename: f.Filename, MIMEType: f.MIMEType,
		SizeBytes: f.SizeBytes, CreatedAt: f.CreatedAt, Downloadable: f.Downloadable, ETag: f.ETag}
	o.Scope.ID, o.Scope.Type = f.ScopeID, "session"
	return o
}

// fileTools are the tools over the container's files.
func fileTools() []toolDef {
	return []toolDef{
		{name: "list_files", files: true, run: toolOf((*Service).listFiles),
			desc: "List the uploaded files (/mnt/user-data/uploads) and output files (/mnt/user-data/outputs) of the sandbox, oldest first, " +
				"as the Files API lists them; each comes with a resource link.",
			schema: json.RawMessage(`{"type":"object","properties":{` +
				`"prefix":{"type":"string","description":"Only files whose key starts with it (outputs' keys start with outputs/)."},` +
				`"limit":{"type":"integer","minimum":1,"maximum":1000,"description":"Files per page (default 20)."},` +
				`"after_id":{"type":"string","description":"The page after this file id."}},"additionalProperties":false}`)},
		{name: "read_file", run: toolOf((*Service).readFile),
			desc: "Read a file of the sandbox: an absolute path under /home/agent/workspace, /mnt/user-data/uploads or " +
				"/mnt/user-data/outputs, or a path relative to the workspace. Text comes back as text, other files as an embedded resource.",
			schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","minLength":1}},"required":["path"],"additionalProperties":false}`)},
		{name: "write_file", files: true, run: toolOf((*Service).writeFile),
			desc: "Store a file in the sandbox as the Files API does: path is /mnt/user-data/outputs/<name> (a deliverable) or " +
				"/mnt/user-data/uploads/<name> (an input, read-only to code), or a key (outputs/<name>, or <name> for uploads). " +
				"Workspace files are written with text_editor_code_execution's create.",
			schema: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","minLength":1},"content":{"type":"string"},` +
				`"encoding":{"type":"string","enum":["utf-8","base64"],"description":"How content is written (default utf-8)."}},` +
				`"required":["path","content"],"additionalProperties":false}`)},
		{name: "delete_file", files: true, run: toolOf((*Service).deleteFile),
			desc:   "Delete a file of the sandbox (uploads, outputs or workspace; absolute, or relative to the workspace).",
			schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","minLength":1}},"required":["path"],"additionalProperties":false}`)},
	}
}

// listFilesInput holds the arguments of list_files.
type listFilesInput struct {
	Prefix  string `json:"prefix"`
	Limit   int    `json:"limit"`
	AfterID string `json:"after_id"`
}

func (s *Service) listFiles(ctx context.Context, req *mcp.CallToolRequest, c Caller, in listFilesInput) (*mcp.CallToolResult, error) {
	scope := s.scopeOf(req.Session, c)
	page, err := s.d.Files.List(ctx, c.Principal, scope, files.ListParams{Prefix: in.Prefix, Limit: in.Limit, AfterID: in.AfterID})
	if err != nil {
		return s.failed(err), nil
	}
	out := struct {
		Data    []fileObject `json:"data"`
		HasMore bool         `json:"has_more"`
		FirstID string       `json:"first_id,omitempty"`
		LastID  string       `json:"last_id,omitempty"`
	}{Data: []fileObject{}, HasMore: page.HasMore, FirstID: page.FirstID, LastID: page.LastID}
	var links []*mcp.ResourceLink
	for _, f := range page.Data {
		out.Data = append(out.Data, viewFile(scope, f))
		links = append(links, link(scope, f.Path, f.SizeBytes))
	}
	r, err := jsonResult(out)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		r.Content = append(r.Content, l)
	}
	return r, nil
}

// read opens a container file and reads it whole, refusing one larger
// than MaxReadBytes.
func (s *Service) read(ctx context.Context, c Caller, scope, sandboxPath string) (files.File, []byte, error) {
	if s.d.Files == nil {
		return files.File{}, nil, fault.New(fault.Unavailable, "container files are not configured on this server")
	}
	content, err := s.d.Files.OpenPath(ctx, c.Principal, scope, sandboxPath)
	if err != nil {
		return files.File{}, nil, err
	}
	defer content.Body.Close()
	if content.File.SizeBytes > s.d.MaxReadBytes {
		return files.File{}, nil, fault.Errorf(fault.TooLarge, "%s is %d bytes, more than the %d bytes a read returns; read part of it with a command (head, tail, sed -n)", sandboxPath, content.File.SizeBytes, s.d.MaxReadBytes)
	}
	b, err := io.ReadAll(io.LimitReader(content.Body, s.d.MaxReadBytes+1))
	if err != nil {
		return files.File{}, nil, fmt.Errorf("mcpserver: read %s: %w", sandboxPath, err)
	}
	if int64(len(b)) > s.d.MaxReadBytes {
		return files.File{}, nil, fault.Errorf(fault.TooLarge, "%s is larger than the %d bytes a read returns", sandboxPath, s.d.MaxReadBytes)
	}
	return content.File, b, nil
}

// isText reports whether b reads as text.
func isText(b []byte) bool { return utf8.Valid(b) && !strings.ContainsRune(string(b), 0) }

// readFileInput holds the arguments of read_file.
type readFileInput struct {
	Path string `json:"path"`
}

func (s *Service) readFile(ctx context.Context, req *mcp.CallToolRequest, c Caller, in readFileInput) (*mcp.CallToolResult, error) {
	scope := s.scopeOf(req.Session, c)
	f, b, err := s.read(ctx, c, scope, absPath(in.Path))
	if err != nil {
		return s.failed(err), nil
	}
	if isText(b) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: fileURI(scope, f.Path), MIMEType: f.MIMEType, Blob: b}}}}, nil
}

// keyOf is the Files API key of a path write_file takes: an absolute path
// under uploads or outputs, or a key as it is.
func keyOf(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return p, nil
	}
	loc, err := file.DefaultTable().Resolve(p)
	if err == nil {
		if key, ok := file.KeyOf(loc.Mount, loc.Rel); ok && loc.Rel != "." {
			return key, nil
		}
	}
	return "", fault.Errorf(fault.Invalid, "write_file stores files under %s or %s; write %s with text_editor_code_execution's create", sandbox.UploadsDir, sandbox.OutputsDir, p)
}

// writeFileInput holds the arguments of write_file.
type writeFileInput struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
}

func (s *Service) writeFile(ctx context.Context, req *mcp.CallToolRequest, c Caller, in writeFileInput) (*mcp.CallToolResult, error) {
	body := []byte(in.Content)
	if in.Encoding == "base64" {
		var err error
		if body, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return errorResult("Invalid input: content is not base64: " + err.Error()), nil
		}
	}
	key, err := keyOf(in.Path)
	if err != nil {
		return s.failed(err), nil
	}
	scope := s.scopeOf(req.Session, c)
	f, err := s.d.Files.Put(ctx, c.Principal, scope, key, strings.NewReader(string(body)), 0)
	if err != nil {
		return s.failed(err), nil
	}
	r, err := jsonResult(viewFile(scope, f))
	if err != nil {
		return nil, err
	}
	r.Content = append(r.Content, link(scope, f.Path, f.SizeBytes))
	return r, nil
}

// deleteFileInput holds the arguments of delete_file.
type deleteFileInput struct {
	Path string `json:"path"`
}

func (s *Service) deleteFile(ctx context.Context, req *mcp.CallToolRequest, c Caller, in deleteFileInput) (*mcp.CallToolResult, error) {
	p := absPath(in.Path)
	if _, err := s.d.Files.Delete(ctx, c.Principal, s.scopeOf(req.Session, c), file.EncodeID(p)); err != nil {
		return s.failed(err), nil
	}
	return jsonResult(map[string]any{"deleted": true, "path": p, "id": file.EncodeID(p)})
}

// addResources makes the container's files MCP resources: the template
// names every one, resources/list lists the session container's uploads
// and outputs, and resources/read reads any file the caller may download.
func (s *Service) addResources() {
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "sandbox-file", Title: "A file of a threadbox sandbox", URITemplate: resourceTemplate,
		Description: "A file of a sandbox: sandbox:///<container>/<absolute path>, the container a thread id, a container id or default.",
	}, s.readResource)
	s.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if lr, ok := req.(*mcp.ListResourcesRequest); ok && method == "resources/list" {
				return s.listResources(ctx, lr)
			}
			return next(ctx, method, req)
		}
	})
}

// listResources lists the session container's uploads and outputs, a page
// of the Files API's listing per call (the cursor is the last file id).
func (s *Service) listResources(ctx context.Context, req *mcp.ListResourcesRequest) (*mcp.ListResourcesResult, error) {
	c, ok := callerOf(req.Extra)
	if !ok {
		return nil, errNoCaller
	}
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	if s.d.Files == nil {
		return out, nil
	}
	scope := s.scopeOf(req.Session, c)
	lp := files.ListParams{Limit: 100}
	if req.Params != nil {
		lp.AfterID = req.Params.Cursor
	}
	page, err := s.d.Files.List(ctx, c.Principal, scope, lp)
	if fault.Is(err, fault.NotFound) {
		return out, nil // no container yet: no files
	}
	if err != nil {
		return nil, fmt.Errorf("%s", s.explain(err))
	}
	for _, f := range page.Data {
		out.Resources = append(out.Resources, &mcp.Resource{URI: fileURI(scope, f.Path), Name: f.Filename, Title: f.Path, MIMEType: f.MIMEType, Size: f.SizeBytes})
	}
	if page.HasMore {
		out.NextCursor = page.LastID
	}
	return out, nil
}

// readResource reads a container file by its URI.
func (s *Service) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	c, ok := callerOf(req.Extra)
	if !ok {
		return nil, errNoCaller
	}
	scope, p, err := parseURI(req.Params.URI)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if scope == container.DefaultClientID {
		scope = ""
	}
	f, b, err := s.read(ctx, c, scope, p)
	if fault.Is(err, fault.NotFound) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, fmt.Errorf("%s", s.explain(err))
	}
	rc := &mcp.ResourceContents{URI: req.Params.URI, MIMEType: f.MIMEType}
	if isText(b) {
		rc.Text = string(b)
	} else {
		rc.Blob = b
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}, nil
}

// threadTools choose the session's container.
func threadTools() []toolDef {
	return []toolDef{
		{name: "list_threads", run: toolOf((*Service).listThreads),
			desc: "List your threads, newest first: each thread has its own sandbox. use_sandbox switches this session to one.",
			schema: json.RawMessage(`{"type":"object","properties":{` +
				`"project_id":{"type":"string","description":"Only this project's threads."},` +
				`"limit":{"type":"integer","minimum":1,"maximum":100,"description":"Threads to list (default 20)."},` +
				`"before":{"type":"string","description":"A thread id: list older threads."}},"additionalProperties":false}`)},
		{name: "use_sandbox", run: toolOf((*Service).useSandbox),
			desc: "Choose the sandbox this session works in: a thread's (thread_id), a named container of yours (container_id; " +
				"made on first use), or, with neither, your default container.",
			schema: json.RawMessage(`{"type":"object","properties":{` +
				`"thread_id":{"type":"string","minLength":1},"container_id":{"type":"string","minLength":1}},"additionalProperties":false}`)},
	}
}

// listThreadsInput holds the arguments of list_threads.
type listThreadsInput struct {
	ProjectID string `json:"project_id"`
	Limit     int    `json:"limit"`
	Before    string `json:"before"`
}

func (s *Service) listThreads(ctx context.Context, req *mcp.CallToolRequest, c Caller, in listThreadsInput) (*mcp.CallToolResult, error) {
	if s.d.Threads == nil {
		return errorResult("Threads are not configured on this server."), nil
	}
	if in.Limit == 0 {
		in.Limit = 20
	}
	ths, err := s.d.Threads.Threads(ctx, c.Principal, in.ProjectID, thread.Page{Limit: in.Limit + 1, Before: in.Before})
	if err != nil {
		return s.failed(err), nil
	}
	type view struct {
		ID        string    `json:"id"`
		Title     string    `json:"title"`
		ProjectID string    `json:"project_id"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	current := s.scopeOf(req.Session, c)
	if current == "" {
		current = container.DefaultClientID
	}
	out := struct {
		Data    []view `json:"data"`
		HasMore bool   `json:"has_more"`
		Current string `json:"current_sandbox"`
	}{Data: []view{}, Current: current}
	for i, t := range ths {
		if i == in.Limit {
			out.HasMore = true
			break
		}
		out.Data = append(out.Data, view{ID: t.ID(), Title: t.Title(), ProjectID: t.ProjectID(), UpdatedAt: t.UpdatedAt()})
	}
	return jsonResult(out)
}

// useSandboxInput holds the arguments of use_sandbox.
type useSandboxInput struct {
	ThreadID    string `json:"thread_id"`
	ContainerID string `json:"container_id"`
}

func (s *Service) useSandbox(ctx context.Context, req *mcp.CallToolRequest, c Caller, in useSandboxInput) (*mcp.CallToolResult, error) {
	scope := ""
	switch {
	case in.ThreadID != "" && in.ContainerID != "":
		return errorResult("Invalid input: give thread_id or container_id, not both."), nil
	case in.ThreadID != "":
		if s.d.Threads == nil {
			return errorResult("Threads are not configured on this server."), nil
		}
		if _, err := s.d.Threads.Thread(ctx, c.Principal, in.ThreadID); err != nil {
			return s.failed(err), nil
		}
		scope = in.ThreadID
	case in.ContainerID != "":
		if err := container.ValidateClientID(in.ContainerID); err != nil {
			return s.failed(err), nil
		}
		if _, isThread := container.ParseRef(in.ContainerID).Thread(); isThread {
			return errorResult("Invalid input: " + in.ContainerID + " is a thread id: give it as thread_id."), nil
		}
		scope = in.ContainerID
	}
	if req.Session == nil || req.Session.ID() == "" {
		return errorResult("This session has no id, so it cannot keep a choice: name the thread in the URL (/mcp/threads/<id>) instead."), nil
	}
	s.choose(req.Session, scope)
	shown := scope
	if shown == "" {
		shown = container.DefaultClientID
	}
	return jsonResult(map[string]string{"sandbox": shown})
}
