package messages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/id"
)

// Defaults of Config.
const (
	DefaultMaxToolIterations = 20
	DefaultTurnTimeout       = 10 * time.Minute
	DefaultStartWait         = 5 * time.Second
)

// NotConfiguredMessage is the explanation of the error block a sub-tool call
// gets when no code-execution provider (sandbox) is configured.
const NotConfiguredMessage = "code_execution provider is not configured."

// Config tunes the loop. Zero values mean the defaults.
type Config struct {
	// MaxToolIterations is how many rounds of sub-tool calls one request
	// may run before the turn is paused with stop_reason pause_turn.
	MaxToolIterations int
	// TurnTimeout is how long one request may keep calling tools before
	// the turn is paused.
	TurnTimeout time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// AllowedToolTypes are the typed tools besides code execution and
	// sandbox_v1 (an Anthropic web search, say) that a request may carry;
	// they go to the model as sent, with the operator's upstream key. A
	// request with a typed tool not listed is refused (400). Client tools
	// (no type, or "custom") are always allowed.
	AllowedToolTypes []string
	// URLs fetches the images and documents requests name by URL, which
	// are then sent to the model as data; nil refuses such blocks.
	URLs URLFetcher
	// Tokens, when set, records the model tokens of every step.
	Tokens TokenMeter
	// StartWait is how long a streamed turn's message_start waits for the
	// model's first step to start, which gives the step's input tokens,
	// before it is sent without them. It must stay below how long the web
	// layer holds a stream's preamble (maxHold), so that a stream it
	// opens has its message_start to open with.
	StartWait time.Duration
}

// TokenMeter records the model tokens of one step of a turn for the user
// of RunOptions, or, when it names none, for the owner of the turn's
// container (app/usage.Service).
type TokenMeter interface {
	Tokens(ctx context.Context, orgID, userID, containerID string, input, output int)
}

// Service runs Messages API turns.
type Service struct {
	model Model
	tools Tools
	cfg   Config
}

// Tools registers the executors of the server tools by family. The loop
// decides once, for each tool_use the model makes, whether it is a server
// tool (which family's, given what the request enabled) or the client's;
// a family without an executor answers each of its calls
// "code_execution provider is not configured.".
type Tools struct {
	// CodeExecution runs the code-execution sub-tools
	// (bash_code_execution, text_editor_code_execution; code_execution under
	// code_execution_20260120 and later).
	CodeExecution ToolExecutor
	// Sandbox runs the sandbox_v1 tools.
	Sandbox ToolExecutor
	// WebFetch runs the web_fetch tool (app/fetchtool).
	WebFetch ToolExecutor
}

