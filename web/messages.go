package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/user"
)

// DefaultPingInterval is how long a Messages API stream may stay silent
// before a ping event is sent.
const DefaultPingInterval = 2 * time.Second

// maxHold is how long a stream's preamble may be held waiting for the
// model's first output, so that an upstream that fails (after the adapter's
// retries) is answered with its HTTP status rather than an error event.
const maxHold = 10 * time.Second

// touchEvery is how stale a container's last use may be before a request
// records a new one; closer uses share one write.
const touchEvery = time.Second

// MessageContainers resolves the containers of Messages API requests
// (app/containers.Service).
type MessageContainers interface {
	// ForUser resolves the caller's container named clientID ("" is the
	// default container, made anew past its maximum age), creating it.
	ForUser(ctx context.Context, p user.Principal, clientID string) (container.Container, error)
	// Scope resolves a thread id the caller may access or a container id
	// the caller chose, preparing its folders; without create an unknown
	// container is not found.
	Scope(ctx context.Context, p user.Principal, scopeID string, create bool) (container.Container, error)
	// Peek finds the container a scope id names without changing anything:
	// ok false when a request would make it; a named one past its maximum
	// age is the request's error.
	Peek(ctx context.Context, p user.Principal, scopeID string) (c container.Container, ok bool, err error)
	// Touch records a use of the container now.
	Touch(ctx context.Context, c container.Container) (container.Container, error)
	// ExpiresAt is the container's rolling expiry shown to clients.
	ExpiresAt(c container.Container) time.Time
}

// RunQuota checks the running-sandbox quotas (app/quota.Service).
type RunQuota interface {
	// BeforeRun refuses (fault.RateLimited, naming the quota) a request
	// that may boot the sandbox of the container with storage id
	// containerID ("" when the request would make it) when the user or the
	// org has as many running as the policy allows.
	BeforeRun(ctx context.Context, orgID, userID, containerID string) error
}

// MessagesAPI is what the Messages API handlers (CONTRACT §3) call.
type MessagesAPI struct {
	// Engine runs turns (app/messages.Service).
	Engine *messages.Service
	// Containers resolves request containers.
	Containers MessageContainers
	// DefaultModel is what the model "default" (or none) resolves to; empty
	// leaves it to the model adapter.
	DefaultModel string
	// SandboxEnv, when set, gives each turn that may run commands its
	// ANTHROPIC_* variables and short-lived sandbox token.
	SandboxEnv SandboxEnv
	// PingInterval is how long a stream may stay silent before a ping; zero
	// means DefaultPingInterval. Pings also detect clients that went away
	// while a long command runs.
	PingInterval time.Duration
	// Quota, when set, refuses requests that may boot a sandbox past the
	// org policy's running-sandbox quotas (app/quota.Service).
	Quota RunQuota

	// prepared remembers the containers whose folders this server made,
	// by storage id and creation time (a container removed past its
	// maximum age and made anew is another one).
	prepared sync.Map
}

func (m *MessagesAPI) pingInterval() time.Duration {
	if m.PingInterval > 0 {
		return m.PingInterval
	}
	return DefaultPingInterval
}

// parseMessagesRequest decodes a Messages API body.
func parseMessagesRequest(c *fiber.Ctx) (*messages.Request, error) {
	b, err := body(c, maxJSONBody)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fault.New(fault.Invalid, "request body must be a JSON object")
	}
	// Its own UnmarshalJSON validates the whole body; json.Unmarshal would
	// scan it once more first.
	var req messages.Request
	if err := req.UnmarshalJSON(b); err != nil {
		msg := jsonErr(err)
		if msg == "malformed" {
			msg = err.Error()
		}
		return nil, fault.Errorf(fault.Invalid, "invalid request body: %s", msg)
	}
	return &req, nil
}

func (s *Server) messagesAPI() (*MessagesAPI, error) {
	m := s.svc.Messages
	if m == nil || m.Engine == nil || m.Containers == nil {
		return nil, fault.New(fault.Unavailable, "the Messages API is not configured on this server")
	}
	return m, nil
}

// resolveModel replaces "default" (or no model) with the configured model.
func (m *MessagesAPI) resolveModel(req *messages.Request) {
	if (req.Model == "" || req.Model == "default") && m.DefaultModel != "" {
		req.Model = m.DefaultModel
	}
	if req.Model == "" {
		req.Model = "default"
	}
}

