// Package org holds the tenant aggregate, its feature policy and quotas,
// and Owned, the identity of the records its users own.
package org

import (
	"context"
	"time"

	"threadbox/domain/fault"
)

// Org is a tenant: it holds users, projects, skills and the feature policy.
type Org struct {
	id        string
	name      string
	disabled  bool
	policy    Policy
	createdAt time.Time
}

// New returns a valid org with the default policy.
func New(id, name string, now time.Time) (Org, error) {
	if id == "" {
		return Org{}, fault.New(fault.Invalid, "org id is required")
	}
	name, err := fault.Text("org name", name, 200)
	if err != nil {
		return Org{}, err
	}
	return Org{id: id, name: name, policy: DefaultPolicy(), createdAt: now.UTC()}, nil
}

// Restore rebuilds an org from storage without validation.
func Restore(id, name string, disabled bool, p Policy, createdAt time.Time) Org {
	return Org{id: id, name: name, disabled: disabled, policy: p, createdAt: createdAt}
}

// ID returns the org's id.
func (o Org) ID() string { return o.id }

// Name returns the org's name.
func (o Org) Name() string { return o.name }

// Disabled reports whether the org is switched off.
func (o Org) Disabled() bool { return o.disabled }

// Policy returns the org's feature policy.
func (o Org) Policy() Policy { return o.policy }

// CreatedAt returns when the org was created.
func (o Org) CreatedAt() time.Time { return o.createdAt }

// WithPolicy returns the org with policy p.
func (o Org) WithPolicy(p Policy) Org { o.policy = p; return o }

// WithDisabled returns the org switched off or on.
func (o Org) WithDisabled(d bool) Org { o.disabled = d; return o }

// Repository stores orgs.
type Repository interface {
	CreateOrg(ctx context.Context, o Org) error
	Org(ctx context.Context, id string) (Org, error)
	OrgByName(ctx context.Context, name string) (Org, error)
	UpdateOrg(ctx context.Context, o Org) error
}