// New returns a Service asking model for steps and running server tools
// with the executors of tools.
func New(model Model, tools Tools, cfg Config) *Service {
	if cfg.MaxToolIterations <= 0 {
		cfg.MaxToolIterations = DefaultMaxToolIterations
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = DefaultTurnTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StartWait <= 0 {
		cfg.StartWait = DefaultStartWait
	}
	return &Service{model: model, tools: tools, cfg: cfg}
}

// RunOptions carries what the caller resolved for a request.
type RunOptions struct {
	// ContainerID is the storage id of the container sub-tools run in.
	ContainerID string
	// Container is the container to report on the response; nil reports none.
	Container *wire.Container
	// ReportContainer reports Container even when no code ran (the
	// request named it). Otherwise it is reported only once code ran.
	ReportContainer bool
	// ExpiresAt, when set, gives the container's expiry when the turn
	// ends (a long turn moves it on); otherwise Container's is reported.
	ExpiresAt func() time.Time
	// OnToolCall, when set, is called after each sub-tool call.
	OnToolCall ToolHook
	// BeforeToolCall, when set, is called before each sub-tool call runs
	// (with a nil result).
	BeforeToolCall ToolHook
	// Env holds KEY=value pairs passed to every sub-tool call (ToolCall.Env).
	Env []string
	// EnvFunc, when set, is called at the turn's first sub-tool call; the
	// variables it returns follow Env in every call. A turn that calls no
	// sub-tool never calls it.
	EnvFunc func(ctx context.Context) ([]string, error)
	// OrgID and UserID name who the turn runs for, whose usage the
	// tokens count to (Config.Tokens).
	OrgID, UserID string
	// Plan, when set, is what Validate found for this very request: Run
	// does not check the request again.
	Plan *Plan
	// LiveOutput sends the output of server tool calls while they run, as
	// EventToolOutput events (live.go).
	LiveOutput bool
	// NoURLFetch refuses images and documents named by URL instead of
	// fetching them: a sandbox token's request, whose sandbox reaches the
	// network only through its org's egress policy.
	NoURLFetch bool
}

// Plan is what a request would do, as found by Validate.
type Plan struct {
	// CodeExecution is true when the request enables the code-execution tool.
	CodeExecution bool `json:"code_execution"`
	// ToolType is the code-execution tool type asked for, if any.
	ToolType string `json:"tool_type,omitempty"`
	// Sandbox is true when the request enables sandbox_v1 tools.
	Sandbox bool `json:"sandbox"`
	// ServerTools are the sub-tools the model may call.
	ServerTools []string `json:"server_tools"`
	// ClientTools are the tools returned to the client.
	ClientTools []string `json:"client_tools"`
	// ProgrammaticTools are the client tools the code_execution sub-tool's
	// Python may call (their allowed_callers list the request's
	// code-execution tool type).
	ProgrammaticTools []string `json:"programmatic_tools"`
	// ContainerUploads are the file ids of container_upload blocks.
	ContainerUploads []string `json:"container_uploads"`
	// WebFetch holds the options of the request's web_fetch tool; nil
	// when the request has none.
	WebFetch *wire.WebFetchTool `json:"web_fetch,omitempty"`
}

// Validate checks a request without running anything and says what it
// would do. Errors are fault.Invalid.
func (s *Service) Validate(req *wire.Request) (*Plan, error) {
	return plan(req, s.cfg.AllowedToolTypes)
}

func plan(req *wire.Request, allowedTypes []string) (*Plan, error) {
	if req.MaxTokens < 1 {
		return nil, fault.New(fault.Invalid, "max_tokens: must be at least 1")
	}
	if len(req.Messages) == 0 {
		return nil, fault.New(fault.Invalid, "messages: at least one message is required")
	}
	p := &Plan{ServerTools: []string{}, ClientTools: []string{}, ProgrammaticTools: []string{}, ContainerUploads: []string{}}
	for i, m := range req.Messages {
		if m.Role != wire.RoleUser && m.Role != wire.RoleAssistant {
			return nil, fault.Errorf(fault.Invalid, "messages.%d.role: must be \"user\" or \"assistant\"", i)
		}
		for j, b := range m.Content {
			if b.Type == wire.BlockContainerUpload {
				if _, err := uploadPath(b.FileID); err != nil {
					return nil, fault.Errorf(fault.Invalid, "messages.%d.content.%d.file_id: %v", i, j, err)
				}
				p.ContainerUploads = append(p.ContainerUploads, b.FileID)
			}
		}
	}
	if _, err := eachMedia(req, nil); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, t := range req.Tools {
		switch {
		case isCodeExecutionType(t.Type):
			if t.Name != "code_execution" {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.name: the %s tool must be named \"code_execution\"", i, t.Type)
			}
			if p.CodeExecution {
				return nil, fault.Errorf(fault.Invalid, "tools.%d: code execution is enabled twice", i)
			}
			p.CodeExecution, p.ToolType = true, t.Type
			if !PythonOnly(t.Type) {
				p.ServerTools = append(p.ServerTools, wire.SubToolBash, wire.SubToolTextEditor)
			}
			if HasPythonREPL(t.Type) {
				p.ServerTools = append(p.ServerTools, SubToolCodeExecution)
			}
		case t.Type == wire.ToolTypeWebFetch2509 || t.Type == wire.ToolTypeWebFetch2602:
			if t.Name != wire.SubToolWebFetch {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.name: the %s tool must be named \"web_fetch\"", i, t.Type)
			}
			if p.WebFetch != nil {
				return nil, fault.Errorf(fault.Invalid, "tools.%d: web_fetch is enabled twice", i)
			}
			w, err := wire.WebFetchToolOf(t)
			if err != nil {
				return nil, fault.Errorf(fault.Invalid, "tools.%d: %v", i, err)
			}
			if err := w.CheckDomains(); err != nil {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.%v", i, err)
			}
			if len(w.AllowedDomains) > 0 && len(w.BlockedDomains) > 0 {
				return nil, fault.Errorf(fault.Invalid, "tools.%d: allowed_domains and blocked_domains cannot be used together", i)
			}
			if w.MaxUses < 0 || w.MaxContentTokens < 0 {
				return nil, fault.Errorf(fault.Invalid, "tools.%d: max_uses and max_content_tokens must be positive", i)
			}
			p.WebFetch = &w
			p.ServerTools = append(p.ServerTools, wire.SubToolWebFetch)
		case t.Type == wire.ToolTypeSandboxV1:
			names := []string{t.Name}
			switch {
			case t.Name == SandboxToolName:
				names = SandboxTools
			case !IsSandboxTool(t.Name):
				return nil, fault.Errorf(fault.Invalid, "tools.%d.name: a %s tool is named \"sandbox\" or one of %s", i, t.Type, strings.Join(SandboxTools, ", "))
			}
			p.Sandbox = true
			for _, n := range names {
				if !slices.Contains(p.ServerTools, n) {
					p.ServerTools = append(p.ServerTools, n)
				}
			}
		default:
			if t.Type != "" && t.Type != wire.ToolTypeCustom && !slices.Contains(allowedTypes, t.Type) {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.type: %q is not a tool type this server accepts: client tools have no type (or \"custom\"); code_execution and sandbox_v1 tools run here; an operator can allow further server tool types (ALLOW_TOOL_TYPES)", i, t.Type)
			}
			if t.Name == "" {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.name: required", i)
			}
			if (t.Type == "" || t.Type == wire.ToolTypeCustom) && len(t.InputSchema) == 0 {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.input_schema: required", i)
			}
			if err := checkAllowedCallers(i, t); err != nil {
				return nil, err
			}
			// A name of a server sub-tool is the client's when the request
			// does not offer that server tool (checked below, once every
			// tool is known).
			if seen[t.Name] {
				return nil, fault.Errorf(fault.Invalid, "tools.%d.name: %q is used twice or reserved", i, t.Name)
			}
			seen[t.Name] = true
			p.ClientTools = append(p.ClientTools, t.Name)
		}
	}
	for _, n := range p.ClientTools {
		if slices.Contains(p.ServerTools, n) {
			return nil, fault.Errorf(fault.Invalid, "tools: %q is used twice or reserved", n)
		}
	}
	if err := checkCallers(req, p); err != nil {
		return nil, err
	}
	if err := programmaticHistory(req); err != nil {
		return nil, err
	}
	return p, nil
}

