package org

import "time"

// Owned is the identity of a record that one user of an org owns: its id,
// its org, its owner and when it was made. Containers, threads, turns and
// API tokens embed it, so that each answers these questions, and whether
// a user may use it, the same way.
type Owned struct {
	id        string
	orgID     string
	ownerID   string
	createdAt time.Time
}

// Own returns the identity of record id of org orgID, owned by user
// ownerID, made at createdAt (kept as given).
func Own(id, orgID, ownerID string, createdAt time.Time) Owned {
	return Owned{id: id, orgID: orgID, ownerID: ownerID, createdAt: createdAt}
}

// ID returns the record's id.
func (o Owned) ID() string { return o.id }

// OrgID returns the org the record belongs to.
func (o Owned) OrgID() string { return o.orgID }

// OwnerID returns the user who owns the record.
func (o Owned) OwnerID() string { return o.ownerID }

// CreatedAt returns when the record was made.
func (o Owned) CreatedAt() time.Time { return o.createdAt }

// AccessibleBy reports whether user userID of org orgID may use the
// record: its owner, in its org.
func (o Owned) AccessibleBy(orgID, userID string) bool {
	return o.orgID == orgID && o.ownerID == userID
}
