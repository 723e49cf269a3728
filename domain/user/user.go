// Package user holds users, their roles and their API tokens.
package user

import (
	"context"
	"net/mail"
	"strings"
	"time"

	"threadbox/domain/fault"
)

// Role is what a user may do in their org.
type Role string

// The roles.
const (
	Admin  Role = "admin"
	Member Role = "member"
)

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case Admin, Member:
		return Role(s), nil
	}
	return "", fault.Errorf(fault.Invalid, "role must be %q or %q", Admin, Member)
}

// User belongs to one org.
type User struct {
	id           string
	orgID        string
	email        string
	role         Role
	disabled     bool
	passwordHash string
	createdAt    time.Time
}

// New returns a valid user; the email is normalised to lower case.
func New(id, orgID, email string, role Role, now time.Time) (User, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if id == "" || orgID == "" {
		return User{}, fault.New(fault.Invalid, "user id and org are required")
	}
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email || len(email) > 254 {
		return User{}, fault.Errorf(fault.Invalid, "invalid email address %q", email)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return User{}, err
	}
	return User{id: id, orgID: orgID, email: email, role: role, createdAt: now.UTC()}, nil
}

// Restore rebuilds a user from storage.
func Restore(id, orgID, email string, role Role, disabled bool, passwordHash string, createdAt time.Time) User {
	return User{id: id, orgID: orgID, email: email, role: role, disabled: disabled, passwordHash: passwordHash, createdAt: createdAt}
}

// ID returns the user's id.
func (u User) ID() string { return u.id }

// OrgID returns the user's org.
func (u User) OrgID() string { return u.orgID }

// Email returns the user's email address.
func (u User) Email() string { return u.email }

// Role returns the user's role.
func (u User) Role() Role { return u.role }

// Disabled reports whether the user is switched off.
func (u User) Disabled() bool { return u.disabled }

// PasswordHash returns the stored password hash, empty when none is set.
func (u User) PasswordHash() string { return u.passwordHash }

// CreatedAt returns when the user was created.
func (u User) CreatedAt() time.Time { return u.createdAt }

// IsAdmin reports whether the user administers their org.
func (u User) IsAdmin() bool { return u.role == Admin }

// WithRole returns the user with role r.
func (u User) WithRole(r Role) User { u.role = r; return u }

// WithDisabled returns the user switched off or on.
func (u User) WithDisabled(d bool) User { u.disabled = d; return u }

// WithPasswordHash returns the user with a new password hash.
func (u User) WithPasswordHash(h string) User { u.passwordHash = h; return u }

// Repository stores users.
type Repository interface {
	CreateUser(ctx context.Context, u User) error
	User(ctx context.Context, id string) (User, error)
	UserByEmail(ctx context.Context, email string) (User, error)
	UsersByOrg(ctx context.Context, orgID string) ([]User, error)
	UpdateUser(ctx context.Context, u User) error
}