func isCodeExecutionType(t string) bool {
	switch t {
	case wire.ToolTypeCodeExecutionV1, wire.ToolTypeCodeExecution2505, wire.ToolTypeCodeExecution2508, wire.ToolTypeCodeExecution2601, wire.ToolTypeCodeExecution2605:
		return true
	}
	return false
}

// Create runs a turn and returns the whole response.
func (s *Service) Create(ctx context.Context, req *wire.Request, opts RunOptions) (*wire.Response, error) {
	var c Collector
	if err := s.Run(ctx, req, opts, &c); err != nil {
		return nil, err
	}
	return c.Response(), nil
}

// Run runs one turn of req, sending its events to sink as they happen: the
// model streams when req.Stream is set. On error the events sent so far are
// not followed by message_stop; the caller reports the error (ErrorEvent).
func (s *Service) Run(ctx context.Context, req *wire.Request, opts RunOptions, sink Sink) error {
	p := opts.Plan
	if p == nil {
		var err error
		if p, err = plan(req, s.cfg.AllowedToolTypes); err != nil {
			return err
		}
	}
	urls := s.cfg.URLs
	if opts.NoURLFetch {
		urls = sandboxURLs{}
	}
	if err := inlineSources(ctx, req, urls); err != nil {
		return err
	}
	t := &turn{s: s, req: req, plan: p, opts: opts, sink: sink, start: s.cfg.Now()}
	t.holder, _ = sink.(HoldingSink)
	if !req.Stream {
		if err := t.begin(wire.Usage{}); err != nil {
			return err
		}
	} else {
		// message_start waits for the first step's input tokens (StepStart),
		// the turn's first other event, or StartWait. The events of calls
		// the turn runs before its first step (a resumed cell, pending
		// calls) wait with it (keep).
		t.startMu.Lock()
		t.keeping = true
		t.startTimer = time.AfterFunc(s.cfg.StartWait, func() { _ = t.begin(wire.Usage{}) })
		t.startMu.Unlock()
		defer t.startTimer.Stop()
	}
	err := t.run(ctx)
	if err != nil {
		// A turn that fails before its first step started still opens
		// with message_start, for the sinks that keep its events.
		_ = t.begin(wire.Usage{})
	}
	return err
}

// turn is the state of one running request.
type turn struct {
	s     *Service
	req   *wire.Request
	plan  *Plan
	opts  RunOptions
	sink  Sink
	start time.Time
	// holder is sink when it can hold events (HoldingSink); held says
	// events were held since the last send or flush.
	holder HoldingSink
	held   bool

	// The message's start (message_start, ping) is sent once, by begin:
	// at the first step's start, before the turn's first other event, or
	// by startTimer, whichever comes first. begun says it was sent.
	// keeping says the turn runs the calls that come before its first
	// step, whose events (kept) follow the start when it is sent, so that
	// they do not open the message without the step's input tokens.
	startMu    sync.Mutex
	begun      atomic.Bool
	startTimer *time.Timer
	keeping    bool
	kept       []wire.Event

	next    int // index of the next content block
	usage   wire.Usage
	calls   int
	fetches int // web_fetch calls run
	codeRan bool
	// context is the conversation's text as the web_fetch tool checks a
	// URL against it: the request's messages, then each result of the
	// turn; built at the first web_fetch call.
	context *strings.Builder
	env     []string // Env and EnvFunc's variables, once a sub-tool ran

	// Programmatic tool calling (programmatic.go): the client's results
	// that resume paused cells, by code_execution call id; the calls whose
	// code called client tools; paused is set once a cell of this turn
	// paused on client tool calls, which ends the turn.
	resume  map[string][]ToolAnswer
	callers map[string]bool
	paused  bool
	// pausedUntil is the earliest deadline of the cells paused this turn.
	pausedUntil time.Time
}

// toolCall returns the call of a server tool.
func (t *turn) toolCall(id, name string, input json.RawMessage, env []string) ToolCall {
	c := ToolCall{ID: id, Name: name, Input: input, ContainerID: t.opts.ContainerID, ScopeID: t.scopeID(), Env: env, OrgID: t.opts.OrgID, UserID: t.opts.UserID}
	if name == wire.SubToolWebFetch {
		c.WebFetch = t.plan.WebFetch
	}
	if name == SubToolCodeExecution {
		c.CodeTools, c.CallerType = t.codeTools(), t.plan.ToolType
	}
	return c
}

// toolEnv returns the variables of the turn's sub-tool calls, calling
// EnvFunc the first time.
func (t *turn) toolEnv(ctx context.Context) ([]string, error) {
	if t.env != nil {
		return t.env, nil
	}
	env := append([]string{}, t.opts.Env...) // not nil: asked once
	if t.opts.EnvFunc != nil {
		more, err := t.opts.EnvFunc(ctx)
		if err != nil {
			return nil, fmt.Errorf("messages: tool env: %w", err)
		}
		env = append(env, more...)
	}
	t.env = env
	return env, nil
}

// scopeID is the turn's container as the client names it.
func (t *turn) scopeID() string {
	if t.opts.Container != nil {
		return t.opts.Container.ID
	}
	return ""
}

