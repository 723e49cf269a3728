// Package turns is the head of every model turn. A Messages API request
// and a chat turn are prepared here by one rule (Prepare): the model name
// is resolved, the request is checked once (its plan is kept for the run),
// the running-sandbox and storage quotas are asked, the container is
// resolved, prepared and touched, container uploads are checked and skills
// loaded; the turn's sandbox token is issued for the run and revoked when it
// ends, and the tool loop (app/messages) runs it. A chat turn runs detached
// from the request that started it, its events in a log that any client
// follows, replays or stops (detached.go). The chat (app/workspace) adds
// only what is its thread's: history, injection rules, the thread's turn
// lease, persistence and artifacts.
package turns

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/skills"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/sandbox"
	"threadbox/domain/skill"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// Engine is the tool loop (app/messages.Service).
type Engine interface {
	// Validate checks a request and returns what it would do.
	Validate(req *wire.Request) (*messages.Plan, error)
	// Run runs a request, sending its events to sink.
	Run(ctx context.Context, req *wire.Request, opts messages.RunOptions, sink messages.Sink) error
}

// Containers resolves the containers of turns (app/containers.Service).
type Containers interface {
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
	// MarkSkills records whether the container's skills folder may hold
	// skills.
	MarkSkills(ctx context.Context, c container.Container, may bool) (container.Container, error)
	// ExpiresAt is the container's rolling expiry shown to clients.
	ExpiresAt(c container.Container) time.Time
}

// Restores starts the restore of a container's checkpointed sandbox ahead
// of the tool call that needs it (app/containers.Service).
type Restores interface {
	// Prewarm starts the restore in the background, when the container
	// has a checkpoint and its sandbox does not run; it returns at once.
	Prewarm(ctx context.Context, containerID string) <-chan struct{}
}

// Quota checks the running-sandbox and storage quotas (app/quota.Service).
type Quota interface {
	// BeforeRun refuses (fault.RateLimited, naming the quota) a turn that
	// may boot the sandbox of the container with storage id containerID
	// ("" when the turn would make it) when the user or the org has as
	// many running as the policy allows.
	BeforeRun(ctx context.Context, orgID, userID, containerID string) error
	// BeforeStore refuses (fault.TooLarge, naming the quota) storing n
	// more bytes past the org's storage quota; with n zero, an org with
	// nothing left.
	BeforeStore(ctx context.Context, orgID string, n int64) error
}

// Skills finds and loads skills (app/skills.Service).
type Skills interface {
	Resolve(ctx context.Context, orgID string, refs []wire.SkillParam) ([]skill.Skill, error)
	Load(ctx context.Context, containerID string, skills []skill.Skill) error
}

// Files finds a container's files (app/files.Service).
type Files interface {
	Metadata(ctx context.Context, p user.Principal, scopeID, fileID string) (files.File, error)
}

// SandboxEnv issues a turn's sandbox variables (app/bridge.TurnEnv).
type SandboxEnv interface {
	// Begin returns env, which issues the turn's short-lived token at its
	// first call and returns the variables, and end, which revokes the
	// token (if issued) when the turn is over.
	Begin(p user.Principal, containerID, model string) (env func(context.Context) ([]string, error), end func())
}

// Deps are the ports of the turns. Only Engine and Containers are
// required; without Skills or Files a request that needs them is refused
// as unavailable, without Quota nothing is counted, without SandboxEnv
// commands run without the product's API variables, without Records no
// turn is detached.
type Deps struct {
	Engine     Engine
	Containers Containers
	// Restores, when set, is told of every turn that may run code in its
	// container as the turn starts, so that a sandbox saved at its idle
	// stop is restored while the model answers.
	Restores   Restores
	Quota      Quota
	Skills     Skills
	Files      Files
	SandboxEnv SandboxEnv
	// DefaultModel is what the model "default" (or none) resolves to;
	// empty leaves "default" to the model adapter.
	DefaultModel string
	// Records store detached turns and their event logs (infra/store.Turns).
	Records turn.Repository
	// LogMaxBytes caps the bytes of one turn's event log (default
	// DefaultLogMaxBytes): past it the log holds a LogTruncated event and
	// then only the events that end the stream.
	LogMaxBytes int64
	// LogRetention is how long the event log of an ended turn is kept
	// (default DefaultLogRetention).
	LogRetention time.Duration
	// Now tells the time (default time.Now); Log gets what a detached
	// turn could not store.
	Now func() time.Time
	Log *slog.Logger
}

