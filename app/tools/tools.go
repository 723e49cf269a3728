package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"threadbox/app/messages"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// Sandbox runs commands in the sandbox of a container, booting it on demand.
type Sandbox interface {
	// Exec runs cmd in the container's sandbox and waits for it to end.
	Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error)
	// Restart stops the container's sandbox and boots a fresh one; files stay.
	Restart(ctx context.Context, containerID string) error
}

// Files reads and writes a container's files by absolute, clean sandbox
// path; the caller has already checked the path against the mount table.
// Errors wrap file.ErrNotFound when the path does not exist.
type Files interface {
	// ReadFile returns the file's bytes, at most limit of them (limit > 0).
	ReadFile(ctx context.Context, containerID, sandboxPath string, limit int64) ([]byte, error)
	// WriteFile creates or replaces the file, creating missing parents.
	WriteFile(ctx context.Context, containerID, sandboxPath string, data []byte) error
	// Stat describes the file or folder.
	Stat(ctx context.Context, containerID, sandboxPath string) (file.Info, error)
	// List returns the entries directly inside the folder.
	List(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error)
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

// Defaults of Config.
const (
	DefaultMaxOutput     = 1 << 20
	DefaultTimeout       = 60 * time.Second
	DefaultMaxTimeout    = time.Hour
	DefaultFileOpTimeout = 30 * time.Second
	DefaultMaxFileBytes  = 16 << 20
	// DefaultMaxOutputFileBytes is ARTIFACT_MAX_BYTES' default: an output
	// file past it cannot become an artifact either.
	DefaultMaxOutputFileBytes = 1 << 30
)

// Config tunes the executors. Zero values mean the defaults.
type Config struct {
	MaxOutput     int           // cap per output stream and per view, in bytes
	MaxTimeout    time.Duration // the largest bash timeout a call may ask for
	FileOpTimeout time.Duration // limit of one text-editor operation
	MaxFileBytes  int64         // largest file the text editor reads or edits
	// MaxOutputFileBytes is the largest file a bash call may hand back as
	// an output file ($OUTPUT_DIR); a larger one answers
	// output_file_too_large (the file stays in the outputs folder).
	MaxOutputFileBytes int64
	Mounts             file.Table // nil means file.DefaultTable()
	// Log receives the causes of failures that tool results show only by
	// an error id (messages.Explain); nil discards them.
	Log *slog.Logger
	// Meter, when set, meters every bash command and Python cell, whatever
	// ended it.
	Meter Meter
	// CellTimeout is the wall-clock limit of one Python cell of the
	// code_execution sub-tool (DefaultCellTimeout).
	CellTimeout time.Duration
	// PythonTimeout is the limit of one whole code_execution call
	// (DefaultPythonTimeout); one not above CellTimeout becomes
	// CellTimeout plus 10 s.
	PythonTimeout time.Duration
	// ToolResultTimeout is how long a cell paused on client tool calls
	// (programmatic tool calling) waits for their results before the
	// calls raise TimeoutError in its code (DefaultToolResultTimeout).
	ToolResultTimeout time.Duration
}

var _ messages.ToolExecutor = (*Executor)(nil)

// Executor runs sub-tool calls. It implements messages.ToolExecutor.
type Executor struct {
	sb    Sandbox
	files Files
	cfg   Config
	py    *interpreters
}

// New returns an Executor over the sandbox and file ports. A nil port makes
// its sub-tool answer "code_execution provider is not configured.".
func New(sb Sandbox, files Files, cfg Config) *Executor {
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.FileOpTimeout <= 0 {
		cfg.FileOpTimeout = DefaultFileOpTimeout
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.MaxOutputFileBytes <= 0 {
		cfg.MaxOutputFileBytes = DefaultMaxOutputFileBytes
	}
	if cfg.Mounts == nil {
		cfg.Mounts = file.DefaultTable()
	}
	if cfg.CellTimeout <= 0 {
		cfg.CellTimeout = DefaultCellTimeout
	}
	if cfg.PythonTimeout <= 0 {
		cfg.PythonTimeout = DefaultPythonTimeout
	}
	if cfg.ToolResultTimeout <= 0 {
		cfg.ToolResultTimeout = DefaultToolResultTimeout
	}
	if cfg.PythonTimeout <= cfg.CellTimeout {
		cfg.PythonTimeout = cfg.CellTimeout + 10*time.Second
	}
	return &Executor{sb: sb, files: files, cfg: cfg, py: &interpreters{by: map[string]*slot{}}}
}

// Execute runs one sub-tool call. It returns an error only when ctx ends.
func (e *Executor) Execute(ctx context.Context, call messages.ToolCall) (*messages.ToolResult, error) {
	var r *messages.ToolResult
	switch call.Name {
	case messages.SubToolBash:
		r = e.bash(ctx, call)
	case messages.SubToolTextEditor:
		r = e.editor(ctx, call)
	case messages.SubToolCodeExecution:
		r = e.python(ctx, call)
	default:
		r = messages.ErrorResult(call.Name, messages.CodeInvalidToolInput, fmt.Sprintf("Unknown tool %q.", call.Name))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tools: %s: %w", call.Name, err)
	}
	e.addNote(call.ContainerID, r)
	return r, nil
}

// noter gives the one line a container's next tool result starts its
// stderr with when the container's sandbox started fresh from its files
// although its earlier life did not end on purpose (app/containers).
type noter interface {
	TakeNote(containerID string) string
}

// addNote puts the container's note, if any, at the start of a command's
// or a cell's stderr; other results leave it for the next.
func (e *Executor) addNote(containerID string, r *messages.ToolResult) {
	n, ok := e.sb.(noter)
	if !ok || r == nil || len(r.Pending) > 0 || (r.Type != messages.ResultBash && r.Type != messages.ResultCodeExecution) {
		return
	}
	if note := n.TakeNote(containerID); note != "" {
		r.Stderr = note + "\n" + r.Stderr
	}
}

// bashInput is the input of bash_code_execution.
type bashInput struct {
	Command *string  `json:"command"`
	Timeout *float64 `json:"timeout"`
	Restart bool     `json:"restart"`
}

func (e *Executor) bash(ctx context.Context, call messages.ToolCall) *messages.ToolResult {
	fail := func(code, msg string) *messages.ToolResult {
		return messages.ErrorResult(messages.SubToolBash, code, msg)
	}
	if e.sb == nil {
		return fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
	}
	var in bashInput
	if err := decodeInput(call.Input, &in); err != nil {
		return fail(messages.CodeInvalidToolInput, err.Error())
	}
	if in.Command == nil && !in.Restart {
		return fail(messages.CodeInvalidToolInput, "Invalid input: 'command' is required.")
	}
	timeout := DefaultTimeout
	if in.Timeout != nil {
		secs := *in.Timeout
		if !(secs > 0) {
			return fail(messages.CodeInvalidToolInput, "Invalid input: 'timeout' must be a positive number of seconds.")
		}
		// In seconds first: a huge value would overflow a Duration (and a
		// tiny one round to zero), and a timeout <= 0 means none at all.
		timeout = e.cfg.MaxTimeout
		if secs < timeout.Seconds() {
			timeout = max(time.Duration(secs*float64(time.Second)), time.Millisecond)
		}
	}
	if in.Restart {
		if err := e.sb.Restart(ctx, call.ContainerID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fail(messages.CodeUnavailable, "The sandbox could not be restarted: "+messages.Explain(e.cfg.Log, err))
		}
		if in.Command == nil || strings.TrimSpace(*in.Command) == "" {
			return &messages.ToolResult{Type: messages.ResultBash, Stdout: "Sandbox restarted.\n"}
		}
	}
	end := e.begin(ctx, call.ContainerID)
	res, err := e.sb.Exec(ctx, call.ContainerID, sandbox.Command{
		Args:      []string{"bash", "-c", *in.Command},
		Dir:       sandbox.WorkspaceDir,
		Env:       call.Env,
		Timeout:   timeout,
		MaxOutput: e.cfg.MaxOutput,
		OutputDir: true,
		Output:    sandbox.OutputTo(call.Output),
	})
	// Metered whatever ended it: a command cut short (a stop, a lost
	// client, a dead sandbox) counts as much as one that finished.
	end(res, err)
	if err != nil {
		if ctx.Err() != nil {
			return fail(messages.CodeUnavailable, "The request was cancelled.")
		}
		if errors.Is(err, sandbox.ErrNoBackend) {
			return fail(messages.CodeUnavailable, messages.NotConfiguredMessage)
		}
		return fail(messages.CodeUnavailable, "The sandbox is unavailable: "+messages.Explain(e.cfg.Log, err))
	}
	out := &messages.ToolResult{
		Type:       messages.ResultBash,
		Stdout:     messages.CapOutput(res.Stdout, res.StdoutTruncated, e.cfg.MaxOutput),
		Stderr:     messages.CapOutput(res.Stderr, res.StderrTruncated, e.cfg.MaxOutput),
		ReturnCode: res.ExitCode,
		Files:      []messages.OutputFile{},
	}
	if res.TimedOut {
		out.ReturnCode = 124
		msg := fmt.Sprintf("Command timed out after %ss.", seconds(timeout))
		// The agent's client already ends stderr with this line; add it only
		// for backends that do not.
		if !strings.HasSuffix(out.Stderr, msg) {
			if out.Stderr != "" && !strings.HasSuffix(out.Stderr, "\n") {
				out.Stderr += "\n"
			}
			out.Stderr += msg
		}
	}
	if res.OOMKilled {
		if out.Stderr != "" && !strings.HasSuffix(out.Stderr, "\n") {
			out.Stderr += "\n"
		}
		out.Stderr += "The command was killed: the sandbox ran out of memory."
	}
	if res.Warning != "" {
		if out.Stderr != "" && !strings.HasSuffix(out.Stderr, "\n") {
			out.Stderr += "\n"
		}
		out.Stderr += "[threadbox] " + res.Warning
	}
	for _, p := range res.OutputFiles {
		if fi, err := e.files.Stat(ctx, call.ContainerID, p); err == nil && fi.Size > e.cfg.MaxOutputFileBytes {
			return fail(messages.CodeOutputFileTooLarge, fmt.Sprintf("The output file %s is %d bytes, more than the %d bytes a result may hand back; it stays in the outputs folder.", p, fi.Size, e.cfg.MaxOutputFileBytes))
		}
		out.Files = append(out.Files, messages.OutputFile{Type: messages.ResultBashOutput, FileID: file.EncodeID(p)})
	}
	return out
}

// seconds formats a duration as whole seconds when it is one, else with
// the needed decimals.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprint(int64(d / time.Second))
	}
	return fmt.Sprint(d.Seconds())
}

// decodeInput decodes a tool input object strictly enough to report bad
// field types.
func decodeInput(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage(`{}`)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("Invalid input: '%s' must be of type %s.", te.Field, jsonType(te.Type.Kind().String()))
		}
		return fmt.Errorf("Invalid input: %v.", err)
	}
	return nil
}

func jsonType(kind string) string {
	switch kind {
	case "ptr", "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "int", "int64", "float64":
		return "number"
	}
	return kind
}
