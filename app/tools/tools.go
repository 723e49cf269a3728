package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
)

// Sandbox runs commands in the sandbox of a container, booting it on
// demand (app/containers.Service, the owner of sandboxes, serves it).
type Sandbox interface {
	// Exec runs cmd in the container's sandbox and waits for it to end.
	Exec(ctx context.Context, containerID string, cmd sandbox.Command) (sandbox.Result, error)
	// Start starts a long-lived command in the container's sandbox (the
	// Python interpreters and the terminal sessions); sandbox.ErrUnsupported
	// when its backend cannot keep one.
	Start(ctx context.Context, containerID string, cmd sandbox.Command, tty *sandbox.TTY) (sandbox.Session, error)
	// Restart stops the container's sandbox and boots a fresh one; files stay.
	Restart(ctx context.Context, containerID string) error
	// Idle is the period after which the owner stops an unused sandbox (0:
	// never); a running cell marks its sandbox in use more often than that.
	Idle() time.Duration
	// Life names the life of the container's sandbox in this process: a
	// fresh boot starts a new one, and the restore of a checkpoint goes on
	// with the life it saved, whose processes (a Python interpreter this
	// process started) are still there.
	Life(containerID string) uint64
	// TakeNote returns, once, the line a container's next command or cell
	// result starts its stderr with when its sandbox started fresh from its
	// files although its earlier life did not end on purpose; "" when none.
	TakeNote(containerID string) string
}

// Files reads and writes a container's files by absolute, clean sandbox
// path (infra/fsroot); the caller has already checked the path against the
// mount table. Errors wrap file.ErrNotFound when the path does not exist.
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

// EgressNotes tells which outbound connections a container was refused
// (app/egressgate.Log).
type EgressNotes interface {
	// Refused returns one line naming the connections the container was
	// refused since since; "" when none.
	Refused(containerID string, since time.Time) string
}

// Defaults of Config, for both tool families.
const (
	DefaultMaxOutput     = 1 << 20
	DefaultTimeout       = 60 * time.Second
	DefaultMaxTimeout    = time.Hour
	DefaultFileOpTimeout = 30 * time.Second
	DefaultMaxFileBytes  = 16 << 20
	// DefaultMaxOutputFileBytes is ARTIFACT_MAX_BYTES' default: an output
	// file past it cannot become an artifact either.
	DefaultMaxOutputFileBytes = 1 << 30
	// DefaultCellTimeout is the wall-clock limit of one Python cell: a cell
	// over it is interrupted and answers detection_timeout, the
	// interpreter kept.
	DefaultCellTimeout = 90 * time.Second
	// DefaultPythonTimeout is the limit of one whole code_execution call:
	// past it (a cell stuck where Python cannot interrupt it) the
	// interpreter is killed and the call answers execution_time_exceeded.
	DefaultPythonTimeout = 5 * time.Minute
	// DefaultToolResultTimeout is how long a cell paused on client tool
	// calls waits for the client's results: about 4.5 minutes, the life
	// Anthropic's page gives a paused container (docs/messages.md).
	DefaultToolResultTimeout = 270 * time.Second
	DefaultMaxSessions       = 8
	DefaultSessionBuffer     = 1 << 20
	DefaultMaxListedFiles    = 200
	DefaultBSLCommand        = "bsl-language-server"
	DefaultBSLTimeout        = 10 * time.Minute
	// DefaultWait and MaxWait bound how long exec_command (its grace) and
	// write_stdin wait for output.
	DefaultGrace = 2 * time.Second
	DefaultWait  = time.Second
	MaxWait      = 60 * time.Second
)

// Config tunes the executor. Zero values mean the defaults.
type Config struct {
	MaxOutput     int           // cap per output stream and per view, in bytes
	MaxTimeout    time.Duration // the largest command timeout a call may ask for
	FileOpTimeout time.Duration // limit of one file operation (text editor, edit_file)
	MaxFileBytes  int64         // largest file the text editor and edit_file read or edit
	// MaxOutputFileBytes is the largest file a bash call may hand back as
	// an output file ($OUTPUT_DIR); a larger one answers
	// output_file_too_large (the file stays in the outputs folder).
	MaxOutputFileBytes int64
	Mounts             file.Table // nil means file.DefaultTable()
	// Log receives the causes of failures that tool results show only by
	// an error id (messages.Explain); nil discards them.
	Log *slog.Logger
	// Meter, when set, meters every command, Python cell and terminal
	// session, whatever ended it.
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
	NearThreshold     float64 // least similarity of an edit_file near match (0-1)
	MaxSessions       int     // live exec_command sessions per container
	SessionBuffer     int     // output bytes kept per session (older bytes are dropped)
	MaxListed         int     // files listed by sandbox_bash
	// BSLCommand is the bsl-language-server launcher looked up in the
	// sandbox's PATH.
	BSLCommand string
	// Egress, when set, names in a bash result's stderr the outbound
	// connections the command was refused, so the model sees why.
	Egress EgressNotes
}