// needsContainer reports whether a request can touch a container: it
// enables code execution, names a container or refers to container files.
func needsContainer(req *messages.Request, plan *messages.Plan) bool {
	return plan.CodeExecution || plan.Sandbox || (req.Container != nil && (req.Container.ID != "" || len(req.Container.Skills) > 0)) || len(plan.ContainerUploads) > 0
}

// requestScope is the container a request names: its container's id, or
// when it names none the caller's default container — for a sandbox token
// the container of its own sandbox, the only one it may use.
func requestScope(p user.Principal, req *messages.Request) string {
	switch {
	case req.Container != nil && req.Container.ID != "":
		return req.Container.ID
	case p.Kind == user.SandboxToken:
		return container.RefFor(p.ContainerID, p.UserID)
	}
	return container.DefaultClientID
}

// containerOf resolves the request's container: the one it names (a new id
// creates it; a thread id the caller can access names the thread's), or the
// caller's default container. Its folders are prepared the first time this
// server sees it.
func (s *Server) containerOf(ctx context.Context, m *MessagesAPI, p user.Principal, req *messages.Request) (container.Container, error) {
	ref := container.ParseRef("") // the caller's default container
	if (req.Container != nil && req.Container.ID != "") || p.Kind == user.SandboxToken {
		ref = container.ParseRef(requestScope(p, req))
	}
	if threadID, ok := ref.Thread(); ok {
		return m.Containers.Scope(ctx, p, threadID, true)
	}
	c, err := m.Containers.ForUser(ctx, p, ref.ClientID())
	if err != nil {
		return container.Container{}, err
	}
	key := c.ID() + "@" + c.CreatedAt().UTC().Format(time.RFC3339Nano)
	if _, ok := m.prepared.Load(key); ok {
		return c, nil
	}
	// Scope prepares the container's folders (ForUser does not).
	if c, err = m.Containers.Scope(ctx, p, c.ClientID(), true); err != nil {
		return container.Container{}, err
	}
	m.prepared.Store(key, struct{}{})
	return c, nil
}

// beforeRun refuses a request that may run code when booting its sandbox
// would pass a running-sandbox quota, before the request makes its
// container: a refused request leaves nothing behind. A request to a
// container whose sandbox runs is not refused.
func (s *Server) beforeRun(ctx context.Context, m *MessagesAPI, p user.Principal, req *messages.Request, plan *messages.Plan) error {
	if m.Quota == nil || !(plan.CodeExecution || plan.Sandbox) {
		return nil
	}
	scope := requestScope(p, req)
	id := ""
	// A scope that names nothing yet, or nothing the caller may use, is
	// left to containerOf to make or refuse.
	if c, ok, err := m.Containers.Peek(ctx, p, scope); err == nil && ok {
		id = c.ID()
	}
	return m.Quota.BeforeRun(ctx, p.OrgID, p.UserID, id)
}

// checkUploads makes sure every container_upload block names an existing
// file of the container.
func (s *Server) checkUploads(ctx context.Context, p user.Principal, scopeID string, req *messages.Request) error {
	for i, msg := range req.Messages {
		for j, b := range msg.Content {
			if b.Type != messages.BlockContainerUpload {
				continue
			}
			if s.svc.Files == nil {
				return fault.New(fault.Unavailable, "container files are not configured on this server")
			}
			if _, err := s.svc.Files.Metadata(ctx, p, scopeID, b.FileID); err != nil {
				if fault.Is(err, fault.NotFound) || fault.Is(err, fault.Invalid) {
					return fault.Errorf(fault.Invalid, "messages.%d.content.%d.file_id: no file %q in container %q", i, j, b.FileID, scopeID)
				}
				return err
			}
		}
	}
	return nil
}

