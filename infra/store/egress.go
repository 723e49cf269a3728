package store

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"threadbox/domain/egress"
)

// The egress ledger (domain/egress.Ledger): one row per connection the
// egress proxy allowed or refused, read by admins newest first.

var _ egress.Ledger = Egress{}

// Egress keeps the egress ledger (app/admin, the egress proxy's writer).
type Egress struct{ *handle }

// Egress returns the egress ledger's repository.
func (s *Store) Egress() Egress { return Egress{s.handle} }

type egressRow struct {
	ID          string `gorm:"primaryKey"`
	OrgID       string
	UserID      string
	ThreadID    string
	ContainerID string
	Host        string
	Port        int
	Address     string
	Allowed     bool
	Rule        string
	Reason      string
	BytesUp     int64
	BytesDown   int64
	DurationMs  int64
	At          time.Time
}

func (egressRow) TableName() string { return "egress_ledger" }

func (r egressRow) domain() egress.Record {
	return egress.Record{ID: r.ID, OrgID: r.OrgID, UserID: r.UserID, ThreadID: r.ThreadID, ContainerID: r.ContainerID,
		Host: r.Host, Port: r.Port, Address: r.Address, Allowed: r.Allowed, Rule: r.Rule, Reason: r.Reason,
		BytesUp: r.BytesUp, BytesDown: r.BytesDown, Duration: time.Duration(r.DurationMs) * time.Millisecond, At: r.At.UTC()}
}

// AppendEgress stores records in one statement.
func (s Egress) AppendEgress(ctx context.Context, recs []egress.Record) error {
	if len(recs) == 0 {
		return nil
	}
	rows := make([]egressRow, len(recs))
	for i, r := range recs {
		rows[i] = egressRow{ID: r.ID, OrgID: r.OrgID, UserID: r.UserID, ThreadID: r.ThreadID, ContainerID: r.ContainerID,
			Host: r.Host, Port: r.Port, Address: r.Address, Allowed: r.Allowed, Rule: r.Rule, Reason: r.Reason,
			BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMs: r.Duration.Milliseconds(), At: r.At.UTC()}
	}
	return translate(s.q(ctx).CreateInBatches(&rows, 200).Error, "egress record")
}

// EgressRecords returns a page of the org's records f selects, newest
// first (by time, then id).
func (s Egress) EgressRecords(ctx context.Context, f egress.LedgerFilter) ([]egress.Record, error) {
	q := s.q(ctx).Where("org_id = ?", f.OrgID)
	for col, v := range map[string]string{"user_id": f.UserID, "thread_id": f.ThreadID, "container_id": f.ContainerID, "host": f.Host} {
		if v != "" {
			q = q.Where(col+" = ?", v)
		}
	}
	if f.Allowed != nil {
		q = q.Where("allowed = ?", *f.Allowed)
	}
	if !f.After.IsZero() {
		q = q.Where("at >= ?", f.After.UTC())
	}
	if !f.Before.IsZero() {
		q = q.Where("at < ?", f.Before.UTC())
	}
	if f.Cursor.ID != "" {
		at := f.Cursor.At.UTC()
		q = q.Where("(at < ? OR (at = ? AND id < ?))", at, at, f.Cursor.ID)
	}
	limit := f.Limit
	if limit <= 0 || limit > egress.MaxLedgerPage {
		limit = egress.MaxLedgerPage
	}
	return find[egressRow](q.Order("at DESC").Order("id DESC").Limit(limit), "egress records")
}

// Egress secrets (domain/egress.Secrets): one row per org secret, its
// value sealed by the caller (app/admin); the store never sees it plain.

var _ egress.Secrets = Egress{}

type egressSecretRow struct {
	OrgID       string `gorm:"primaryKey"`
	Name        string `gorm:"primaryKey"`
	Hosts       string
	Header      string
	SealedValue string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

func (egressSecretRow) TableName() string { return "egress_secrets" }

func (r egressSecretRow) domain() egress.Secret {
	hosts, _ := egress.ParsePatterns(strings.Split(r.Hosts, "\n"))
	sealed, _ := base64.StdEncoding.DecodeString(r.SealedValue)
	return egress.Secret{OrgID: r.OrgID, Name: r.Name, Hosts: hosts, Header: r.Header, Sealed: sealed,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

// PutEgressSecret creates or replaces the org's secret of s.Name; a
// replaced secret keeps its CreatedAt.
func (s Egress) PutEgressSecret(ctx context.Context, sec egress.Secret) (bool, error) {
	row := egressSecretRow{OrgID: sec.OrgID, Name: sec.Name, Hosts: strings.Join(sec.HostStrings(), "\n"), Header: sec.Header,
		SealedValue: base64.StdEncoding.EncodeToString(sec.Sealed), CreatedAt: sec.CreatedAt.UTC(), UpdatedAt: sec.UpdatedAt.UTC()}
	res := s.q(ctx).Model(&egressSecretRow{}).Where("org_id = ? AND name = ?", sec.OrgID, sec.Name).
		Updates(map[string]any{"hosts": row.Hosts, "header": row.Header, "sealed_value": row.SealedValue, "updated_at": row.UpdatedAt})
	if res.Error != nil {
		return false, translate(res.Error, "egress secret")
	}
	if res.RowsAffected > 0 {
		return false, nil
	}
	if err := s.q(ctx).Create(&row).Error; err != nil {
		return false, translate(err, "egress secret")
	}
	return true, nil
}

// DeleteEgressSecret removes the org's secret.
func (s Egress) DeleteEgressSecret(ctx context.Context, orgID, name string) error {
	return one(s.q(ctx).Where("org_id = ? AND name = ?", orgID, name).Delete(&egressSecretRow{}), "egress secret")
}

// EgressSecrets returns the org's secrets by name, values sealed.
func (s Egress) EgressSecrets(ctx context.Context, orgID string) ([]egress.Secret, error) {
	return find[egressSecretRow](s.q(ctx).Where("org_id = ?", orgID).Order("name"), "egress secrets")
}