// orDefault sets *v to d when it is not above zero.
func orDefault[T int | int64 | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

var _ messages.ToolExecutor = (*Executor)(nil)

// Executor runs the calls of both tool families. It implements
// messages.ToolExecutor.
type Executor struct {
	sb    Sandbox
	files Files
	cfg   Config
	cells *interpreters // code_execution's interpreters
	repls *interpreters // repl_execute's interpreters
	terms *terminals
	ended callEnds
}

// New returns an Executor over the sandbox and file ports. A nil port makes
// the tools that need it answer "code_execution provider is not
// configured.".
func New(sb Sandbox, files Files, cfg Config) *Executor {
	orDefault(&cfg.MaxOutput, DefaultMaxOutput)
	orDefault(&cfg.MaxTimeout, DefaultMaxTimeout)
	orDefault(&cfg.FileOpTimeout, DefaultFileOpTimeout)
	orDefault(&cfg.MaxFileBytes, DefaultMaxFileBytes)
	orDefault(&cfg.MaxOutputFileBytes, DefaultMaxOutputFileBytes)
	orDefault(&cfg.CellTimeout, DefaultCellTimeout)
	orDefault(&cfg.PythonTimeout, DefaultPythonTimeout)
	orDefault(&cfg.ToolResultTimeout, DefaultToolResultTimeout)
	orDefault(&cfg.MaxSessions, DefaultMaxSessions)
	orDefault(&cfg.SessionBuffer, DefaultSessionBuffer)
	orDefault(&cfg.MaxListed, DefaultMaxListedFiles)
	if cfg.PythonTimeout <= cfg.CellTimeout {
		cfg.PythonTimeout = cfg.CellTimeout + 10*time.Second
	}
	if cfg.NearThreshold <= 0 || cfg.NearThreshold > 1 {
		cfg.NearThreshold = DefaultNearThreshold
	}
	if cfg.Mounts == nil {
		cfg.Mounts = file.DefaultTable()
	}
	if cfg.BSLCommand == "" {
		cfg.BSLCommand = DefaultBSLCommand
	}
	e := &Executor{sb: sb, files: files, cfg: cfg, cells: newInterpreters("python:code_execution"), repls: newInterpreters("python:repl")}
	e.terms = newTerminals(e)
	return e
}

// subTools run the code-execution sub-tools; each answers a result of its
// own type.
var subTools = map[string]func(*Executor, context.Context, messages.ToolCall) (*wire.ToolResult, error){
	wire.SubToolBash:              needing(hasSandbox, withInput((*Executor).bash)),
	wire.SubToolTextEditor:        needing(hasFiles, withInput((*Executor).editor)),
	messages.SubToolCodeExecution: needing(hasSandbox, (*Executor).python),
}

// hasSandbox and hasFiles report whether the executor has the port a tool
// needs.
func hasSandbox(e *Executor) bool { return e.sb != nil }
func hasFiles(e *Executor) bool   { return e.files != nil }

// needing adapts a tool that needs the port has reports: without it, the
// call is refused as not configured before anything else is looked at.
func needing[Out any](has func(*Executor) bool, run func(*Executor, context.Context, messages.ToolCall) (Out, error)) func(*Executor, context.Context, messages.ToolCall) (Out, error) {
	return func(e *Executor, ctx context.Context, call messages.ToolCall) (Out, error) {
		if !has(e) {
			var none Out
			return none, refuse(wire.CodeUnavailable, "%s", messages.NotConfiguredMessage)
		}
		return run(e, ctx, call)
	}
}

// sandboxTools run the sandbox_v1 tools; each answers the content of a
// sandbox_tool_result.
var sandboxTools = map[string]func(*Executor, context.Context, messages.ToolCall) (any, error){
	messages.ToolSandboxBash: withInput((*Executor).sandboxBash),
	messages.ToolReplExecute: withInput((*Executor).repl),
	messages.ToolExecCommand: withInput((*Executor).execCommand),
	messages.ToolWriteStdin:  withInput((*Executor).writeStdin),
	messages.ToolEditFile:    withInput((*Executor).editFile),
	messages.ToolBSLCheck:    withInput((*Executor).bslCheck),
}

// withInput adapts a tool that takes its call's input decoded into an In
// (decodeInput: a bad input is the call's error).
func withInput[In, Out any](run func(e *Executor, ctx context.Context, call messages.ToolCall, in In) (Out, error)) func(*Executor, context.Context, messages.ToolCall) (Out, error) {
	return func(e *Executor, ctx context.Context, call messages.ToolCall) (Out, error) {
		var in In
		if err := decodeInput(call.Input, &in); err != nil {
			var none Out
			return none, err
		}
		return run(e, ctx, call, in)
	}
}

// Execute runs one call of either family. It returns an error only when
// ctx ends.
func (e *Executor) Execute(ctx context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	var (
		r   *wire.ToolResult
		err error
	)
	if sub, ok := subTools[call.Name]; ok {
		r, err = sub(e, ctx, call)
	} else {
		r, err = e.sandboxTool(ctx, call)
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, fmt.Errorf("tools: %s: %w", call.Name, cerr)
	}
	if err != nil {
		var te *toolError
		if !errors.As(err, &te) {
			te = e.sandboxFailure(err, unsupportedMessage(call.Name))
		}
		return messages.ErrorResult(call.Name, te.code, te.msg), nil
	}
	e.addNote(call.ContainerID, r)
	return r, nil
}

// sandboxTool runs a sandbox_v1 call and encodes its result's content.
func (e *Executor) sandboxTool(ctx context.Context, call messages.ToolCall) (*wire.ToolResult, error) {
	tool, ok := sandboxTools[call.Name]
	switch {
	case !ok:
		return nil, invalidInput("Unknown tool %q.", call.Name)
	case !hasSandbox(e):
		return nil, refuse(wire.CodeUnavailable, "%s", messages.NotConfiguredMessage)
	}
	body, err := tool(e, ctx, call)
	e.ended.mark(call.ContainerID, time.Now())
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, refuse(wire.CodeUnavailable, "The result could not be encoded: %s", err.Error())
	}
	return wire.SandboxResult(b), nil
}

