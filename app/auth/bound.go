package auth

import (
	"context"
	"fmt"
	"sync"

	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// Bound returns ctx, for a sandbox token's request, ended when the token
// or the first sandbox token of its chain (user.Principal.Within) is
// revoked through this service — its turn ended — or expires: a request
// from inside a sandbox (a Messages turn) does not run on after its turn.
// A token that no longer works is refused. Other callers get ctx as is.
func (s *Service) Bound(ctx context.Context, p user.Principal) (context.Context, error) {
	if p.Kind != user.SandboxToken {
		return ctx, nil
	}
	root := p.Within
	if root == "" {
		root = p.TokenID
	}
	t, err := s.store.Token(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("auth: token: %w", err)
	}
	if !t.Usable(s.now()) {
		return nil, fault.New(fault.Unauthenticated, "the turn this sandbox token was made for has ended")
	}
	bound, cancel := context.WithDeadline(ctx, t.ExpiresAt())
	s.revocations.watch(bound, cancel, p.TokenID, root)
	return bound, nil
}

// revocations ends the contexts bound to tokens when those are revoked.
type revocations struct {
	mu sync.Mutex
	by map[string]map[*context.CancelFunc]struct{} // by token id
}

// watch makes a revocation of any of ids cancel ctx, until ctx ends.
func (r *revocations) watch(ctx context.Context, cancel context.CancelFunc, ids ...string) {
	key := &cancel
	r.mu.Lock()
	if r.by == nil {
		r.by = map[string]map[*context.CancelFunc]struct{}{}
	}
	for _, id := range ids {
		if r.by[id] == nil {
			r.by[id] = map[*context.CancelFunc]struct{}{}
		}
		r.by[id][key] = struct{}{}
	}
	r.mu.Unlock()
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range ids {
			delete(r.by[id], key)
			if len(r.by[id]) == 0 {
				delete(r.by, id)
			}
		}
	})
}

// revoked cancels the contexts bound to token id.
func (r *revocations) revoked(id string) {
	r.mu.Lock()
	var cancels []context.CancelFunc
	for k := range r.by[id] {
		cancels = append(cancels, *k)
	}
	r.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}