// touchEvery is how stale a container's last use may be before a request
// records a new one; closer uses share one write.
const touchEvery = time.Second

// Service prepares and runs turns, and keeps the logs of detached ones.
type Service struct {
	d        Deps
	now      func() time.Time
	log      *slog.Logger
	prepared preparedSet
	// skillLocks serialise each container's skills loads (loadSkills).
	skillLocks sandbox.Locks
	// detached are the turns running in this process (detached.go).
	detached detachedTurns
}

// New returns the turns service over d.
func New(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.LogMaxBytes <= 0 {
		d.LogMaxBytes = DefaultLogMaxBytes
	}
	if d.LogRetention <= 0 {
		d.LogRetention = DefaultLogRetention
	}
	return &Service{d: d, now: d.Now, log: d.Log}
}

// Ready reports whether turns can run (503 otherwise).
func (s *Service) Ready() error {
	if s == nil || s.d.Engine == nil || s.d.Containers == nil {
		return fault.New(fault.Unavailable, "the Messages API is not configured on this server")
	}
	return nil
}

// DefaultModel names the configured model ("" when none is configured).
func (s *Service) DefaultModel() string { return s.d.DefaultModel }

// Model resolves a requested model name: "" and "default" are the
// configured model, or "default" for the adapter when none is configured.
func (s *Service) Model(name string) string {
	if (name == "" || name == "default") && s.d.DefaultModel != "" {
		return s.d.DefaultModel
	}
	if name == "" {
		return "default"
	}
	return name
}

// Turn is a checked turn, ready to run once.
type Turn struct {
	s    *Service
	p    user.Principal
	req  *wire.Request
	opts messages.RunOptions
}

// LiveOutput makes the turn send the output of its server tool calls while
// they run (wire.EventToolOutput).
func (t *Turn) LiveOutput() { t.opts.LiveOutput = true }

// Model is the model the turn runs with, as resolved.
func (t *Turn) Model() string { return t.req.Model }

// OnToolCall makes the turn call h after each of its server tool calls (the
// chat captures the outputs as artifacts).
func (t *Turn) OnToolCall(h messages.ToolHook) { t.opts.OnToolCall = h }

// BeforeToolCall makes the turn call h before each of its server tool
// calls runs (the chat waits there for the files snapshot of the call
// before).
func (t *Turn) BeforeToolCall(h messages.ToolHook) { t.opts.BeforeToolCall = h }

// Run runs the turn, sending its events to sink as they happen. A turn
// that offers tools in a container gets its sandbox variables, and its
// sandbox token stops working when Run returns.
func (t *Turn) Run(ctx context.Context, sink messages.Sink) error {
	opts := t.opts
	if env := t.s.d.SandboxEnv; env != nil && opts.ContainerID != "" && len(t.req.Tools) > 0 {
		vars, end := env.Begin(t.p, opts.ContainerID, t.req.Model)
		defer end()
		opts.EnvFunc = vars
	}
	return t.s.d.Engine.Run(ctx, t.req, opts, sink)
}

// Thread is what a chat turn tells Prepare beyond its request
// (app/workspace): the thread it runs in and what the chat stores for it.
type Thread struct {
	// ID is the thread, whose container the turn runs in.
	ID string
	// Stores is how many bytes the chat stores before the turn runs (its
	// user message; 0 when the stored one is asked again).
	Stores int64
	// History is how many of the request's first messages are the
	// thread's stored history, whose container uploads were checked when
	// they were first asked.
	History int
}

