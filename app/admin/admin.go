// Package admin holds the org administration use cases: users, the feature
// policy and its audit log.
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"threadbox/domain/audit"
	"threadbox/domain/egress"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

// Store is the persistence admin needs.
type Store interface {
	org.Repository
	user.Repository
	audit.Repository
	InTxAdmin(ctx context.Context, fn func(Store) error) error
}

// Tokens revokes a user's tokens and ends the requests bound to them, on
// every server (app/auth).
type Tokens interface {
	// RevokeUserTokens revokes every live token of a user.
	RevokeUserTokens(ctx context.Context, userID string) error
	// RevokeUserSessions revokes a user's sessions and sandbox tokens but
	// the token except.
	RevokeUserSessions(ctx context.Context, userID, except string) error
}

// PasswordHasher hashes new passwords.
type PasswordHasher func(password string) (string, error)

// Service is the admin use cases.
type Service struct {
	store   Store
	tokens  Tokens
	hash    PasswordHasher
	now     func() time.Time
	bounds  org.Bounds
	domains org.EmailDomains
	ledger  egress.Ledger
	secrets egress.Secrets
	sealer  Sealer
}

// Deps is what the admin use cases are built from. Store, Tokens and
// Hash are required.
type Deps struct {
	// Store keeps orgs, users and the audit log (required).
	Store Store
	// Tokens revokes the tokens of a user whose password is reset or who
	// is disabled (required).
	Tokens Tokens
	// Hash hashes new passwords (required).
	Hash PasswordHasher
	// EmailDomains keeps each email domain an org owns for that org: an
	// admin of another org cannot add a user there (org.EmailDomains).
	EmailDomains org.EmailDomains
	// QuotaBounds are the server operator's quota defaults and ceilings
	// (org.Bounds): every policy read has the quotas in force, and an admin
	// setting a quota above its ceiling is refused.
	QuotaBounds org.Bounds
	// EgressLedger keeps the record of every connection the egress proxy
	// allowed or refused; nil answers an empty ledger.
	EgressLedger egress.Ledger
	// EgressSecrets keeps the orgs' egress secrets, sealed by Sealer; nil
	// (or no Sealer) refuses to store any.
	EgressSecrets egress.Secrets
	Sealer        Sealer
}

// New returns the admin use cases built from d. A missing required
// dependency is a wiring mistake: New panics naming it.
func New(d Deps) *Service {
	if d.Store == nil {
		panic("admin: New: Deps.Store is required")
	}
	if d.Tokens == nil {
		panic("admin: New: Deps.Tokens is required")
	}
	if d.Hash == nil {
		panic("admin: New: Deps.Hash is required")
	}
	return &Service{store: d.Store, tokens: d.Tokens, hash: d.Hash, now: time.Now, bounds: d.QuotaBounds, domains: d.EmailDomains, ledger: d.EgressLedger, secrets: d.EgressSecrets, sealer: d.Sealer}
}

func requireAdmin(p user.Principal) error {
	if !p.IsAdmin() {
		return fault.New(fault.Forbidden, "only organization admins may do this")
	}
	return nil
}

// Policy returns the caller's org policy with the quotas in force. Any
// member may read it (the chat tells them what is switched off); only
// admins change it.
func (s *Service) Policy(ctx context.Context, p user.Principal) (org.Policy, error) {
	return s.OrgPolicy(ctx, p.OrgID)
}

// OrgPolicy returns any caller's org policy, for enforcement: its quotas
// are those in force, the org's own within the operator's bounds.
func (s *Service) OrgPolicy(ctx context.Context, orgID string) (org.Policy, error) {
	o, err := s.store.Org(ctx, orgID)
	if err != nil {
		return org.Policy{}, err
	}
	return s.inForce(o.Policy()), nil
}

// inForce returns the policy with the quotas in force.
func (s *Service) inForce(p org.Policy) org.Policy {
	return p.WithQuotas(s.bounds.Apply(p.Quotas()))
}

