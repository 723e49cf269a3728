// Package audit holds the audit log's events: who changed what, when, from
// what to what.
package audit

import (
	"context"
	"time"
)

// Event is one recorded change; a plain record with no rules of its own.
type Event struct {
	ID      string
	OrgID   string
	ActorID string
	Action  string // e.g. "org.features.update"
	Target  string
	Before  []byte // JSON
	After   []byte // JSON
	At      time.Time
}

// Repository stores audit events.
type Repository interface {
	AppendEvent(ctx context.Context, e Event) error
	Events(ctx context.Context, orgID string, limit int) ([]Event, error)
}