// Prepare checks a turn and resolves what it runs with, by one rule for a
// Messages API request (th nil) and a chat turn (th its thread): the model;
// the plan; the quotas (a turn that may run code is refused past the
// running-sandbox quotas, and one that may run code or that the chat keeps
// when its org has no storage left or the bytes th stores do not fit);
// the container (the thread's, the one the request names, or the caller's
// default; made, prepared and touched, so its expiry rolls forward); the
// container uploads the turn asks anew; and its skills, loaded into the
// container and named in the system prompt. A turn that needs no container
// (a Messages API request without code, skills or container files) makes
// none. The quotas are asked before anything is made, so a turn they
// refuse leaves nothing behind.
func (s *Service) Prepare(ctx context.Context, p user.Principal, req *wire.Request, th *Thread) (*Turn, error) {
	plan, err := s.plan(req)
	if err != nil {
		return nil, err
	}
	t := &Turn{s: s, p: p, req: req, opts: messages.RunOptions{Plan: plan, OrgID: p.OrgID, UserID: p.UserID,
		NoURLFetch: p.Kind == user.SandboxToken}}
	if th == nil && !needsContainer(req, plan) {
		return t, nil
	}
	if th == nil && freshContainer(p, req, plan) {
		// The turn runs in a container of its own, which the response
		// names (docs/messages.md, requests without a container).
		cp := wire.ContainerParam{}
		if req.Container != nil {
			cp = *req.Container
		}
		cp.ID = id.New("ctr")
		req.Container = &cp
	}
	if err := s.beforeRun(ctx, p, req, plan, th); err != nil {
		return nil, err
	}
	c, err := s.containerOf(ctx, p, req, th)
	if err != nil {
		return nil, err
	}
	if s.d.Restores != nil && runsCode(plan) {
		s.d.Restores.Prewarm(ctx, c.ID())
	}
	asked := req.Messages
	if th != nil {
		asked = req.Messages[min(th.History, len(req.Messages)):]
	}
	if err := s.checkUploads(ctx, p, c.ClientID(), asked, len(req.Messages)-len(asked)); err != nil {
		return nil, err
	}
	if err := s.loadSkills(ctx, p, c, req, runsCode(plan)); err != nil {
		return nil, err
	}
	if time.Since(c.LastActiveAt()) >= touchEvery {
		if c, err = s.d.Containers.Touch(ctx, c); err != nil {
			return nil, fmt.Errorf("turns: touch container: %w", err)
		}
	}
	t.opts.ContainerID = c.ID()
	t.opts.Container = &wire.Container{ID: c.ClientID(), ExpiresAt: s.d.Containers.ExpiresAt(c).UTC()}
	t.opts.ExpiresAt = func() time.Time { return s.d.Containers.ExpiresAt(c.Touch(time.Now())) }
	t.opts.ReportContainer = req.Container != nil && req.Container.ID != ""
	return t, nil
}

// runsCode reports whether a turn's plan may run code in its container.
func runsCode(plan *messages.Plan) bool { return plan.CodeExecution || plan.Sandbox }

// loadSkills loads the skills the request names into its container when
// it names some or may run code (none unloads those of an earlier turn: a
// turn sees only the skills it asks for), and tells the model about them
// in the system prompt, saying whether code can read them.
func (s *Service) loadSkills(ctx context.Context, p user.Principal, c container.Container, req *wire.Request, code bool) error {
	var refs []wire.SkillParam
	if req.Container != nil {
		refs = req.Container.Skills
	}
	if len(refs) == 0 && !code {
		return nil
	}
	if s.d.Skills == nil {
		if len(refs) > 0 {
			return fault.New(fault.Unavailable, "skills are not configured on this server")
		}
		return nil
	}
	found, err := s.d.Skills.Resolve(ctx, p.OrgID, refs)
	if err != nil {
		return err
	}
	if len(found) == 0 && !c.MayHoldSkills() {
		// Nothing to load and nothing loaded: the folder is empty.
		return nil
	}
	// One turn at a time writes a container's folder and its mark: a
	// turn's unload and another's load interleaved could otherwise leave
	// the other's skills in a folder the record calls empty, which no
	// later turn would empty. A turn stopped meanwhile gives up waiting.
	unlock, err := s.skillLocks.LockContext(ctx, c.ID())
	if err != nil {
		return fmt.Errorf("turns: wait for the skills of container %s: %w", c.ID(), err)
	}
	defer unlock()
	if len(found) > 0 {
		// Marked before the folder is written, so that a load cut short
		// is unloaded by the next turn all the same.
		if _, err := s.d.Containers.MarkSkills(ctx, c, true); err != nil {
			return err
		}
	}
	if err := s.d.Skills.Load(ctx, c.ID(), found); err != nil {
		return err
	}
	if len(found) == 0 {
		if _, err := s.d.Containers.MarkSkills(ctx, c, false); err != nil {
			return err
		}
	}
	if text := skills.Prompt(found, code); text != "" {
		if req.System, err = WithSystemText(req.System, text); err != nil {
			return err
		}
	}
	return nil
}

// Validation is what POST /v1/messages/validate answers: the request
// checked as Prepare checks it, without running a model or code or making
// anything.
type Validation struct {
	Model     string
	Plan      *messages.Plan
	Container *ValidatedContainer // nil when the request needs none
	Skills    []string
}

