package container

import "time"

// Tombstone is what stays of a container removed at its maximum age: its
// id, whose it was, and when it went. A container id with a tombstone is
// never made again, so every later request naming it fails the way the
// first one after its maximum age did, rather than finding a new, empty
// container of the same id. The default container has none: a request
// naming no container gets a new one.
type Tombstone struct {
	ID        string
	ClientID  string
	OrgID     string
	OwnerID   string
	CreatedAt time.Time // when the container was made
	ExpiredAt time.Time // when it was removed
}

// Tombstone returns the container's tombstone, removed at now.
func (c Container) Tombstone(now time.Time) Tombstone {
	return Tombstone{ID: c.ID(), ClientID: c.clientID, OrgID: c.OrgID(), OwnerID: c.OwnerID(), CreatedAt: c.CreatedAt(), ExpiredAt: now.UTC()}
}

// KeepsTombstone reports whether the container leaves a tombstone when it
// is removed at its maximum age: a user's named container does; the
// default container, made anew for requests that name none, and a
// thread's, which has no maximum age, do not.
func (c Container) KeepsTombstone() bool {
	return c.threadID == "" && c.clientID != DefaultClientID
}

// AccessibleBy reports whether user userID of org orgID named the
// container the tombstone is of.
func (t Tombstone) AccessibleBy(orgID, userID string) bool {
	return t.OrgID == orgID && t.OwnerID == userID
}