// PolicyView renders a policy in its wire shape (docs/api.md); used for the
// audit log's before and after.
type PolicyView struct {
	CodeExecution struct {
		Enabled bool `json:"enabled"`
	} `json:"codeExecution"`
	Uploads struct {
		Enabled  bool  `json:"enabled"`
		MaxBytes int64 `json:"maxBytes"`
	} `json:"uploads"`
	Downloads struct {
		Generated bool `json:"generated"`
		Uploaded  bool `json:"uploaded"`
	} `json:"downloads"`
	// ContentCredentials signs generated media on download.
	ContentCredentials struct {
		Enabled bool `json:"enabled"`
	} `json:"contentCredentials"`
	// Egress is the sandbox's outbound network through the egress proxy:
	// on or off, and the host patterns allowed when on.
	Egress struct {
		Enabled bool     `json:"enabled"`
		Allow   []string `json:"allow"`
	} `json:"egress"`
	// Quotas are the resource limits; 0 is unlimited.
	Quotas struct {
		RunningSandboxesPerUser int64 `json:"runningSandboxesPerUser"`
		RunningSandboxesPerOrg  int64 `json:"runningSandboxesPerOrg"`
		ContainersPerUser       int64 `json:"containersPerUser"`
		StorageBytesPerOrg      int64 `json:"storageBytesPerOrg"`
		SnapshotsPerThread      int64 `json:"snapshotsPerThread"`
		SnapshotBytesPerThread  int64 `json:"snapshotBytesPerThread"`
	} `json:"quotas"`
}

// ViewOf returns the wire view of a policy.
func ViewOf(p org.Policy) PolicyView {
	var v PolicyView
	v.CodeExecution.Enabled = p.Allows(org.CodeExecution)
	v.Uploads.Enabled = p.Allows(org.Uploads)
	v.Uploads.MaxBytes = p.MaxUploadBytes()
	v.Downloads.Generated = p.Allows(org.DownloadsGenerated)
	v.Downloads.Uploaded = p.Allows(org.DownloadsUploaded)
	v.ContentCredentials.Enabled = p.Allows(org.ContentCredentials)
	v.Egress.Enabled = p.Allows(org.Egress)
	v.Egress.Allow = p.EgressAllow()
	q := p.Quotas()
	v.Quotas.RunningSandboxesPerUser = q.Limit(org.RunningSandboxesPerUser)
	v.Quotas.RunningSandboxesPerOrg = q.Limit(org.RunningSandboxesPerOrg)
	v.Quotas.ContainersPerUser = q.Limit(org.ContainersPerUser)
	v.Quotas.StorageBytesPerOrg = q.Limit(org.StorageBytesPerOrg)
	v.Quotas.SnapshotsPerThread = q.Limit(org.SnapshotsPerThread)
	v.Quotas.SnapshotBytesPerThread = q.Limit(org.SnapshotBytesPerThread)
	return v
}

// PatchPolicy applies a merge patch to the caller's org policy and records
// who changed what in the audit log, in one transaction; admins only. A
// quota the patch sets above the operator's ceiling refuses the whole
// patch (fault.Invalid). It returns the policy with the quotas in force;
// the audit log records the org's own quotas, as the admin set them.
func (s *Service) PatchPolicy(ctx context.Context, p user.Principal, patch org.PolicyPatch) (org.Policy, error) {
	if err := requireAdmin(p); err != nil {
		return org.Policy{}, err
	}
	var out org.Policy
	err := s.store.InTxAdmin(ctx, func(tx Store) error {
		o, err := tx.Org(ctx, p.OrgID)
		if err != nil {
			return err
		}
		np, err := o.Policy().Patch(patch)
		if err != nil {
			return err
		}
		// Only the quotas this patch sets are held to the ceilings: an
		// org's older quota above a newer ceiling is capped when read,
		// and does not block the org's other changes.
		set, err := org.NewQuotas(patch.Quotas)
		if err != nil {
			return err
		}
		if err := s.bounds.Check(set); err != nil {
			return err
		}
		if err := tx.UpdateOrg(ctx, o.WithPolicy(np)); err != nil {
			return err
		}
		before, _ := json.Marshal(ViewOf(o.Policy()))
		after, _ := json.Marshal(ViewOf(np))
		out = s.inForce(np)
		return tx.AppendEvent(ctx, audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: "org.features.update", Target: p.OrgID, Before: before, After: after, At: s.now().UTC()})
	})
	if err != nil {
		return org.Policy{}, fmt.Errorf("admin: patch policy: %w", err)
	}
	return out, nil
}

// AuditEvents lists the caller's org audit log, newest first; admins only.
func (s *Service) AuditEvents(ctx context.Context, p user.Principal, limit int) ([]audit.Event, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	return s.store.Events(ctx, p.OrgID, limit)
}

// EgressLedger returns a page of the caller's org egress ledger, newest
// first; admins only. The filter's org is the caller's, whatever it says.
func (s *Service) EgressLedger(ctx context.Context, p user.Principal, f egress.LedgerFilter) ([]egress.Record, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	if s.ledger == nil {
		return []egress.Record{}, nil
	}
	f.OrgID = p.OrgID
	recs, err := s.ledger.EgressRecords(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("admin: egress ledger: %w", err)
	}
	return recs, nil
}

// Users lists the caller's org users; admins only.
func (s *Service) Users(ctx context.Context, p user.Principal) ([]user.User, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	return s.store.UsersByOrg(ctx, p.OrgID)
}