// withSkillsPrompt appends text to the request's system prompt (a string
// or an array of text blocks).
func withSkillsPrompt(system json.RawMessage, text string) (json.RawMessage, error) {
	sys := strings.TrimSpace(string(system))
	switch {
	case sys == "" || sys == "null":
		return json.Marshal(text)
	case strings.HasPrefix(sys, `"`):
		var s string
		if err := json.Unmarshal(system, &s); err != nil {
			return nil, fault.Errorf(fault.Invalid, "system: %s", jsonErr(err))
		}
		return json.Marshal(s + "\n\n" + text)
	case strings.HasPrefix(sys, "["):
		var blocks []json.RawMessage
		if err := json.Unmarshal(system, &blocks); err != nil {
			return nil, fault.Errorf(fault.Invalid, "system: %s", jsonErr(err))
		}
		tb, err := json.Marshal(map[string]string{"type": "text", "text": text})
		if err != nil {
			return nil, fmt.Errorf("messages: system: %w", err)
		}
		return json.Marshal(append(blocks, tb))
	}
	return nil, fault.New(fault.Invalid, "system: must be a string or an array of text blocks")
}

// prepare resolves what a request runs with: the model name, the container
// (touched, so its expiry rolls forward), its skills and uploads.
func (s *Server) prepare(ctx context.Context, m *MessagesAPI, p user.Principal, req *messages.Request) (messages.RunOptions, error) {
	m.resolveModel(req)
	plan, err := m.Engine.Validate(req)
	if err != nil {
		return messages.RunOptions{}, err
	}
	if !needsContainer(req, plan) {
		return messages.RunOptions{}, nil
	}
	if err := s.beforeRun(ctx, m, p, req, plan); err != nil {
		return messages.RunOptions{}, err
	}
	c, err := s.containerOf(ctx, m, p, req)
	if err != nil {
		return messages.RunOptions{}, err
	}
	if err := s.checkUploads(ctx, p, c.ClientID(), req); err != nil {
		return messages.RunOptions{}, err
	}
	var refs []messages.SkillParam
	if req.Container != nil {
		refs = req.Container.Skills
	}
	if len(refs) > 0 && s.svc.Workspace == nil {
		return messages.RunOptions{}, fault.New(fault.Unavailable, "skills are not configured on this server")
	}
	if s.svc.Workspace != nil {
		// Without skills too: a request sees only the skills it asks for.
		text, err := s.svc.Workspace.PrepareSkills(ctx, p, c.ID(), refs)
		if err != nil {
			return messages.RunOptions{}, err
		}
		if text != "" {
			if req.System, err = withSkillsPrompt(req.System, text); err != nil {
				return messages.RunOptions{}, err
			}
		}
	}
	if time.Since(c.LastActiveAt()) >= touchEvery {
		if c, err = m.Containers.Touch(ctx, c); err != nil {
			return messages.RunOptions{}, fmt.Errorf("messages: touch container: %w", err)
		}
	}
	return messages.RunOptions{
		ContainerID:     c.ID(),
		Container:       &messages.Container{ID: c.ClientID(), ExpiresAt: m.Containers.ExpiresAt(c).UTC()},
		ExpiresAt:       func() time.Time { return m.Containers.ExpiresAt(c.Touch(time.Now())) },
		ReportContainer: req.Container != nil && req.Container.ID != "",
	}, nil
}

// createMessage is POST /api/gpt/v1/messages: one turn of the tool loop,
// answered as a Messages response or, with stream, as its event stream.
func (s *Server) createMessage(c *fiber.Ctx) error {
	m, err := s.messagesAPI()
	if err != nil {
		return err
	}
	req, err := parseMessagesRequest(c)
	if err != nil {
		return err
	}
	p := principal(c)
	opts, err := s.prepare(c.UserContext(), m, p, req)
	if err != nil {
		return err
	}
	opts.OrgID, opts.UserID = p.OrgID, p.UserID
	end := m.beginSandboxTurn(p, req, &opts)
	if req.Stream {
		return s.streamMessage(c, m, req, opts, end)
	}
	defer end()
	ctx, cancel := context.WithCancel(c.UserContext())
	defer cancel()
	defer watchPeer(c.Context().Conn(), m.pingInterval()/2, cancel)()
	resp, err := m.Engine.Create(ctx, req, opts)
	if err != nil {
		return s.messageError(c, err)
	}
	return c.JSON(resp)
}