// plan resolves req's model (Model) and checks its tools into a plan,
// once the service is ready (Ready).
func (s *Service) plan(req *wire.Request) (*messages.Plan, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	req.Model = s.Model(req.Model)
	return s.d.Engine.Validate(req)
}

// ValidatedContainer is the container a validated request would use.
type ValidatedContainer struct {
	ID        string
	Exists    bool
	ExpiresAt *time.Time
}

// Validate checks a Messages API request: tool specs, quotas, container
// access and age, container files and skills.
func (s *Service) Validate(ctx context.Context, p user.Principal, req *wire.Request) (*Validation, error) {
	plan, err := s.plan(req)
	if err != nil {
		return nil, err
	}
	// The org policy's quotas refuse validation as they would the request.
	if err := s.beforeRun(ctx, p, req, plan, nil); err != nil {
		return nil, err
	}
	out := &Validation{Model: req.Model, Plan: plan, Skills: []string{}}
	if needsContainer(req, plan) {
		id := requestScope(p, req, nil)
		vc := &ValidatedContainer{ID: id}
		ctr, ok, err := s.d.Containers.Peek(ctx, p, id)
		if err != nil {
			return nil, err
		}
		if ok {
			vc.Exists, vc.ID = true, ctr.ClientID()
			exp := s.d.Containers.ExpiresAt(ctr).UTC()
			vc.ExpiresAt = &exp
		}
		if len(plan.ContainerUploads) > 0 {
			if !vc.Exists {
				return nil, fault.Errorf(fault.Invalid, "container_upload: container %q does not exist yet, so it has no files", id)
			}
			if err := s.checkUploads(ctx, p, vc.ID, req.Messages, 0); err != nil {
				return nil, err
			}
		}
		out.Container = vc
	}
	if req.Container != nil && len(req.Container.Skills) > 0 {
		if s.d.Skills == nil {
			return nil, fault.New(fault.Unavailable, "skills are not configured on this server")
		}
		found, err := s.d.Skills.Resolve(ctx, p.OrgID, req.Container.Skills)
		if err != nil {
			return nil, err
		}
		for _, sk := range found {
			out.Skills = append(out.Skills, sk.Name)
		}
	}
	return out, nil
}

// needsContainer reports whether a request can touch a container: it
// enables code execution, names a container or refers to container files.
func needsContainer(req *wire.Request, plan *messages.Plan) bool {
	return plan.CodeExecution || plan.Sandbox || (req.Container != nil && (req.Container.ID != "" || len(req.Container.Skills) > 0)) || len(plan.ContainerUploads) > 0
}

// freshContainer reports whether a Messages API request gets a fresh
// container of its own: it names none, runs a 2026 code-execution tool
// (whose cells pause for the client's tools, so two conversations must
// not share an interpreter) and refers to no container files (uploads
// without a container live in the caller's default one). A sandbox token
// keeps its own container.
func freshContainer(p user.Principal, req *wire.Request, plan *messages.Plan) bool {
	if p.Kind == user.SandboxToken || (req.Container != nil && req.Container.ID != "") || len(plan.ContainerUploads) > 0 {
		return false
	}
	return plan.ToolType == wire.ToolTypeCodeExecution2601 || plan.ToolType == wire.ToolTypeCodeExecution2605
}

// requestScope is the container a turn runs in: a chat turn's thread's,
// the container a request names, or when it names none the caller's
// default container — for a sandbox token the container of its own
// sandbox, the only one it may use.
func requestScope(p user.Principal, req *wire.Request, th *Thread) string {
	switch {
	case th != nil:
		return th.ID
	case req.Container != nil && req.Container.ID != "":
		return req.Container.ID
	case p.Kind == user.SandboxToken:
		return container.RefFor(p.ContainerID, p.UserID)
	}
	return container.DefaultClientID
}

// containerOf resolves the turn's container: its thread's, the one the
// request names (a new id creates it; a thread id the caller can access
// names the thread's), or the caller's default container. Its folders are
// prepared the first time this server sees it.
func (s *Service) containerOf(ctx context.Context, p user.Principal, req *wire.Request, th *Thread) (container.Container, error) {
	if th != nil {
		return s.d.Containers.Scope(ctx, p, th.ID, true)
	}
	ref := container.ParseRef("") // the caller's default container
	if (req.Container != nil && req.Container.ID != "") || p.Kind == user.SandboxToken {
		ref = container.ParseRef(requestScope(p, req, nil))
	}
	if threadID, ok := ref.Thread(); ok {
		return s.d.Containers.Scope(ctx, p, threadID, true)
	}
	c, err := s.d.Containers.ForUser(ctx, p, ref.ClientID())
	if err != nil {
		return container.Container{}, err
	}
	key := c.ID() + "@" + c.CreatedAt().UTC().Format(time.RFC3339Nano)
	if s.prepared.has(key) {
		return c, nil
	}
	// Scope prepares the container's folders (ForUser does not).
	if c, err = s.d.Containers.Scope(ctx, p, c.ClientID(), true); err != nil {
		return container.Container{}, err
	}
	s.prepared.add(key)
	return c, nil
}

