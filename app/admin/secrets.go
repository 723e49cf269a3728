package admin

import (
	"context"
	"encoding/json"
	"fmt"

	"threadbox/domain/audit"
	"threadbox/domain/egress"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/user"
)

// Sealer encrypts secret values at rest (infra/seal.Box); the associated
// data binds a sealed value to its org and name.
type Sealer interface {
	Seal(plain, ad []byte) ([]byte, error)
	Open(sealed, ad []byte) ([]byte, error)
}

// secretAD is the associated data of a secret's sealed value.
func secretAD(orgID, name string) []byte { return []byte("egress-secret\x00" + orgID + "\x00" + name) }

// NewSecret is what an admin writes to create or replace a secret.
type NewSecret struct {
	Hosts  []string
	Header string
	Value  string
}

// EgressSecrets lists the caller's org secrets (names, hosts, header,
// times), never their values; admins only.
func (s *Service) EgressSecrets(ctx context.Context, p user.Principal) ([]egress.Secret, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	if s.secrets == nil {
		return []egress.Secret{}, nil
	}
	list, err := s.secrets.EgressSecrets(ctx, p.OrgID)
	if err != nil {
		return nil, fmt.Errorf("admin: egress secrets: %w", err)
	}
	for i := range list {
		list[i].Sealed, list[i].Value = nil, ""
	}
	return list, nil
}

// PutEgressSecret creates or replaces the caller's org secret of name;
// admins only. The value is sealed before it is stored; the audit entry
// names the hosts and header, never the value. created says whether the
// secret is new.
func (s *Service) PutEgressSecret(ctx context.Context, p user.Principal, name string, in NewSecret) (egress.Secret, bool, error) {
	if err := requireAdmin(p); err != nil {
		return egress.Secret{}, false, err
	}
	if s.secrets == nil || s.sealer == nil {
		return egress.Secret{}, false, fault.New(fault.Unavailable, "egress secrets are not configured on this server")
	}
	sec, err := egress.NewSecret(p.OrgID, name, in.Hosts, in.Header, in.Value, s.now())
	if err != nil {
		return egress.Secret{}, false, err
	}
	old, err := s.secrets.EgressSecrets(ctx, p.OrgID)
	if err != nil {
		return egress.Secret{}, false, fmt.Errorf("admin: egress secrets: %w", err)
	}
	var before []byte
	for _, o := range old {
		if o.Name == name {
			sec.CreatedAt, before = o.CreatedAt, secretJSON(o)
		}
	}
	if before == nil && len(old) >= egress.MaxSecrets {
		return egress.Secret{}, false, fault.Errorf(fault.Invalid, "an organization holds at most %d egress secrets", egress.MaxSecrets)
	}
	if sec.Sealed, err = s.sealer.Seal([]byte(sec.Value), secretAD(p.OrgID, name)); err != nil {
		return egress.Secret{}, false, fmt.Errorf("admin: seal secret: %w", err)
	}
	created, err := s.secrets.PutEgressSecret(ctx, sec)
	if err != nil {
		return egress.Secret{}, false, fmt.Errorf("admin: egress secret: %w", err)
	}
	action := "org.egress_secrets.replace"
	if created {
		action = "org.egress_secrets.create"
	}
	if err := s.store.AppendEvent(ctx, audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: action, Target: name, Before: before, After: secretJSON(sec), At: s.now().UTC()}); err != nil {
		return egress.Secret{}, false, fmt.Errorf("admin: audit: %w", err)
	}
	sec.Value, sec.Sealed = "", nil
	return sec, created, nil
}

// DeleteEgressSecret removes the caller's org secret of name; admins only.
func (s *Service) DeleteEgressSecret(ctx context.Context, p user.Principal, name string) error {
	if err := requireAdmin(p); err != nil {
		return err
	}
	if s.secrets == nil {
		return fault.Errorf(fault.NotFound, "egress secret %q not found", name)
	}
	old, err := s.secrets.EgressSecrets(ctx, p.OrgID)
	if err != nil {
		return fmt.Errorf("admin: egress secrets: %w", err)
	}
	var before []byte
	for _, o := range old {
		if o.Name == name {
			before = secretJSON(o)
		}
	}
	if before == nil {
		return fault.Errorf(fault.NotFound, "egress secret %q not found", name)
	}
	if err := s.secrets.DeleteEgressSecret(ctx, p.OrgID, name); err != nil {
		return fmt.Errorf("admin: egress secret: %w", err)
	}
	if err := s.store.AppendEvent(ctx, audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: "org.egress_secrets.delete", Target: name, Before: before, At: s.now().UTC()}); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	return nil
}

// OrgEgressSecrets returns an org's secrets with their values opened, for
// the egress proxy (app/egressgate); a value that does not open (the
// install key changed) leaves its secret out.
func (s *Service) OrgEgressSecrets(ctx context.Context, orgID string) ([]egress.Secret, error) {
	if s.secrets == nil || s.sealer == nil {
		return nil, nil
	}
	list, err := s.secrets.EgressSecrets(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("admin: egress secrets: %w", err)
	}
	out := list[:0]
	for _, sec := range list {
		v, err := s.sealer.Open(sec.Sealed, secretAD(orgID, sec.Name))
		if err != nil {
			continue
		}
		sec.Value, sec.Sealed = string(v), nil
		out = append(out, sec)
	}
	return out, nil
}

// secretJSON is a secret as the audit log shows it: never its value.
func secretJSON(sec egress.Secret) []byte {
	b, _ := json.Marshal(map[string]any{"name": sec.Name, "hosts": sec.HostStrings(), "header": sec.Header})
	return b
}
