package sandboxtools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// Sandbox runs commands in a container's sandbox, booting it on demand
// (app/containers.Service, the owner of sandboxes).
type Sandbox interface {
	// Exec runs cmd in the container's sandbox and waits for it to end.
	Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error)
	// Start starts a long-lived command in the container's sandbox;
	// sandbox.ErrUnsupported when its backend cannot.
	Start(ctx context.Context, containerID string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error)
}

// Files reads and writes a container's files by absolute, clean sandbox
// path (infra/fsroot). Errors wrap file.ErrNotFound when the path does not
// exist.
type Files interface {
	// ReadFile returns the file's bytes, at most limit of them (limit > 0).
	ReadFile(ctx context.Context, containerID, sandboxPath string, limit int64) ([]byte, error)
	// WriteFile creates or replaces the file, creating missing parents.
	WriteFile(ctx context.Context, containerID, sandboxPath string, data []byte) error
}

// Defaults of Config.
const (
	DefaultMaxOutput       = 1 << 20
	DefaultTimeout         = 60 * time.Second
	MaxTimeoutSeconds      = 3600
	DefaultMaxFileBytes    = 16 << 20
	DefaultMaxSessions     = 8
	DefaultSessionBuffer   = 1 << 20
	DefaultGrace           = 2 * time.Second
	DefaultWait            = time.Second
	MaxWait                = 60 * time.Second
	DefaultMaxListedFiles  = 200
	DefaultBSLCommand      = "bsl-language-server"
	DefaultBSLTimeout      = 10 * time.Minute
	defaultFileOpTimeout   = 30 * time.Second
	unavailableNoSessionsM = "This sandbox backend cannot run terminal sessions."
)

// Config tunes the executor. Zero values mean the defaults.
type Config struct {
	MaxOutput     int     // cap per output stream, in bytes
	MaxFileBytes  int64   // largest file edit_file edits
	NearThreshold float64 // least similarity of an edit_file near match (0-1)
	MaxSessions   int     // live exec_command sessions per container
	SessionBuffer int     // output bytes kept per session (older bytes are dropped)
	MaxListed     int     // files listed by sandbox_bash
	Mounts        file.Table
	// BSLCommand is the bsl-language-server launcher looked up in the
	// sandbox's PATH.
	BSLCommand string
	// Log receives the causes of failures that tool results show only by
	// an error id (messages.Explain); nil discards them.
	Log *slog.Logger
	// Meter, when set, meters every sandbox_bash command, exec_command
	// session and repl_execute call, whatever ended it.
	Meter Meter
}

// Meter meters the commands that run in containers (app/usage.Service).
type Meter interface {
	// Begin records that a command starts in the container and returns
	// the function that meters it when it ended, whatever ended it (its
	// result and error; an error marked sandbox.ErrNotStarted counts
	// nothing).
	Begin(ctx context.Context, containerID string) func(res sandbox.Result, err error)
}

// begin is Meter.Begin, or a function that meters nothing without a Meter.
func (e *Executor) begin(ctx context.Context, containerID string) func(sandbox.Result, error) {
	if e.cfg.Meter == nil {
		return func(sandbox.Result, error) {}
	}
	return e.cfg.Meter.Begin(ctx, containerID)
}

var _ messages.ToolExecutor = (*Executor)(nil)

// Executor runs sandbox_v1 tool calls. It implements messages.ToolExecutor.
type Executor struct {
	sb    Sandbox
	files Files
	cfg   Config
	repls *repls
	terms *terminals
	ended callEnds
}