// NewUser asks for a user to be created in the caller's org.
type NewUser struct {
	Email    string
	Role     user.Role
	Password string // optional; without it the user signs in with API tokens only
}

// CreateUser creates a user in the caller's org; admins only. An address
// at an email domain another org owns is refused before anything is
// looked up, so the answer says nothing of the accounts there.
func (s *Service) CreateUser(ctx context.Context, p user.Principal, nu NewUser) (user.User, error) {
	if err := requireAdmin(p); err != nil {
		return user.User{}, err
	}
	if nu.Role == "" {
		nu.Role = user.Member
	}
	u, err := user.New(id.New("usr"), p.OrgID, nu.Email, nu.Role, s.now())
	if err != nil {
		return user.User{}, err
	}
	o, err := s.store.Org(ctx, p.OrgID)
	if err != nil {
		return user.User{}, err
	}
	if err := s.domains.MayAdd(o.Name(), u.Email()); err != nil {
		return user.User{}, err
	}
	if nu.Password != "" {
		h, err := s.hash(nu.Password)
		if err != nil {
			return user.User{}, err
		}
		u = u.WithPasswordHash(h)
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		return user.User{}, err
	}
	_ = s.store.AppendEvent(ctx, audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: "org.users.create", Target: u.ID(), After: userJSON(map[string]any{"email": u.Email(), "role": u.Role()}), At: s.now().UTC()})
	return u, nil
}

// UserChange is a partial update of a user.
type UserChange struct {
	Role     *user.Role
	Disabled *bool
	Password *string
}

// UpdateUser changes a user of the caller's org; admins only. An admin cannot
// disable or demote themselves, so an org always keeps an admin.
func (s *Service) UpdateUser(ctx context.Context, p user.Principal, userID string, ch UserChange) (user.User, error) {
	if err := requireAdmin(p); err != nil {
		return user.User{}, err
	}
	u, err := s.store.User(ctx, userID)
	if err != nil || u.OrgID() != p.OrgID {
		return user.User{}, fault.New(fault.NotFound, "user not found")
	}
	before := userJSON(map[string]any{"role": u.Role(), "disabled": u.Disabled(), "has_password": u.PasswordHash() != ""})
	if ch.Role != nil {
		r, err := user.ParseRole(string(*ch.Role))
		if err != nil {
			return user.User{}, err
		}
		if u.ID() == p.UserID && r != user.Admin {
			return user.User{}, fault.New(fault.Invalid, "you cannot remove your own admin role")
		}
		u = u.WithRole(r)
	}
	if ch.Disabled != nil {
		if u.ID() == p.UserID && *ch.Disabled {
			return user.User{}, fault.New(fault.Invalid, "you cannot disable yourself")
		}
		u = u.WithDisabled(*ch.Disabled)
	}
	if ch.Password != nil {
		h, err := s.hash(*ch.Password)
		if err != nil {
			return user.User{}, err
		}
		u = u.WithPasswordHash(h)
	}
	if err := s.store.UpdateUser(ctx, u); err != nil {
		return user.User{}, err
	}
	// A new password or a disabled account ends every session and token
	// of the user: an admin resetting a compromised account locks the
	// intruder out, and re-enabling it brings no old token back. An admin
	// changing their own password keeps the session they changed it from
	// and their API tokens (as GitHub and Google do); their other sessions
	// end. Requests bound to a revoked sandbox token end with it, on every
	// server.
	switch {
	case ch.Password != nil && u.ID() == p.UserID:
		if err := s.tokens.RevokeUserSessions(ctx, u.ID(), p.TokenID); err != nil {
			return user.User{}, fmt.Errorf("admin: revoke your other sessions: %w", err)
		}
	case ch.Password != nil || (ch.Disabled != nil && *ch.Disabled):
		if err := s.tokens.RevokeUserTokens(ctx, u.ID()); err != nil {
			return user.User{}, fmt.Errorf("admin: revoke the user's tokens: %w", err)
		}
	}
	afterFields := map[string]any{"role": u.Role(), "disabled": u.Disabled(), "has_password": u.PasswordHash() != ""}
	if ch.Password != nil {
		afterFields["password_set"] = true // a reset shows in the log even when a password was set before
	}
	after := userJSON(afterFields)
	_ = s.store.AppendEvent(ctx, audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: "org.users.update", Target: u.ID(), Before: before, After: after, At: s.now().UTC()})
	return u, nil
}

// userJSON encodes an audit entry's view of a user. Go's %q is not JSON: an
// email holding a character outside the BMP, say, would make an entry that
// breaks the audit log.
func userJSON(v map[string]any) []byte {
	b, _ := json.Marshal(v) // strings and booleans only
	return b
}
