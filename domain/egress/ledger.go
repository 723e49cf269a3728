package egress

import (
	"context"
	"time"
)

// Scope is who a sandbox's connections are made for: the org whose
// policy applies, the container's owner and thread.
type Scope struct {
	OrgID       string
	UserID      string
	ThreadID    string
	ContainerID string
}

// Record is one connection the egress proxy allowed or refused, as the
// ledger keeps it: who (org, user, thread, container), where (the host and
// port asked for, the address dialled), the verdict and the rule behind it,
// and for an allowed connection the bytes each way and how long it lasted.
type Record struct {
	ID          string
	OrgID       string
	UserID      string
	ThreadID    string // "" for a container no thread owns
	ContainerID string
	Host        string
	Port        int
	Address     string // the address dialled, or the one refused; "" when none
	Allowed     bool
	Rule        string
	Reason      string // why it was refused; "" when allowed
	BytesUp     int64  // from the sandbox
	BytesDown   int64  // to the sandbox
	Duration    time.Duration
	At          time.Time // when the connection was asked for
}

// MaxLedgerPage bounds one page of the ledger.
const MaxLedgerPage = 1000

// LedgerFilter selects an org's ledger records, newest first. Empty fields
// select everything; After and Before bound the time (After inclusive,
// Before exclusive); Cursor continues a previous page.
type LedgerFilter struct {
	OrgID       string
	UserID      string
	ThreadID    string
	ContainerID string
	Host        string
	Allowed     *bool
	After       time.Time
	Before      time.Time
	Cursor      Cursor
	Limit       int
}

// Cursor is where the next page of the ledger starts: after the record at
// At with ID (records are ordered by time, then id, both descending).
type Cursor struct {
	At time.Time
	ID string
}

// Ledger keeps the records of connections.
type Ledger interface {
	// AppendEgress stores records.
	AppendEgress(ctx context.Context, recs []Record) error
	// EgressRecords returns a page of the records f selects, newest first.
	EgressRecords(ctx context.Context, f LedgerFilter) ([]Record, error)
}

// Refused is the error of a connection the egress policy refused, for a
// fetch threadbox makes itself on an org's behalf (the web_fetch tool).
type Refused struct {
	Host   string
	Port   int
	Rule   string
	Reason string
}

func (e *Refused) Error() string { return "egress refused: " + e.Reason }

// Fetched is what a fetch made through the egress policy got: the URL
// it ended at (after redirects), the status, the media type and up to the
// asked bound of the body (Truncated when there was more).
type Fetched struct {
	URL         string
	Status      int
	ContentType string
	Body        []byte
	Truncated   bool
}
