// Package container holds named sandbox scopes: their ids, owners and
// expiry rules. A container's files persist for its whole life; at most one
// sandbox runs for it at a time.
package container

import (
	"context"
	"strings"
	"time"

	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// DefaultClientID names the container used by requests that name none.
const DefaultClientID = "default"

// State is the lifecycle state recorded for a container.
type State string

// The recorded states.
const (
	Idle    State = "idle"    // no sandbox running; files kept
	Running State = "running" // a sandbox is up
	Removed State = "removed" // past its maximum age or deleted; files gone
)

// Container is a named sandbox scope owned by a user or by a thread.
type Container struct {
	org.Owned    // its storage id (unique across users), org, owner and creation
	clientID     string
	threadID     string
	state        State
	backend      string // the backend serving its sandbox, while one runs
	holder       string // the server process holding its sandbox, while one runs
	lastActiveAt time.Time
	skills       bool // its skills folder may hold skills (see MayHoldSkills)
}

// ValidateClientID checks an id given by an API client.
func ValidateClientID(id string) error {
	if !validClientID(id) || strings.Contains(id, "--") {
		return fault.Errorf(fault.Invalid, "invalid container id %q: use 1 to 64 letters, digits, '.', '_' or '-'", id)
	}
	return nil
}

// validClientID matches ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ (checked on every
// Messages API request, so without a regexp).
func validClientID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// Ref is a container as a request names it, parsed once: the id of a
// thread (its container is the thread's) or an id the client chose.
type Ref struct {
	raw    string
	thread bool
}

// ThreadIDPrefix starts every thread id (and so every thread's container id).
const ThreadIDPrefix = "thr_"

// ParseRef reads a container reference; "" names the default container.
func ParseRef(s string) Ref { return Ref{raw: s, thread: strings.HasPrefix(s, ThreadIDPrefix)} }

// Thread returns the thread id the reference names, if it names one.
func (r Ref) Thread() (string, bool) { return r.raw, r.thread }

// ClientID returns the id the client chose ("" for the default container);
// empty for a thread's reference.
func (r Ref) ClientID() string {
	if r.thread {
		return ""
	}
	return r.raw
}

// String returns the reference as given.
func (r Ref) String() string { return r.raw }

// UserScopedID namespaces a client-given id per user, so two users who both
// say "my-container" get two containers.
func UserScopedID(ownerID, clientID string) string { return ownerID + "--" + clientID }

// RefFor returns the reference by which its owner names the container
// with storage id id: the client's id of a user-scoped container, or the
// thread's id of a thread's container.
func RefFor(id, ownerID string) string {
	if clientID, ok := strings.CutPrefix(id, UserScopedID(ownerID, "")); ok {
		return clientID
	}
	return id
}

// NewForUser returns a user-scoped container for a client-given id.
func NewForUser(orgID, ownerID, clientID string, now time.Time) (Container, error) {
	if err := ValidateClientID(clientID); err != nil {
		return Container{}, err
	}
	if orgID == "" || ownerID == "" {
		return Container{}, fault.New(fault.Invalid, "container org and owner are required")
	}
	now = now.UTC()
	return Container{Owned: org.Own(UserScopedID(ownerID, clientID), orgID, ownerID, now), clientID: clientID, state: Idle, lastActiveAt: now}, nil
}

// NewForThread returns the container of a thread: its id is the thread id.
func NewForThread(orgID, ownerID, threadID string, now time.Time) (Container, error) {
	if orgID == "" || ownerID == "" || threadID == "" {
		return Container{}, fault.New(fault.Invalid, "container org, owner and thread are required")
	}
	now = now.UTC()
	return Container{Owned: org.Own(threadID, orgID, ownerID, now), clientID: threadID, threadID: threadID, state: Idle, lastActiveAt: now}, nil
}

// Restore rebuilds a container from storage.
func Restore(id, clientID, orgID, ownerID, threadID string, state State, backend, holder string, createdAt, lastActiveAt time.Time) Container {
	return Container{Owned: org.Own(id, orgID, ownerID, createdAt), clientID: clientID, threadID: threadID, state: state, backend: backend, holder: holder, lastActiveAt: lastActiveAt}
}

// ClientID returns the id as the API shows it to its owner.
func (c Container) ClientID() string { return c.clientID }

// ThreadID returns the thread that owns the container, or "".
func (c Container) ThreadID() string { return c.threadID }

// State returns the recorded state.
func (c Container) State() State { return c.state }

// LastActiveAt returns when the container was last used.
func (c Container) LastActiveAt() time.Time { return c.lastActiveAt }

// Touch returns the container used at now.
func (c Container) Touch(now time.Time) Container { c.lastActiveAt = now.UTC(); return c }

// WithState returns the container in state s.
func (c Container) WithState(s State) Container { c.state = s; return c }

// MayHoldSkills reports whether the container's skills folder may hold
// skills: it is set before any skill is loaded into the folder and
// cleared once a turn without skills emptied it, so a container that
// says no has an empty folder (a new container's folders are made empty,
// and a removed one's go before its record). A turn that asks for no
// skills of such a container has nothing to unload and need not look.
func (c Container) MayHoldSkills() bool { return c.skills }

// WithSkills returns the container whose skills folder may hold skills
// (may) or is empty.
func (c Container) WithSkills(may bool) Container { c.skills = may; return c }

// Backend names the backend serving the running sandbox ("" when none runs).
func (c Container) Backend() string { return c.backend }

// Holder names the server process holding the running sandbox ("" when
// none runs).
func (c Container) Holder() string { return c.holder }

// Booted returns the container with a sandbox of backend running, held by
// the server process holder, used at now.
func (c Container) Booted(backend, holder string, now time.Time) Container {
	c.state, c.backend, c.holder = Running, backend, holder
	return c.Touch(now)
}

// Booting returns the container with a sandbox about to boot for the
// server process holder, used at now: it counts as running from here (a
// running-sandbox quota's slot is taken before the boot, not after it),
// with no backend named until Booted.
func (c Container) Booting(holder string, now time.Time) Container {
	return c.Booted("", holder, now)
}

// Stopped returns the container with no sandbox running; its files stay.
func (c Container) Stopped() Container {
	c.state, c.backend, c.holder = Idle, "", ""
	return c
}

// Expired reports whether the container has passed its maximum age. A
// thread's container has none: its files live as long as the thread.
func (c Container) Expired(now time.Time, maxAge time.Duration) bool {
	return maxAge > 0 && c.threadID == "" && !now.Before(c.CreatedAt().Add(maxAge))
}

// ExpiresAt is the rolling expiry shown to clients: when the running
// sandbox will be shut down for idleness, never past the maximum age (of
// a container that has one).
func (c Container) ExpiresAt(idle, maxAge time.Duration) time.Time {
	t := c.lastActiveAt.Add(idle)
	if maxAge > 0 && c.threadID == "" {
		if hard := c.CreatedAt().Add(maxAge); hard.Before(t) {
			t = hard
		}
	}
	return t
}

// Repository stores containers.
type Repository interface {
	CreateContainer(ctx context.Context, c Container) error
	Container(ctx context.Context, id string) (Container, error)
	UpdateContainer(ctx context.Context, c Container) error
	// MarkSkills records whether the container id's skills folder may
	// hold skills (Container.MayHoldSkills), and nothing else of it.
	MarkSkills(ctx context.Context, id string, may bool) error
	DeleteContainer(ctx context.Context, id string) error
	// ExpireContainer forgets the container t is of and keeps t, in one
	// transaction; forgetting one already gone keeps t all the same.
	ExpireContainer(ctx context.Context, t Tombstone) error
	// Tombstone returns the tombstone of the container id; fault.NotFound
	// when it has none.
	Tombstone(ctx context.Context, id string) (Tombstone, error)
	// ContainersCreatedBefore lists the containers that may expire (not a
	// thread's) created before t.
	ContainersCreatedBefore(ctx context.Context, t time.Time) ([]Container, error)
	// ContainersInState lists the containers recorded in state s.
	ContainersInState(ctx context.Context, s State) ([]Container, error)
}