// New returns an Executor over the sandbox and file ports.
func New(sb Sandbox, files Files, cfg Config) *Executor {
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.NearThreshold <= 0 || cfg.NearThreshold > 1 {
		cfg.NearThreshold = DefaultNearThreshold
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionBuffer <= 0 {
		cfg.SessionBuffer = DefaultSessionBuffer
	}
	if cfg.MaxListed <= 0 {
		cfg.MaxListed = DefaultMaxListedFiles
	}
	if cfg.Mounts == nil {
		cfg.Mounts = file.DefaultTable()
	}
	if cfg.BSLCommand == "" {
		cfg.BSLCommand = DefaultBSLCommand
	}
	e := &Executor{sb: sb, files: files, cfg: cfg}
	e.repls = newRepls(e)
	e.terms = newTerminals(e)
	return e
}

// toolError is a failure shown to the model as an error block.
type toolError struct {
	code string
	msg  string
}

func (e *toolError) Error() string { return e.msg }

func fail(code, format string, args ...any) error {
	return &toolError{code: code, msg: fmt.Sprintf(format, args...)}
}

func invalidInput(format string, args ...any) error {
	return fail(messages.CodeInvalidToolInput, format, args...)
}

// Execute runs one sandbox_v1 call. It returns an error only when ctx ends.
func (e *Executor) Execute(ctx context.Context, call messages.ToolCall) (*messages.ToolResult, error) {
	var (
		body any
		err  error
	)
	if e.sb == nil {
		err = fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
	} else {
		switch call.Name {
		case messages.ToolSandboxBash:
			body, err = e.bash(ctx, call)
		case messages.ToolReplExecute:
			body, err = e.repl(ctx, call)
		case messages.ToolExecCommand:
			body, err = e.execCommand(ctx, call)
		case messages.ToolWriteStdin:
			body, err = e.writeStdin(ctx, call)
		case messages.ToolEditFile:
			body, err = e.editFile(ctx, call)
		case messages.ToolBSLCheck:
			body, err = e.bslCheck(ctx, call)
		default:
			err = invalidInput("Unknown tool %q.", call.Name)
		}
	}
	e.ended.mark(call.ContainerID, time.Now())
	if cerr := ctx.Err(); cerr != nil {
		return nil, fmt.Errorf("sandboxtools: %s: %w", call.Name, cerr)
	}
	if err != nil {
		var te *toolError
		if !errors.As(err, &te) {
			te = &toolError{code: messages.CodeUnavailable, msg: e.sandboxMessage(err)}
		}
		return messages.ErrorResult(call.Name, te.code, te.msg), nil
	}
	b, merr := json.Marshal(body)
	if merr != nil {
		return messages.ErrorResult(call.Name, messages.CodeUnavailable, "The result could not be encoded: "+merr.Error()), nil
	}
	return messages.SandboxResult(b), nil
}

// sandboxMessage explains a sandbox failure without its host details
// (messages.Explain).
func (e *Executor) sandboxMessage(err error) string {
	if err.Error() == messages.NotConfiguredMessage {
		return messages.NotConfiguredMessage
	}
	return "The sandbox is unavailable: " + messages.Explain(e.cfg.Log, err)
}

// decode decodes a tool input, naming the field of a type mismatch.
func decode(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage(`{}`)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalidInput("Invalid input: '%s' must be of type %s.", te.Field, jsonKind(te.Type.Kind().String()))
		}
		return invalidInput("Invalid input: %v.", err)
	}
	return nil
}

func jsonKind(kind string) string {
	switch kind {
	case "ptr", "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int64", "float64":
		return "number"
	}
	return kind
}

// timeoutOf reads an optional timeout_seconds: a whole number of seconds
// from 1 to MaxTimeoutSeconds, DefaultTimeout when absent.
func timeoutOf(secs *float64) (time.Duration, error) {
	if secs == nil {
		return DefaultTimeout, nil
	}
	t := *secs
	if t < 1 || t > MaxTimeoutSeconds || t != math.Trunc(t) {
		return 0, invalidInput("Invalid input: 'timeout_seconds' must be a whole number from 1 to %d.", MaxTimeoutSeconds)
	}
	return time.Duration(t) * time.Second, nil
}