// watchPeer cancels a non-streamed turn when its client closes the
// connection (checked every interval; nothing is written), so that the
// model call and a running command stop. The returned function ends the
// watch and waits for it.
func watchPeer(conn net.Conn, every time.Duration, cancel context.CancelFunc) (stop func()) {
	if conn == nil || every <= 0 {
		return func() {}
	}
	// A timer rather than a goroutine: a turn that ends before the first
	// check costs no goroutine and no wake-up. mu keeps a check from
	// touching conn once stop has returned.
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if peerClosed(conn) {
			cancel()
			return
		}
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// messageError answers a turn that failed before any byte was sent:
// upstream and loop errors as app/messages maps them, the rest as usual.
func (s *Server) messageError(c *fiber.Ctx, err error) error {
	if fault.KindOf(err) != fault.Internal {
		return err
	}
	status, body := messages.ErrorStatus(err)
	if status >= 500 {
		eid := id.New("err")
		s.log.Error("messages: turn failed", "status", status, "error_id", eid, "err", err)
		body.Message = withErrorID(body.Message, eid)
	}
	return c.Status(status).JSON(envelope{Type: "error", Error: envelopeBody{Type: body.Type, Message: body.Message}})
}

// errorEvent returns the event that ends a stream broken by err.
func errorEvent(err error) messages.Event {
	ev := messages.ErrorEvent(err)
	if k := fault.KindOf(err); k != fault.Internal {
		ev.Error = &messages.ErrorBody{Type: typeOf(statusOf(k)), Message: fault.MessageOf(err)}
	}
	return ev
}

// streamMessage runs the turn in its own goroutine and answers with its
// events. The stream's preamble (message_start, ping) is held until the
// model's first output, an error or maxHold: an error before then
// is answered as a plain HTTP error (503 for an unreachable upstream).
// Afterwards each event is written and flushed before the turn goes on; a
// failed write (the client went away) cancels the turn's context, which
// stops the model call and kills a running command.
func (s *Server) streamMessage(c *fiber.Ctx, m *MessagesAPI, req *messages.Request, opts messages.RunOptions, end func()) error {
	ctx, cancel := context.WithCancel(context.Background())
	st := newEventStream(ctx)
	log := s.log
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil { // a panic fails the turn, not the server
				log.Error("panic in a streamed turn", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = errors.New("internal error")
			}
			end() // the turn is over: its sandbox token stops working
			st.finish(err)
		}()
		err = m.Engine.Run(ctx, req, opts, st)
	}()
	wait := time.NewTimer(maxHold)
	defer wait.Stop()
	// Nothing is written while the preamble is held: watch the connection.
	stopWatch := watchPeer(c.Context().Conn(), m.pingInterval()/2, cancel)
	defer stopWatch()
	select {
	case <-st.committed:
	case err := <-st.early:
		cancel()
		return s.messageError(c, err)
	case <-wait.C:
		if !st.commit() {
			cancel()
			return s.messageError(c, <-st.early)
		}
	}
	every, peer := m.pingInterval(), c.Context().Conn()
	sseHeaders(c)
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer s.survive("a stream writer")
		defer cancel()
		w := &sseWriter{w: bw, cancel: cancel, last: time.Now(), peer: peer}
		stop := w.keepAlive(every, messages.EventPing, messages.Event{Type: messages.EventPing})
		defer stop()
		for _, ev := range st.preamble() {
			if w.Event(ev.Type, ev) != nil {
				return
			}
		}
		for {
			select {
			case ev := <-st.out:
				err := w.Event(ev.Type, ev)
				st.ack <- err
				if err != nil {
					return
				}
			case err := <-st.end:
				if err != nil && ctx.Err() == nil {
					eid := id.New("err")
					log.Warn("messages: turn failed mid-stream", "error_id", eid, "err", err)
					ev := errorEvent(err)
					if st, _ := messages.ErrorStatus(err); st >= 500 && fault.KindOf(err) == fault.Internal {
						ev.Error.Message = withErrorID(ev.Error.Message, eid)
					}
					_ = w.Event(ev.Type, ev)
				}
				return
			}
		}
	})
	return nil
}

// eventStream is the Sink of a streamed turn: it holds the preamble until
// the stream is committed, then hands each event to the writer and waits
// for it to be written.
type eventStream struct {
	ctx context.Context

	mu       sync.Mutex
	isCommit bool
	finished bool
	pre      []messages.Event

	committed chan struct{}       // closed on commit
	out       chan messages.Event // events after commit, to the writer
	ack       chan error          // the writer's result for each event of out
	end       chan error          // Run's result, once committed
	early     chan error          // Run's result, when it ended before commit
}

