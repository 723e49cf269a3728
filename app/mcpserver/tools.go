package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// toolDef is one tool of the server: its name, description and input
// schema (checked before the tool runs), whether it works on the
// container's files (and so is refused without them), and what runs it.
type toolDef struct {
	name, desc string
	schema     json.RawMessage
	resolved   *jsonschema.Resolved
	files      bool
	run        func(s *Service, ctx context.Context, req *mcp.CallToolRequest, c Caller, args json.RawMessage) (*mcp.CallToolResult, error)
}

// toolOf adapts a tool whose arguments decode into In, after the handler
// checked them against the tool's schema; arguments that still do not
// decode are the tool's error result.
func toolOf[In any](run func(s *Service, ctx context.Context, req *mcp.CallToolRequest, c Caller, in In) (*mcp.CallToolResult, error)) func(*Service, context.Context, *mcp.CallToolRequest, Caller, json.RawMessage) (*mcp.CallToolResult, error) {
	return func(s *Service, ctx context.Context, req *mcp.CallToolRequest, c Caller, args json.RawMessage) (*mcp.CallToolResult, error) {
		var in In
		if err := json.Unmarshal(args, &in); err != nil {
			return errorResult("Invalid input: " + err.Error()), nil
		}
		return run(s, ctx, req, c, in)
	}
}

// kitTools are the tool kit's tools, as the Messages API offers them to
// the model: the code-execution sub-tools (bash, text editor, the Python
// cell) and every sandbox_v1 tool.
func kitTools() []toolDef {
	defs := append(messages.SubToolDefinitions(), messages.PythonToolDefinition(""))
	defs = append(defs, messages.SandboxToolDefinitions(messages.SandboxTools)...)
	out := make([]toolDef, 0, len(defs))
	for _, d := range defs {
		name := d.Name
		out = append(out, toolDef{name: name, desc: d.Description, schema: d.InputSchema,
			run: func(s *Service, ctx context.Context, req *mcp.CallToolRequest, c Caller, args json.RawMessage) (*mcp.CallToolResult, error) {
				return s.runKit(ctx, req, c, name, args)
			}})
	}
	return out
}

// allTools are the server's tools in the order tools/list gives them.
func allTools() []toolDef {
	defs := append(kitTools(), fileTools()...)
	return append(defs, threadTools()...)
}

// addTools registers every tool with its resolved input schema.
func (s *Service) addTools() {
	for _, d := range allTools() {
		var sch jsonschema.Schema
		if err := json.Unmarshal(d.schema, &sch); err != nil {
			panic("mcpserver: tool " + d.name + ": schema: " + err.Error()) // a constant: caught by any test
		}
		rs, err := sch.Resolve(nil)
		if err != nil {
			panic("mcpserver: tool " + d.name + ": schema: " + err.Error())
		}
		d.resolved = rs
		s.srv.AddTool(&mcp.Tool{Name: d.name, Description: d.desc, InputSchema: d.schema}, s.handler(d))
	}
}

// handler checks a call's caller and arguments, then runs the tool. Input
// that does not match the schema is the tool's error result, as the MCP
// specification asks, so that the model can correct it.
func (s *Service) handler(d toolDef) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, ok := callerOf(req.Extra)
		if !ok {
			return nil, errNoCaller
		}
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 || bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
			args = json.RawMessage("{}")
		}
		var v any
		if err := json.Unmarshal(args, &v); err != nil {
			return errorResult("Invalid input: the arguments are not JSON: " + err.Error()), nil
		}
		if err := d.resolved.Validate(v); err != nil {
			return errorResult(fmt.Sprintf("Invalid input for %s: %s", d.name, err.Error())), nil
		}
		if d.files && s.d.Files == nil {
			return errorResult("Container files are not configured on this server."), nil
		}
		return d.run(s, ctx, req, c, args)
	}
}

// codeOff is what a code tool answers when the org's policy switched code
// execution off.
const codeOff = "Code execution is switched off by your organization's policy (codeExecution.enabled is false): " +
	"an org admin can switch it on in the org's features."