// begin sends the message's start unless it was sent: message_start, whose
// usage holds u's input side and the output the upstream's own start
// counted (usually 1), and a ping. It may be called from any goroutine.
func (t *turn) begin(u wire.Usage) error {
	t.startMu.Lock()
	defer t.startMu.Unlock()
	if t.begun.Load() {
		return nil
	}
	// Set once the start was sent: a send that finds it set follows it.
	defer t.begun.Store(true)
	if t.startTimer != nil {
		t.startTimer.Stop()
	}
	msg := &wire.Response{ID: "msg_" + id.Text(), Type: "message", Role: wire.RoleAssistant, Model: t.req.Model, Content: []wire.ContentBlock{},
		Usage: wire.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}}
	if err := t.sink.Send(wire.Event{Type: wire.EventMessageStart, Message: msg}); err != nil {
		return fmt.Errorf("messages: send: %w", err)
	}
	if err := t.sink.Send(wire.Event{Type: wire.EventPing}); err != nil {
		return fmt.Errorf("messages: send: %w", err)
	}
	kept := t.kept
	t.kept, t.keeping = nil, false
	for _, ev := range kept {
		if err := t.sink.Send(ev); err != nil {
			return fmt.Errorf("messages: send: %w", err)
		}
	}
	return nil
}

// keep holds ev back until the message's start is sent, while the turn
// runs the calls before its first step; it reports whether it did.
func (t *turn) keep(ev wire.Event) bool {
	if t.begun.Load() {
		return false
	}
	t.startMu.Lock()
	defer t.startMu.Unlock()
	if t.begun.Load() || !t.keeping {
		return false
	}
	t.kept = append(t.kept, ev)
	return true
}

// stopKeeping ends keep's hold once the turn's first step is asked for:
// the step's start sends the kept events after message_start, as does the
// step's first other event or the turn's end.
func (t *turn) stopKeeping() {
	t.startMu.Lock()
	t.keeping = false
	t.startMu.Unlock()
}

// open sends the message's start, unless it was sent, before the turn's
// first other event.
func (t *turn) open() error {
	if t.begun.Load() {
		return nil
	}
	return t.begin(wire.Usage{})
}

func (t *turn) send(ev wire.Event) error {
	if t.keep(ev) {
		return nil
	}
	if err := t.open(); err != nil {
		return err
	}
	t.held = false // a send writes the held events out too
	if err := t.sink.Send(ev); err != nil {
		return fmt.Errorf("messages: send: %w", err)
	}
	return nil
}

// sendAside is send for the goroutines of a running call's live output:
// nothing is held while a call runs, and it leaves the turn's own state
// alone.
func (t *turn) sendAside(ev wire.Event) error {
	if t.keep(ev) {
		return nil
	}
	if err := t.open(); err != nil {
		return err
	}
	if err := t.sink.Send(ev); err != nil {
		return fmt.Errorf("messages: send: %w", err)
	}
	return nil
}

// hold writes ev for the client without sending it on yet, where the sink
// can hold it: the caller sends the next event, or flushes, at once.
func (t *turn) hold(ev wire.Event) error {
	if t.holder == nil {
		return t.send(ev)
	}
	if t.keep(ev) {
		return nil
	}
	if err := t.open(); err != nil {
		return err
	}
	t.held = true
	if err := t.holder.Hold(ev); err != nil {
		return fmt.Errorf("messages: send: %w", err)
	}
	return nil
}

// flush sends the events held since the last send on to the client.
func (t *turn) flush() error {
	if !t.held {
		return nil
	}
	t.held = false
	if err := t.holder.Flush(); err != nil {
		return fmt.Errorf("messages: send: %w", err)
	}
	return nil
}

func (t *turn) run(ctx context.Context) error {
	history, resume, callers := stripProgrammatic(cloneMessages(t.req.Messages))
	t.resume, t.callers = resume, callers
	if err := t.resolvePending(ctx, history); err != nil {
		return err
	}
	t.stopKeeping()
	if t.paused {
		// The resumed code called client tools again.
		return t.finish(wire.StopToolUse, nil)
	}
	tools := t.toolDefinitions()
	step := StepRequest{
		Model: t.req.Model, MaxTokens: t.req.MaxTokens, System: t.req.System,
		Messages: readableHistory(upstreamHistory(history), tools), Tools: tools, ToolChoice: t.toolChoice(),
		Temperature: t.req.Temperature, TopP: t.req.TopP, TopK: t.req.TopK, StopSequences: t.req.StopSequences,
		Metadata: t.req.Metadata, Thinking: t.req.Thinking, Extra: t.req.Extra,
	}
	for iter := 1; ; iter++ {
		st, err := t.step(ctx, step)
		if err != nil {
			return err
		}
		res := st.res
		t.usage.InputTokens += res.Usage.InputTokens
		t.usage.OutputTokens += res.Usage.OutputTokens
		t.usage.CacheCreationInputTokens += res.Usage.CacheCreationInputTokens
		t.usage.CacheReadInputTokens += res.Usage.CacheReadInputTokens
		t.meter(ctx, res.Usage.InputTokens, res.Usage.OutputTokens)

		client, server := false, 0
		for i, b := range res.Content {
			if b.Type != wire.BlockToolUse {
				continue
			}
			if _, ok := st.srvIDs[i]; ok {
				server++
			} else {
				client = true
			}
		}
		if res.StopReason != wire.StopToolUse || client || server == 0 {
			// A final answer, or client tools (possibly beside server calls,
			// whose results come with the next request), end the turn.
			if err := st.flushAll(); err != nil {
				return err
			}
			return t.finish(res.StopReason, res.StopSequence)
		}
		// Each server call is followed by its result: blocks held back
		// during the step are sent once the calls before them have run.
		assistant := wire.Message{Role: wire.RoleAssistant}
		results := wire.Message{Role: wire.RoleUser}
		for i, b := range res.Content {
			if err := st.flush(i); err != nil {
				return err
			}
			id, ok := st.srvIDs[i]
			if ok {
				b.ID = id
			}
			if b.Type != wire.BlockText || b.Text != "" {
				assistant.Content = append(assistant.Content, b)
			}
			if !ok || t.paused {
				// After a cell paused on client tool calls, the step's
				// other server calls wait, without results, for the
				// request that resumes it.
				continue
			}
			env, err := t.toolEnv(ctx)
			if err != nil {
				return err
			}
			r, err := t.execute(ctx, t.toolCall(id, b.Name, b.Input, env))
			if err != nil {
				return err
			}
			results.Content = append(results.Content, upstreamResult(id, r))
		}
		if t.paused {
			return t.finish(wire.StopToolUse, nil)
		}
		step.Messages = append(step.Messages, assistant, results)
		if iter >= t.s.cfg.MaxToolIterations || t.s.cfg.Now().Sub(t.start) >= t.s.cfg.TurnTimeout {
			return t.finish(wire.StopPauseTurn, nil)
		}
	}
}

