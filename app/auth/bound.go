package auth

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// Notices tells every server on the database, this one included, of a
// revoked token, so that each ends the requests bound to it
// (infra/store.Notices: a PostgreSQL notification). Each server hands
// what it hears to Revoked.
type Notices interface {
	TokenRevoked(ctx context.Context, tokenID string) error
}

// Bound returns ctx, for a sandbox token's request, ended when the token
// or the first sandbox token of its chain (user.Principal.Within) is
// revoked — its turn ended — on this server or on any other that tells
// this one (Revoked), or expires: a request from inside a sandbox (a
// Messages turn) does not run on after its turn. A token that no longer
// works is refused. Other callers get ctx as is.
func (s *Service) Bound(ctx context.Context, p user.Principal) (context.Context, error) {
	if p.Kind != user.SandboxToken {
		return ctx, nil
	}
	root := p.Within
	if root == "" {
		root = p.TokenID
	}
	// Watched before the token is read: a revocation told between the
	// two still ends the request, and one told before is in the record.
	watched, cancel := context.WithCancel(ctx)
	s.revocations.watch(watched, cancel, p.TokenID, root)
	t, err := s.store.Token(ctx, root)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: token: %w", err)
	}
	if !t.Usable(s.now()) {
		cancel()
		return nil, fault.New(fault.Unauthenticated, "the turn this sandbox token was made for has ended")
	}
	bound, expire := context.WithDeadline(watched, t.ExpiresAt())
	context.AfterFunc(watched, expire)
	return bound, nil
}

// Revoked ends the requests bound on this server to token id (Bound): a
// server calls it with each revoked token it hears of (Notices).
func (s *Service) Revoked(tokenID string) { s.revocations.revoked(tokenID) }

// EndRevokedBound ends the requests bound on this server to a token that
// no longer works: a server calls it when it starts listening to Notices
// again, for the revocations told while it did not listen.
func (s *Service) EndRevokedBound(ctx context.Context) error {
	now := s.now()
	for _, id := range s.revocations.ids() {
		t, err := s.store.Token(ctx, id)
		if fault.Is(err, fault.NotFound) || err == nil && !t.Usable(now) {
			s.revocations.revoked(id)
		} else if err != nil {
			return fmt.Errorf("auth: token: %w", err)
		}
	}
	return nil
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

// ids returns the ids of the tokens contexts are bound to.
func (r *revocations) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.by))
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