// runKit runs one call of the tool kit in the session's container, as the
// Messages API runs a model's call: the org's codeExecution feature must be
// on, the container is resolved through the front door of turns (quotas,
// tenancy, touch), the command gets the turn's sandbox variables, and the
// kit meters it. Output streams as progress notifications when the client
// asked for progress; the call ends when the client cancels it.
func (s *Service) runKit(ctx context.Context, req *mcp.CallToolRequest, c Caller, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	p := c.Principal
	if err := s.allows(ctx, p, org.CodeExecution); err != nil {
		if fault.Is(err, fault.Forbidden) {
			return errorResult(codeOff), nil
		}
		return errorResult("The org's policy could not be read: " + s.explain(err)), nil
	}
	sb, err := s.d.Sandboxes.OpenSandbox(ctx, p, s.scopeOf(req.Session, c))
	if err != nil {
		return errorResult("The sandbox could not be opened: " + s.explain(err)), nil
	}
	defer sb.Close()
	env, err := sb.Env(ctx)
	if err != nil {
		return errorResult("The sandbox's variables could not be issued: " + s.explain(err)), nil
	}
	call := messages.ToolCall{ID: id.New("srvtoolu"), Name: name, Input: args, ContainerID: sb.ContainerID, ScopeID: sb.ScopeID, Env: env}
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		call.Output = progress(ctx, req.Session, tok)
	}
	before := s.outputsNow(ctx, p, sb.ScopeID)
	start := time.Now()
	r, err := s.d.Tools.Execute(ctx, call)
	attrs := []any{"org_id", p.OrgID, "user_id", p.UserID, "container_id", sb.ContainerID, "tool", name, "tool_use_id", call.ID, "duration_ms", time.Since(start).Milliseconds()}
	if err != nil {
		s.log.Info("mcp tool call", append(attrs, "outcome", "cancelled")...)
		return nil, err
	}
	s.log.Info("mcp tool call", append(attrs, "outcome", map[bool]string{true: "error", false: "ok"}[r.IsError()])...)
	return resultOf(r, withChanged(outputLinks(sb.ScopeID, r), sb.ScopeID, before, s.outputsNow(ctx, p, sb.ScopeID)))
}

// outputsNow lists the container's output files by path, so that the
// outputs a call made or changed are linked whatever tool made them (a
// terminal session, a REPL cell or an edit names no files in its result).
// Nil when they cannot be listed: the call then links only what its result
// names.
func (s *Service) outputsNow(ctx context.Context, p user.Principal, scope string) map[string]files.File {
	if s.d.Files == nil {
		return nil
	}
	out := map[string]files.File{}
	lp := files.ListParams{Prefix: "outputs/", Limit: files.MaxListLimit}
	for {
		page, err := s.d.Files.List(ctx, p, scope, lp)
		if err != nil {
			return nil
		}
		for _, f := range page.Data {
			out[f.Path] = f
		}
		if !page.HasMore || len(out) >= maxListedOutputs {
			return out
		}
		lp.AfterID = page.LastID
	}
}

// maxListedOutputs bounds the listing outputsNow makes before and after a
// call; a container with more outputs links only what the result names
// beyond them.
const maxListedOutputs = 5000

// withChanged adds to links the outputs that are new or changed between
// the listings before and after a call, each once.
func withChanged(links []*mcp.ResourceLink, scope string, before, after map[string]files.File) []*mcp.ResourceLink {
	if before == nil || after == nil {
		return links
	}
	seen := map[string]bool{}
	for _, l := range links {
		seen[l.URI] = true
	}
	paths := slices.Sorted(maps.Keys(after))
	for _, p := range paths {
		f := after[p]
		if b, ok := before[p]; ok && b.ETag == f.ETag && b.SizeBytes == f.SizeBytes {
			continue
		}
		if l := link(scope, f.Path, f.SizeBytes); !seen[l.URI] {
			seen[l.URI] = true
			links = append(links, l)
		}
	}
	return links
}

// progress returns the ToolCall.Output that reports a call's output as
// progress notifications of the request's progress token: the progress is
// the bytes of output so far, the message the chunk itself.
func progress(ctx context.Context, ss *mcp.ServerSession, tok any) func(stream string, chunk []byte) {
	var (
		mu sync.Mutex
		n  int64
	)
	return func(stream string, chunk []byte) {
		mu.Lock()
		defer mu.Unlock()
		n += int64(len(chunk))
		// A lost notification loses only a report: the result carries the
		// whole output.
		_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: string(chunk)})
	}
}

// outputLinks are the resource links of the files a result names: the
// output files of a command or cell, and the workspace files a
// sandbox_bash command changed.
func outputLinks(scope string, r *wire.ToolResult) []*mcp.ResourceLink {
	var out []*mcp.ResourceLink
	for _, f := range r.Files {
		if p, err := file.DecodeID(f.FileID); err == nil {
			out = append(out, link(scope, p, -1))
		}
	}
	if r.Type == wire.ResultSandboxBody {
		var body struct {
			Files []struct {
				Path string `json:"path"`
				Size int64  `json:"size_bytes"`
			} `json:"files"`
		}
		if json.Unmarshal(r.Body, &body) == nil {
			for _, f := range body.Files {
				out = append(out, link(scope, f.Path, f.Size))
			}
		}
	}
	return out
}