// stepOutput is a finished model step and the events of its blocks that
// were held back.
type stepOutput struct {
	t      *turn
	res    *StepResult
	srvIDs map[int]string // srvtoolu_ ids of server calls, by step block index
	held   map[int][]wire.Event
}

// flush sends the held-back events of step block i under a new index.
func (o *stepOutput) flush(i int) error {
	evs, ok := o.held[i]
	if !ok {
		return nil
	}
	delete(o.held, i)
	idx := o.t.next
	o.t.next++
	for _, ev := range evs {
		ev.Index = idx
		if err := o.t.send(ev); err != nil {
			return err
		}
	}
	return nil
}

func (o *stepOutput) flushAll() error {
	for i := range o.res.Content {
		if err := o.flush(i); err != nil {
			return err
		}
	}
	return nil
}

// step asks the model for one step. Streamed blocks are sent as they arrive
// until the first server call; later blocks are held back so that the
// call's result can follow it directly.
func (t *turn) step(ctx context.Context, req StepRequest) (*stepOutput, error) {
	o := &stepOutput{t: t, srvIDs: map[int]string{}, held: map[int][]wire.Event{}}
	live := map[int]int{} // step index -> response index
	holding := false
	startBlock := func(i int, b wire.ContentBlock) wire.ContentBlock {
		if b.Type == wire.BlockToolUse && t.isServerTool(b.Name) {
			sid := "srvtoolu_" + id.Text()
			o.srvIDs[i] = sid
			b.Type, b.ID = wire.BlockServerToolUse, sid
		}
		if b.Type == wire.BlockToolUse || b.Type == wire.BlockServerToolUse {
			// The model called it itself: the client is told so, as the
			// SDKs type every tool_use and server_tool_use with a caller.
			// A request's history drops it again (wire), so the model's
			// requests never carry it.
			b.Caller = &wire.Caller{Type: wire.CallerDirect}
		}
		return b
	}
	if t.req.Stream {
		var started wire.Usage // the step's input tokens, as its start told them
		res, err := t.s.model.StreamStep(ctx, req, func(ev StepEvent) error {
			var out wire.Event
			switch ev.Kind {
			case StepBlockStart:
				b := startBlock(ev.Index, ev.Block)
				if b.Type == wire.BlockToolUse || b.Type == wire.BlockServerToolUse {
					b.Input = json.RawMessage(`{}`)
				}
				out = wire.Event{Type: wire.EventContentBlockStart, ContentBlock: &b}
				if !holding {
					live[ev.Index] = t.next
					t.next++
					holding = b.Type == wire.BlockServerToolUse
				}
			case StepBlockDelta:
				d := ev.Delta
				out = wire.Event{Type: wire.EventContentBlockDelta, Delta: &d}
			case StepBlockStop:
				out = wire.Event{Type: wire.EventContentBlockStop}
			case StepStart:
				// The first step's start gives message_start its input
				// tokens; a later step's counts go to message_delta.
				started = ev.Usage
				return t.begin(ev.Usage)
			default:
				if ev.More {
					return nil
				}
				return t.flush()
			}
			if idx, ok := live[ev.Index]; ok {
				out.Index = idx
				if ev.More {
					return t.hold(out)
				}
				return t.send(out)
			}
			o.held[ev.Index] = append(o.held[ev.Index], out)
			if ev.More {
				return nil
			}
			return t.flush()
		})
		// Whatever the step held goes out before the turn goes on (to a
		// tool call, the next step, its end) or reports its error.
		if ferr := t.flush(); err == nil && ferr != nil {
			// The step ended upstream: all of it counts.
			t.meter(ctx, res.Usage.InputTokens, res.Usage.OutputTokens)
			return nil, ferr
		}
		if err != nil {
			// A step cut short (its client went away, the turn was
			// stopped, the upstream failed) still used the input the
			// upstream counted at its start; its output is not known.
			t.meter(ctx, started.InputTokens, 0)
			return nil, fmt.Errorf("messages: model step: %w", err)
		}
		o.res = res
		return o, nil
	}
	res, err := t.s.model.Step(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("messages: model step: %w", err)
	}
	o.res = res
	for i, b := range res.Content {
		o.held[i] = blockEvents(startBlock(i, b))
	}
	return o, nil
}