// bashInput is the input of sandbox_bash.
type bashInput struct {
	Command        *string  `json:"command"`
	Description    string   `json:"description"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
	Cwd            string   `json:"cwd"`
}

// BashFile is a file a sandbox_bash command created or changed in the
// workspace.
type BashFile struct {
	Path   string `json:"path"`
	FileID string `json:"file_id"`
	Size   int64  `json:"size_bytes"`
}

// BashResult is the content of a sandbox_bash result.
type BashResult struct {
	Type        string            `json:"type"`
	Description string            `json:"description,omitempty"`
	Stdout      string            `json:"stdout"`
	Stderr      string            `json:"stderr"`
	ExitCode    int               `json:"exit_code"`
	Truncated   bool              `json:"truncated"`
	Files       []BashFile        `json:"files"`
	FileCount   int               `json:"file_count"`
	LocalPaths  map[string]string `json:"local_paths"`
}

// listScript prints the regular files under the workspace changed after
// the time in $1 (seconds since the epoch), with their sizes, skipping
// hidden folders.
const listScript = `find "$2" -xdev \( -name '.*' -prune \) -o -type f -newermt "@$1" -printf '%s\t%p\n' 2>/dev/null | head -n "$3"`

func (e *Executor) bash(ctx context.Context, call messages.ToolCall) (any, error) {
	var in bashInput
	if err := decode(call.Input, &in); err != nil {
		return nil, err
	}
	if in.Command == nil || strings.TrimSpace(*in.Command) == "" {
		return nil, invalidInput("Invalid input: 'command' is required.")
	}
	timeout, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	dir := sandbox.WorkspaceDir
	if in.Cwd != "" {
		dir = in.Cwd
		if !path.IsAbs(dir) {
			dir = path.Join(sandbox.WorkspaceDir, dir)
		}
		dir = path.Clean(dir)
	}
	start := e.ended.listFrom(call.ContainerID, time.Now())
	end := e.begin(ctx, call.ContainerID)
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", *in.Command},
		Dir:       dir,
		Env:       call.Env,
		Timeout:   timeout,
		MaxOutput: e.cfg.MaxOutput,
		Output:    sandbox.OutputTo(call.Output),
	})
	if err != nil {
		if errors.Is(err, sandbox.ErrUnavailable) || ctx.Err() != nil {
			// Cut short (a stop, a lost client, a dead sandbox), unless
			// its sandbox never ran (marked so): metered either way.
			end(res, err)
			return nil, err
		}
		// The command could not start: most often a cwd that does not exist.
		end(res, sandbox.NotStarted(err))
		return nil, invalidInput("The command could not start in %s: %v", dir, err)
	}
	end(res, nil)
	out := BashResult{
		Type:        "sandbox_bash_result",
		Description: in.Description,
		Stdout:      messages.CapOutput(res.Stdout, res.StdoutTruncated, e.cfg.MaxOutput),
		Stderr:      messages.CapOutput(res.Stderr, res.StderrTruncated, e.cfg.MaxOutput),
		ExitCode:    res.ExitCode,
		Truncated:   res.StdoutTruncated || res.StderrTruncated,
		Files:       []BashFile{},
		LocalPaths:  map[string]string{},
	}
	if res.TimedOut {
		// The backend ended stderr with "Command timed out after Ns.".
		out.ExitCode = 124
	}
	out.Files = e.changedFiles(ctx, call, start)
	out.FileCount = len(out.Files)
	for _, f := range out.Files {
		out.LocalPaths[f.Path] = contentURL(f.FileID, call.ScopeID)
	}
	return out, nil
}

// contentURL is the Files API address of a file's bytes: it names the
// container (scope_id), without which the Files API cannot find it.
func contentURL(fileID, scopeID string) string {
	u := "/api/gpt/v1/files/" + fileID + "/content"
	if scopeID != "" {
		u += "?scope_id=" + url.QueryEscape(scopeID)
	}
	return u
}

// listSlack is how far before a command's start sandbox_bash looks for
// files it wrote: a file's mtime comes from the kernel's coarse clock, a
// tick (up to 10 ms) behind the clock the start is read from.
const listSlack = 10 * time.Millisecond

// callEnds remembers when the last tool call in each container ended, for
// as long as it matters: a file written by the call before is no file of
// the next one, even when the next starts within listSlack of it (a model
// answering at machine speed).
type callEnds struct {
	mu sync.Mutex
	at map[string]time.Time
}

// mark records that a call in the container ended at t, and forgets the
// ends that no longer matter.
func (c *callEnds) mark(containerID string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, at := range c.at {
		if t.Sub(at) > listSlack {
			delete(c.at, id)
		}
	}
	if c.at == nil {
		c.at = map[string]time.Time{}
	}
	c.at[containerID] = t
}

// listFrom returns the time after which a file modified in the container
// counts as written by a command starting at start: listSlack before it,
// but never before the end of the container's previous call.
func (c *callEnds) listFrom(containerID string, start time.Time) time.Time {
	from := start.Add(-listSlack)
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.at[containerID]; ok && at.After(from) {
		from = at
	}
	return from
}

// changedFiles lists the workspace files modified after start.
func (e *Executor) changedFiles(ctx context.Context, call messages.ToolCall, start time.Time) []BashFile {
	epoch := fmt.Sprintf("%d.%09d", start.Unix(), start.Nanosecond())
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", listScript, "list", epoch, sandbox.WorkspaceDir, strconv.Itoa(e.cfg.MaxListed)},
		Timeout:   defaultFileOpTimeout,
		MaxOutput: 1 << 20,
	})
	files := []BashFile{}
	if err != nil || res.ExitCode != 0 {
		return files
	}
	for ln := range strings.SplitSeq(strings.TrimSpace(string(res.Stdout)), "\n") {
		size, p, ok := strings.Cut(ln, "\t")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(size, 10, 64)
		files = append(files, BashFile{Path: p, FileID: file.EncodeID(p), Size: n})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}