// preparedSet remembers the containers whose folders this server made, by
// storage id and creation time (a container removed past its maximum age
// and made anew is another one). It is bounded: when full it starts over,
// and a forgotten container is only prepared once more (Scope is
// idempotent).
type preparedSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// maxPrepared bounds preparedSet.
const maxPrepared = 4096

func (p *preparedSet) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[key]
	return ok
}

func (p *preparedSet) add(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= maxPrepared {
		p.m = make(map[string]struct{}, 64)
	}
	p.m[key] = struct{}{}
}

// beforeRun asks the quotas before the turn makes its container, so that
// a refused turn leaves nothing behind. A turn that may run code is
// refused when booting its sandbox would pass a running-sandbox quota (not
// while its container's sandbox runs). A turn that may run code (code
// writes the container's files, which count toward the storage quota) or
// that the chat keeps (th: its messages and log count too) is refused when
// its org has nothing left of its storage quota, or when the bytes th
// stores before the run do not fit; what the run adds is counted by the
// next check.
func (s *Service) beforeRun(ctx context.Context, p user.Principal, req *wire.Request, plan *messages.Plan, th *Thread) error {
	code := runsCode(plan)
	if s.d.Quota == nil || !code && th == nil {
		return nil
	}
	if code {
		id := ""
		// A scope that names nothing yet, or nothing the caller may use,
		// is left to containerOf to make or refuse.
		if c, ok, err := s.d.Containers.Peek(ctx, p, requestScope(p, req, th)); err == nil && ok {
			id = c.ID()
		}
		if err := s.d.Quota.BeforeRun(ctx, p.OrgID, p.UserID, id); err != nil {
			return err
		}
	}
	var n int64
	if th != nil {
		n = th.Stores
	}
	return s.d.Quota.BeforeStore(ctx, p.OrgID, n)
}

// checkUploads makes sure every container_upload block of msgs names an
// existing file of the container; first is the index of msgs[0] in the
// request, for the error's path.
func (s *Service) checkUploads(ctx context.Context, p user.Principal, scopeID string, msgs []wire.Message, first int) error {
	for i, msg := range msgs {
		for j, b := range msg.Content {
			if b.Type != wire.BlockContainerUpload {
				continue
			}
			if s.d.Files == nil {
				return fault.New(fault.Unavailable, "container files are not configured on this server")
			}
			if _, err := s.d.Files.Metadata(ctx, p, scopeID, b.FileID); err != nil {
				if fault.Is(err, fault.NotFound) || fault.Is(err, fault.Invalid) {
					return fault.Errorf(fault.Invalid, "messages.%d.content.%d.file_id: no file %q in container %q", first+i, j, b.FileID, scopeID)
				}
				return err
			}
		}
	}
	return nil
}

// WithSystemText appends text to a request's system prompt (a string or an
// array of text blocks).
func WithSystemText(system json.RawMessage, text string) (json.RawMessage, error) {
	sys := strings.TrimSpace(string(system))
	switch {
	case sys == "" || sys == "null":
		return json.Marshal(text)
	case strings.HasPrefix(sys, `"`):
		var s string
		if err := json.Unmarshal(system, &s); err != nil {
			return nil, fault.Errorf(fault.Invalid, "system: %v", err)
		}
		return json.Marshal(s + "\n\n" + text)
	case strings.HasPrefix(sys, "["):
		var blocks []json.RawMessage
		if err := json.Unmarshal(system, &blocks); err != nil {
			return nil, fault.Errorf(fault.Invalid, "system: %v", err)
		}
		tb, err := json.Marshal(map[string]string{"type": "text", "text": text})
		if err != nil {
			return nil, fmt.Errorf("turns: system: %w", err)
		}
		return json.Marshal(append(blocks, tb))
	}
	return nil, fault.New(fault.Invalid, "system: must be a string or an array of text blocks")
}