// meter records the model tokens of one step for the turn's user, in its
// container.
func (t *turn) meter(ctx context.Context, input, output int) {
	if m := t.s.cfg.Tokens; m != nil {
		m.Tokens(ctx, t.opts.OrgID, t.opts.UserID, t.opts.ContainerID, input, output)
	}
}

// blockEvents returns a complete block as start, deltas and stop events,
// the way the Anthropic API streams it (indexes left zero).
func blockEvents(b wire.ContentBlock) []wire.Event {
	start := b
	var deltas []wire.BlockDelta
	switch b.Type {
	case wire.BlockText:
		start.Text, start.Citations = "", nil
		if b.Text != "" {
			deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaText, Text: b.Text})
		}
	case wire.BlockToolUse, wire.BlockServerToolUse:
		start.Input = json.RawMessage(`{}`)
		if len(b.Input) > 0 {
			deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaInputJSON, PartialJSON: string(b.Input)})
		}
	case wire.BlockThinking:
		start.Thinking, start.Signature = "", ""
		if b.Thinking != "" {
			deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaThinking, Thinking: b.Thinking})
		}
		if b.Signature != "" {
			deltas = append(deltas, wire.BlockDelta{Type: wire.DeltaSignature, Signature: b.Signature})
		}
	}
	evs := []wire.Event{{Type: wire.EventContentBlockStart, ContentBlock: &start}}
	for i := range deltas {
		evs = append(evs, wire.Event{Type: wire.EventContentBlockDelta, Delta: &deltas[i]})
	}
	return append(evs, wire.Event{Type: wire.EventContentBlockStop})
}

// IsOwnServerTool reports whether a server tool named name is one of
// threadbox's (the code-execution sub-tools, code_execution's Python among
// them, the sandbox_v1 tools), which the loop runs; any other
// server_tool_use block in a history is the model upstream's own (web
// search), run and answered by the upstream.
func IsOwnServerTool(name string) bool {
	return name == wire.SubToolBash || name == wire.SubToolTextEditor || name == SubToolCodeExecution || IsSandboxTool(name) || name == wire.SubToolWebFetch
}

// route decides who runs a tool_use named name: a server tool's executor
// (nil when its family has none) with server true, or the client.
func (t *turn) route(name string) (exec ToolExecutor, server bool) {
	switch {
	case IsSandboxTool(name):
		return t.s.tools.Sandbox, t.plan.Sandbox && slices.Contains(t.plan.ServerTools, name)
	case name == wire.SubToolBash || name == wire.SubToolTextEditor || name == SubToolCodeExecution:
		return t.s.tools.CodeExecution, t.plan.CodeExecution && slices.Contains(t.plan.ServerTools, name)
	case name == wire.SubToolWebFetch:
		return t.s.tools.WebFetch, t.plan.WebFetch != nil
	}
	return nil, false
}

func (t *turn) isServerTool(name string) bool {
	_, server := t.route(name)
	return server
}

// execute runs one sub-tool call and sends its result block.
func (t *turn) execute(ctx context.Context, call ToolCall) (*wire.ToolResult, error) {
	var r *wire.ToolResult
	if call.Name == wire.SubToolWebFetch {
		r = t.fetchRefusal(call) // nil lets the call run
	}
	exec, _ := t.route(call.Name)
	switch {
	case r != nil:
	case exec == nil:
		r = ErrorResult(call.Name, wire.CodeUnavailable, NotConfiguredMessage)
	default:
		if t.opts.BeforeToolCall != nil {
			t.opts.BeforeToolCall(ctx, call, nil)
		}
		var (
			err  error
			live *liveOutput
		)
		if t.opts.LiveOutput {
			live = newLiveOutput(call.ID, t.sendAside)
			call.Output = func(s string, chunk []byte) { live.write(s, chunk) }
		}
		r, err = exec.Execute(ctx, call)
		if live != nil {
			live.close()
		}
		if err == nil && len(r.Pending) > 0 {
			// The code awaits client tool calls: they go to the client,
			// and the call's result comes once they are answered.
			t.codeRan, t.paused = true, true
			if u := r.PausedUntil; !u.IsZero() && (t.pausedUntil.IsZero() || u.Before(t.pausedUntil)) {
				t.pausedUntil = u
			}
			if call.Resume == nil {
				t.calls++
			}
			return r, t.sendPending(call, r.Pending)
		}
		if err != nil {
			if live != nil && ctx.Err() != nil {
				// The turn was stopped mid-call: the call's result says
				// so, with the output it produced, for whoever still
				// listens (a chat turn's log, its stored message).
				t.stopped(ctx, call, stoppedResult(call, live))
			}
			return nil, fmt.Errorf("messages: %s: %w", call.Name, err)
		}
		t.codeRan = t.codeRan || call.Name != wire.SubToolWebFetch
	}
	switch {
	case call.Name == wire.SubToolWebFetch:
		if r.ErrorCode != wire.FetchMaxUsesExceeded {
			t.fetches++
		}
		t.noteContext(r)
	case call.Resume == nil:
		t.calls++
	}
	blockType := resultBlockType(call.Name)
	shown := *r
	if t.plan.ToolType != wire.ToolTypeCodeExecutionV1 && !IsSandboxTool(call.Name) {
		shown.Detail = nil
	}
	if err := t.send(wire.Event{Type: wire.EventContentBlockStart, Index: t.next, ContentBlock: &wire.ContentBlock{Type: blockType, ToolUseID: call.ID, Result: &shown}}); err != nil {
		return nil, err
	}
	if err := t.send(wire.Event{Type: wire.EventContentBlockStop, Index: t.next}); err != nil {
		return nil, err
	}
	t.next++
	if t.opts.OnToolCall != nil {
		t.opts.OnToolCall(ctx, call, r)
	}
	return r, nil
}