func newEventStream(ctx context.Context) *eventStream {
	return &eventStream{
		ctx: ctx, committed: make(chan struct{}), out: make(chan messages.Event),
		ack: make(chan error, 1), end: make(chan error, 1), early: make(chan error, 1),
	}
}

// commit opens the stream unless the turn already ended uncommitted; it
// reports whether the stream is committed.
func (e *eventStream) commit() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.commitLocked()
}

func (e *eventStream) commitLocked() bool {
	if e.isCommit {
		return true
	}
	if e.finished {
		return false
	}
	e.isCommit = true
	close(e.committed)
	return true
}

// preamble returns the events held before commit.
func (e *eventStream) preamble() []messages.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	pre := e.pre
	e.pre = nil
	return pre
}

// Send holds the preamble, then passes each event to the writer and returns
// once it was written.
func (e *eventStream) Send(ev messages.Event) error {
	e.mu.Lock()
	if !e.isCommit && (ev.Type == messages.EventMessageStart || ev.Type == messages.EventPing) {
		e.pre = append(e.pre, ev)
		e.mu.Unlock()
		return nil
	}
	e.commitLocked()
	e.mu.Unlock()
	select {
	case e.out <- ev:
	case <-e.ctx.Done():
		return fmt.Errorf("messages: stream: %w", e.ctx.Err())
	}
	select {
	case err := <-e.ack:
		return err
	case <-e.ctx.Done():
		return fmt.Errorf("messages: stream: %w", e.ctx.Err())
	}
}

// finish reports Run's result to the writer, or to the handler when the
// stream was never committed.
func (e *eventStream) finish(err error) {
	e.mu.Lock()
	e.finished = true
	committed := e.isCommit
	e.mu.Unlock()
	if committed {
		e.end <- err
		return
	}
	e.early <- err
}

// validateResult is the answer of POST /api/gpt/v1/messages/validate.
type validateResult struct {
	Type  string `json:"type"` // "message_validation"
	Valid bool   `json:"valid"`
	Model string `json:"model"`
	*messages.Plan
	Stream    bool               `json:"stream"`
	Container *validateContainer `json:"container"`
	Skills    []string           `json:"skills"`
}

type validateContainer struct {
	ID        string     `json:"id"`
	Exists    bool       `json:"exists"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// validateMessage is POST /api/gpt/v1/messages/validate: the same body,
// checked (tool specs, container access and age, container files, skills)
// without running a model or code or creating anything.
func (s *Server) validateMessage(c *fiber.Ctx) error {
	m, err := s.messagesAPI()
	if err != nil {
		return err
	}
	req, err := parseMessagesRequest(c)
	if err != nil {
		return err
	}
	m.resolveModel(req)
	plan, err := m.Engine.Validate(req)
	if err != nil {
		return err
	}
	ctx, p := c.UserContext(), principal(c)
	// The org policy's quotas refuse validation as they would the request.
	if err := s.beforeRun(ctx, m, p, req, plan); err != nil {
		return err
	}
	out := validateResult{Type: "message_validation", Valid: true, Model: req.Model, Plan: plan, Stream: req.Stream, Skills: []string{}}
	if needsContainer(req, plan) {
		id := requestScope(p, req)
		vc := &validateContainer{ID: id}
		ctr, ok, err := m.Containers.Peek(ctx, p, id)
		if err != nil {
			return err
		}
		if ok {
			vc.Exists, vc.ID = true, ctr.ClientID()
			exp := m.Containers.ExpiresAt(ctr).UTC()
			vc.ExpiresAt = &exp
		}
		if len(plan.ContainerUploads) > 0 {
			if !vc.Exists {
				return fault.Errorf(fault.Invalid, "container_upload: container %q does not exist yet, so it has no files", id)
			}
			if err := s.checkUploads(ctx, p, vc.ID, req); err != nil {
				return err
			}
		}
		out.Container = vc
	}
	if req.Container != nil && len(req.Container.Skills) > 0 {
		if s.svc.Workspace == nil {
			return fault.New(fault.Unavailable, "skills are not configured on this server")
		}
		names, err := s.svc.Workspace.ResolveSkills(ctx, p, req.Container.Skills)
		if err != nil {
			return err
		}
		out.Skills = names
	}
	return c.JSON(out)
}
