package turns

import (
	"context"
	"fmt"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// Sandbox is a container opened for tool calls that no model asks for: an
// MCP client calls the tool kit directly (app/mcpserver). It is resolved by
// the rule of a Messages API request that names the same container and may
// run code.
type Sandbox struct {
	// ContainerID is the container's storage id, where calls run.
	ContainerID string
	// ScopeID is the container's id as the client names it (the Files
	// API's scope_id): its client id, or its thread's id.
	ScopeID string
	env     func(context.Context) ([]string, error)
	end     func()
}

// Env returns the variables of the sandbox's commands (the product's API
// inside the sandbox, with a token issued for this sandbox at the first
// call); none without a SandboxEnv.
func (b *Sandbox) Env(ctx context.Context) ([]string, error) {
	if b.env == nil {
		return nil, nil
	}
	return b.env(ctx)
}

// Close revokes the sandbox token Env issued, if any.
func (b *Sandbox) Close() {
	if b.end != nil {
		b.end()
	}
}

// OpenSandbox resolves the container scopeID names for direct tool calls
// ("" is the caller's default container; a thread id the caller may use
// names its thread's), as Prepare does for a Messages API request that
// names it and runs code: the running-sandbox and storage quotas are asked
// before anything is made, then the container is made, its folders
// prepared and its use recorded, so its expiry rolls forward. The caller
// closes the Sandbox when its call is over.
func (s *Service) OpenSandbox(ctx context.Context, p user.Principal, scopeID string) (*Sandbox, error) {
	if s == nil || s.d.Containers == nil {
		return nil, fault.New(fault.Unavailable, "sandboxes are not configured on this server")
	}
	req := &wire.Request{Model: s.Model("")}
	if scopeID != "" {
		req.Container = &wire.ContainerParam{ID: scopeID}
	}
	plan := &messages.Plan{Sandbox: true}
	if err := s.beforeRun(ctx, p, req, plan, nil); err != nil {
		return nil, err
	}
	c, err := s.containerOf(ctx, p, req, nil)
	if err != nil {
		return nil, err
	}
	if time.Since(c.LastActiveAt()) >= touchEvery {
		if c, err = s.d.Containers.Touch(ctx, c); err != nil {
			return nil, fmt.Errorf("turns: touch container: %w", err)
		}
	}
	b := &Sandbox{ContainerID: c.ID(), ScopeID: c.ClientID()}
	if env := s.d.SandboxEnv; env != nil {
		b.env, b.end = env.Begin(p, c.ID(), req.Model)
	}
	return b, nil
}