// stopped sends the result of a call its turn's end cut short and tells
// the tool hook, as for a call that ended; failures to send are the
// ended turn's and are not reported.
func (t *turn) stopped(ctx context.Context, call ToolCall, r *wire.ToolResult) {
	_ = t.send(wire.Event{Type: wire.EventContentBlockStart, Index: t.next, ContentBlock: &wire.ContentBlock{Type: resultBlockType(call.Name), ToolUseID: call.ID, Result: r}})
	_ = t.send(wire.Event{Type: wire.EventContentBlockStop, Index: t.next})
	t.next++
	if t.opts.OnToolCall != nil {
		t.opts.OnToolCall(context.WithoutCancel(ctx), call, r)
	}
}

// ErrorResult returns the error result of a sub-tool call, with the detail
// that the product's own tool type shows.
func ErrorResult(subTool, code, explanation string) *wire.ToolResult {
	typ := wire.ResultBashError
	switch {
	case subTool == wire.SubToolTextEditor:
		typ = wire.ResultEditorError
	case subTool == SubToolCodeExecution:
		typ = wire.ResultCodeExecutionError
	case IsSandboxTool(subTool):
		typ = wire.ResultSandboxError
	case subTool == wire.SubToolWebFetch:
		return wire.WebFetchError(code)
	}
	return &wire.ToolResult{Type: typ, ErrorCode: code, Detail: &wire.ErrorDetail{Code: code, Explanation: explanation}}
}

// resolvePending runs the server calls that the last assistant message left
// without results (it also called client tools) and appends their results
// to it, at most MaxToolIterations of them (the history is the client's to
// write). Unanswered calls of older messages, and those past the bound,
// get an unavailable error.
func (t *turn) resolvePending(ctx context.Context, history []wire.Message) error {
	runs := 0
	last := -1
	for i := range history {
		if history[i].Role == wire.RoleAssistant {
			last = i
		}
	}
	for i := range history {
		if history[i].Role != wire.RoleAssistant {
			continue
		}
		answered := map[string]bool{}
		for _, b := range history[i].Content {
			if isResultBlock(b.Type) {
				answered[b.ToolUseID] = true
			}
		}
		var added []wire.ContentBlock
		for _, b := range history[i].Content {
			// The upstream's own server tools (web search) are the
			// upstream's to answer, and were: their results follow them.
			if b.Type != wire.BlockServerToolUse || answered[b.ID] || !IsOwnServerTool(b.Name) {
				continue
			}
			if t.paused {
				break // a resumed cell paused again: the rest waits
			}
			var r *wire.ToolResult
			switch {
			case i == last && t.isServerTool(b.Name) && t.resume[b.ID] != nil:
				env, err := t.toolEnv(ctx)
				if err != nil {
					return err
				}
				call := t.toolCall(b.ID, b.Name, b.Input, env)
				call.Resume = t.resume[b.ID]
				r, err = t.execute(ctx, call)
				if err != nil {
					return err
				}
				if t.paused {
					continue
				}
			case t.callers[b.ID]:
				r = ErrorResult(b.Name, wire.CodeUnavailable, "The call was not resumed: the tool calls its code made were not answered in this request.")
			case i == last && t.isServerTool(b.Name) && runs >= t.s.cfg.MaxToolIterations:
				r = ErrorResult(b.Name, wire.CodeUnavailable, fmt.Sprintf("The call was not run: a request runs at most %d pending calls.", t.s.cfg.MaxToolIterations))
			case i == last && t.isServerTool(b.Name):
				runs++
				env, err := t.toolEnv(ctx)
				if err != nil {
					return err
				}
				r, err = t.execute(ctx, t.toolCall(b.ID, b.Name, b.Input, env))
				if err != nil {
					return err
				}
			default:
				r = ErrorResult(b.Name, wire.CodeUnavailable, "The call was not run.")
			}
			typ := resultBlockType(b.Name)
			added = append(added, wire.ContentBlock{Type: typ, ToolUseID: b.ID, Result: r})
		}
		history[i].Content = append(history[i].Content, added...)
	}
	return nil
}

func (t *turn) finish(stopReason string, stopSequence *string) error {
	d := &wire.MessageDelta{StopReason: stopReason, StopSequence: stopSequence}
	if t.opts.Container != nil && (t.opts.ReportContainer || t.codeRan) {
		c := *t.opts.Container
		if t.opts.ExpiresAt != nil {
			c.ExpiresAt = t.opts.ExpiresAt().UTC()
		}
		if t.paused && !t.pausedUntil.IsZero() && (c.ExpiresAt.IsZero() || t.pausedUntil.Before(c.ExpiresAt)) {
			// A paused cell waits for the client's results until then:
			// a later answer finds it over (docs/messages.md).
			c.ExpiresAt = t.pausedUntil.UTC().Truncate(time.Second)
		}
		d.Container = &c
	}
	u := t.usage
	if t.calls > 0 || t.fetches > 0 || t.plan.CodeExecution || t.plan.WebFetch != nil {
		u.ServerToolUse = &wire.ServerToolUse{CodeExecutionRequests: t.calls, WebFetchRequests: t.fetches}
	}
	// message_stop follows at once: the two are written together.
	if err := t.hold(wire.Event{Type: wire.EventMessageDelta, MessageDelta: d, Usage: &u}); err != nil {
		return err
	}
	return t.send(wire.Event{Type: wire.EventMessageStop})
}