// addNote puts the container's note (Sandbox.TakeNote), if any, at the
// start of a command's or a cell's stderr; other results leave it for the
// next.
func (e *Executor) addNote(containerID string, r *wire.ToolResult) {
	if e.sb == nil || len(r.Pending) > 0 || (r.Type != wire.ResultBash && r.Type != wire.ResultCodeExecution) {
		return
	}
	if note := e.sb.TakeNote(containerID); note != "" {
		r.Stderr = note + "\n" + r.Stderr
	}
}

// begin is Meter.Begin, or a function that meters nothing without a Meter.
func (e *Executor) begin(ctx context.Context, containerID string) func(sandbox.Result, error) {
	if e.cfg.Meter == nil {
		return func(sandbox.Result, error) {}
	}
	return e.cfg.Meter.Begin(ctx, containerID)
}

// Messages of a backend that cannot keep a long-lived command.
const (
	noSessionsMessage      = "This sandbox backend cannot keep a Python interpreter running."
	noTerminalSessionsText = "This sandbox backend cannot run terminal sessions."
)

// unsupportedMessage is what a tool answers when the sandbox's backend
// cannot start its long-lived command.
func unsupportedMessage(tool string) string {
	if tool == messages.ToolExecCommand || tool == messages.ToolWriteStdin {
		return noTerminalSessionsText
	}
	return noSessionsMessage
}

// sandboxFailure explains an error of the sandbox ports without its host
// details (messages.Explain); unsupported is the tool's message for a
// backend without long-lived commands.
func (e *Executor) sandboxFailure(err error, unsupported string) *toolError {
	switch {
	case errors.Is(err, sandbox.ErrNoBackend):
		return &toolError{wire.CodeUnavailable, messages.NotConfiguredMessage}
	case errors.Is(err, sandbox.ErrUnsupported):
		return &toolError{wire.CodeUnavailable, unsupported}
	}
	return &toolError{wire.CodeUnavailable, "The sandbox is unavailable: " + messages.Explain(e.cfg.Log, err)}
}