// toolChoice passes the client's tool_choice on; one naming the
// code-execution tool becomes "any", as the model knows only its sub-tools,
// with the choice's other options (disable_parallel_tool_use) kept.
func (t *turn) toolChoice() json.RawMessage {
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if len(t.req.ToolChoice) == 0 || json.Unmarshal(t.req.ToolChoice, &tc) != nil {
		return t.req.ToolChoice
	}
	if tc.Type == "tool" && tc.Name == "code_execution" && t.plan.CodeExecution {
		var fields map[string]json.RawMessage
		if json.Unmarshal(t.req.ToolChoice, &fields) != nil {
			return json.RawMessage(`{"type":"any"}`)
		}
		delete(fields, "name")
		fields["type"] = json.RawMessage(`"any"`)
		b, err := json.Marshal(fields)
		if err != nil {
			return json.RawMessage(`{"type":"any"}`)
		}
		return b
	}
	return t.req.ToolChoice
}

func (t *turn) toolDefinitions() []ToolDefinition {
	var defs []ToolDefinition
	if t.plan.CodeExecution {
		if !PythonOnly(t.plan.ToolType) {
			defs = append(defs, SubToolDefinitions()...)
		}
		if HasPythonREPL(t.plan.ToolType) {
			defs = append(defs, t.pythonDefinition())
		}
	}
	if t.plan.Sandbox {
		defs = append(defs, SandboxToolDefinitions(t.plan.ServerTools)...)
	}
	if t.plan.WebFetch != nil {
		defs = append(defs, webFetchDefinition)
	}
	for _, tool := range t.req.Tools {
		if isCodeExecutionType(tool.Type) || tool.Type == wire.ToolTypeSandboxV1 || isWebFetchType(tool.Type) || !directTool(tool) {
			// A tool only code may call is the code's, not the model's.
			continue
		}
		defs = append(defs, clientDefinition(tool))
	}
	return defs
}

// ErrorEvent returns the error event that ends a stream broken by err.
func ErrorEvent(err error) wire.Event {
	_, body := ErrorStatus(err)
	return wire.Event{Type: wire.EventError, Error: &body}
}

// ErrorStatus maps an error of Run to an HTTP status and the Anthropic error
// body. The types are the error envelope's (docs/api.md): an upstream's own 5xx type
// (Anthropic's "overloaded_error") becomes api_error, its message kept.
func ErrorStatus(err error) (int, wire.ErrorBody) {
	var up *UpstreamError
	switch {
	case errors.Is(err, ErrUpstreamUnavailable):
		return 503, wire.ErrorBody{Type: "api_error", Message: "The model upstream is unavailable."}
	case errors.As(err, &up):
		status := up.StatusCode
		typ := up.Type
		switch {
		case status == 429:
			typ = "rate_limit_error"
		case status == 0 || status >= 500:
			status, typ = 502, "api_error"
		case status == 400 || status == 413 || status == 404:
			typ = "invalid_request_error"
		default:
			status, typ = 502, "api_error"
		}
		return status, wire.ErrorBody{Type: typ, Message: up.Message}
	case fault.Is(err, fault.Invalid):
		return 400, wire.ErrorBody{Type: "invalid_request_error", Message: fault.MessageOf(err)}
	case errors.Is(err, context.DeadlineExceeded):
		return 504, wire.ErrorBody{Type: "api_error", Message: "The request timed out."}
	}
	return 500, wire.ErrorBody{Type: "api_error", Message: "Internal server error."}
}

// Fault returns an error of Run as a fault (domain/fault) with a message
// the client may be told, so that what is kept of a failure (a detached
// turn's log, a chat message's ending) holds its kind rather than an HTTP
// status: an upstream's answer by its status (429 rate limited, 400
// invalid, 404 not found, 413 too large, anything else the upstream's
// failure), an unreachable upstream unavailable, a deadline a timeout.
// A fault is returned as it is; anything else is internal.
func Fault(err error) error {
	var up *UpstreamError
	switch {
	case fault.KindOf(err) != fault.Internal:
		return err
	case errors.Is(err, ErrUpstreamUnavailable):
		return fault.Wrap(fault.Unavailable, "The model upstream is unavailable.", err)
	case errors.As(err, &up):
		kind := fault.Upstream
		switch up.StatusCode {
		case 429:
			kind = fault.RateLimited
		case 400:
			kind = fault.Invalid
		case 404:
			kind = fault.NotFound
		case 413:
			kind = fault.TooLarge
		}
		return fault.Wrap(kind, up.Message, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fault.Wrap(fault.Timeout, "The request timed out.", err)
	}
	return fault.Wrap(fault.Internal, "Internal server error.", err)
}

func cloneMessages(in []wire.Message) []wire.Message {
	out := make([]wire.Message, len(in))
	for i, m := range in {
		out[i] = wire.Message{Role: m.Role, Content: append([]wire.ContentBlock(nil), m.Content...)}
	}
	return out
}
