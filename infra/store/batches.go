package store

import (
	"context"
	"time"

	"gorm.io/gorm"

	"threadbox/app/batches"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// Batches keeps Message Batches and their requests (app/batches).
type Batches struct{ *handle }

// Batches returns the Message Batches repository.
func (s *Store) Batches() Batches { return Batches{s.handle} }

var _ batches.Store = Batches{}

type batchRow struct {
	ID                string `gorm:"primaryKey"`
	OrgID             string
	UserID            string
	Role              string
	TokenKind         string
	TokenID           string
	ContainerID       string
	Status            string
	CreatedAt         time.Time
	ExpiresAt         time.Time
	CancelInitiatedAt *time.Time
	EndedAt           *time.Time
}

func (batchRow) TableName() string { return "message_batches" }

func (r batchRow) principal() user.Principal {
	return user.Principal{UserID: r.UserID, OrgID: r.OrgID, Role: user.Role(r.Role), TokenID: r.TokenID, Kind: user.TokenKind(r.TokenKind), ContainerID: r.ContainerID}
}

func (r batchRow) batch(c batches.Counts) batches.Batch {
	b := batches.Batch{ID: r.ID, Principal: r.principal(), Status: r.Status, CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), Counts: c}
	if r.CancelInitiatedAt != nil {
		b.CancelInitiatedAt = r.CancelInitiatedAt.UTC()
	}
	if r.EndedAt != nil {
		b.EndedAt = r.EndedAt.UTC()
	}
	return b
}

type batchRequestRow struct {
	BatchID      string `gorm:"primaryKey"`
	CustomID     string `gorm:"primaryKey"`
	Idx          int
	OrgID        string
	Params       string
	Status       string
	ClaimedBy    string
	LeaseUntil   *time.Time
	Attempts     int
	Message      string
	ErrorKind    string
	ErrorMessage string
}

func (batchRequestRow) TableName() string { return "message_batch_requests" }

// CreateBatch records a batch and its requests, all or nothing.
func (s Batches) CreateBatch(ctx context.Context, b batches.Batch, reqs []batches.Request) error {
	p := b.Principal
	row := batchRow{ID: b.ID, OrgID: p.OrgID, UserID: p.UserID, Role: string(p.Role), TokenKind: string(p.Kind), TokenID: p.TokenID,
		ContainerID: p.ContainerID, Status: b.Status, CreatedAt: b.CreatedAt.UTC(), ExpiresAt: b.ExpiresAt.UTC()}
	rows := make([]batchRequestRow, len(reqs))
	for i, r := range reqs {
		rows[i] = batchRequestRow{BatchID: b.ID, CustomID: r.CustomID, Idx: i, OrgID: p.OrgID, Params: string(r.Params), Status: batches.Pending}
	}
	return s.inTx(ctx, func(tx *handle) error {
		if err := tx.q(ctx).Create(&row).Error; err != nil {
			return translate(err, "message batch")
		}
		return translate(tx.q(ctx).CreateInBatches(rows, 200).Error, "message batch request")
	})
}

// counts returns the counts of the given batches' requests.
func (s Batches) counts(ctx context.Context, ids []string) (map[string]batches.Counts, error) {
	var rows []struct {
		BatchID string
		Status  string
		N       int64
	}
	out := map[string]batches.Counts{}
	if len(ids) == 0 {
		return out, nil
	}
	err := s.q(ctx).Model(&batchRequestRow{}).Select("batch_id, status, COUNT(*) AS n").Where("batch_id IN ?", ids).Group("batch_id, status").Scan(&rows).Error
	if err != nil {
		return nil, dbError("message batch counts", err)
	}
	for _, r := range rows {
		c := out[r.BatchID]
		switch r.Status {
		case batches.Pending, batches.Running:
			c.Processing += r.N
		case batches.Succeeded:
			c.Succeeded += r.N
		case batches.Errored:
			c.Errored += r.N
		case batches.Canceled:
			c.Canceled += r.N
		case batches.Expired:
			c.Expired += r.N
		}
		out[r.BatchID] = c
	}
	return out, nil
}

// Batch returns the org's batch with its counts.
func (s Batches) Batch(ctx context.Context, orgID, id string) (batches.Batch, error) {
	var row batchRow
	if err := s.q(ctx).Where("id = ? AND org_id = ?", id, orgID).Take(&row).Error; err != nil {
		return batches.Batch{}, translate(err, "message batch")
	}
	c, err := s.counts(ctx, []string{id})
	if err != nil {
		return batches.Batch{}, err
	}
	return row.batch(c[id]), nil
}

// Batches returns the user's batches, newest first.
func (s Batches) Batches(ctx context.Context, orgID, userID string) ([]batches.Batch, error) {
	var rows []batchRow
	if err := s.q(ctx).Where("org_id = ? AND user_id = ?", orgID, userID).Order("created_at DESC, id DESC").Find(&rows).Error; err != nil {
		return nil, dbError("message batches", err)
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	c, err := s.counts(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]batches.Batch, len(rows))
	for i, r := range rows {
		out[i] = r.batch(c[r.ID])
	}
	return out, nil
}

// CancelBatch marks an in-progress batch canceling and cancels its
// pending requests.
func (s Batches) CancelBatch(ctx context.Context, orgID, id string, at time.Time) error {
	return s.inTx(ctx, func(tx *handle) error {
		res := tx.q(ctx).Model(&batchRow{}).Where("id = ? AND org_id = ? AND status = ?", id, orgID, batches.InProgress).
			Updates(map[string]any{"status": batches.Canceling, "cancel_initiated_at": at.UTC()})
		if res.Error != nil {
			return translate(res.Error, "message batch")
		}
		if res.RowsAffected == 0 {
			return nil
		}
		err := tx.q(ctx).Model(&batchRequestRow{}).Where("batch_id = ? AND status = ?", id, batches.Pending).Update("status", batches.Canceled).Error
		return translate(err, "message batch requests")
	})
}

// DeleteBatch deletes a batch with its requests.
func (s Batches) DeleteBatch(ctx context.Context, orgID, id string) error {
	return s.inTx(ctx, func(tx *handle) error {
		if err := tx.q(ctx).Where("batch_id = ? AND org_id = ?", id, orgID).Delete(&batchRequestRow{}).Error; err != nil {
			return translate(err, "message batch requests")
		}
		return one(tx.q(ctx).Where("id = ? AND org_id = ?", id, orgID).Delete(&batchRow{}), "message batch")
	})
}

// claimLock is the PostgreSQL advisory lock that makes claims one at a
// time on the database (SQLite's single writer does that already).
const claimLock = 0x6d736762 // "msgb"

// ClaimRequests claims requests for holder, at most perOrg running at once
// per org on the database.
func (s Batches) ClaimRequests(ctx context.Context, holder string, now, until time.Time, perOrg, max int) ([]batches.Claimed, error) {
	var out []batches.Claimed
	err := s.inTx(ctx, func(tx *handle) error {
		out = out[:0]
		if tx.dialect == "postgres" {
			if err := tx.q(ctx).Exec("SELECT pg_advisory_xact_lock(?)", claimLock).Error; err != nil {
				return dbError("message batch claim lock", err)
			}
		}
		var running []struct {
			OrgID string
			N     int
		}
		if err := tx.q(ctx).Model(&batchRequestRow{}).Select("org_id, COUNT(*) AS n").
			Where("status = ? AND lease_until > ?", batches.Running, now).Group("org_id").Scan(&running).Error; err != nil {
			return dbError("running message batch requests", err)
		}
		busy := map[string]int{}
		for _, r := range running {
			busy[r.OrgID] = r.N
		}
		var cands []batchRequestRow
		err := tx.q(ctx).Table("message_batch_requests AS r").Select("r.*").
			Joins("JOIN message_batches b ON b.id = r.batch_id").
			Where("(r.status = ? OR (r.status = ? AND r.lease_until <= ?)) AND b.status = ? AND b.expires_at > ?",
				batches.Pending, batches.Running, now, batches.InProgress, now).
			Order("b.created_at, r.batch_id, r.idx").Limit(max * 8).Find(&cands).Error
		if err != nil {
			return dbError("message batch requests to claim", err)
		}
		owners := map[string]batchRow{}
		for _, c := range cands {
			if len(out) == max {
				break
			}
			if busy[c.OrgID] >= perOrg {
				continue
			}
			res := tx.q(ctx).Model(&batchRequestRow{}).
				Where("batch_id = ? AND custom_id = ? AND (status = ? OR (status = ? AND lease_until <= ?))", c.BatchID, c.CustomID, batches.Pending, batches.Running, now).
				Updates(map[string]any{"status": batches.Running, "claimed_by": holder, "lease_until": until.UTC(), "attempts": c.Attempts + 1})
			if res.Error != nil {
				return dbError("claim message batch request", res.Error)
			}
			if res.RowsAffected != 1 {
				continue
			}
			busy[c.OrgID]++
			b, ok := owners[c.BatchID]
			if !ok {
				if err := tx.q(ctx).Where("id = ?", c.BatchID).Take(&b).Error; err != nil {
					return translate(err, "message batch")
				}
				owners[c.BatchID] = b
			}
			out = append(out, batches.Claimed{BatchID: c.BatchID, CustomID: c.CustomID, Params: []byte(c.Params), Attempts: c.Attempts + 1, Principal: b.principal()})
		}
		return nil
	})
	return out, err
}

// RenewRequest extends holder's claim of a request.
func (s Batches) RenewRequest(ctx context.Context, holder, batchID, customID string, until time.Time) error {
	res := s.q(ctx).Model(&batchRequestRow{}).Where("batch_id = ? AND custom_id = ? AND status = ? AND claimed_by = ?", batchID, customID, batches.Running, holder).
		Update("lease_until", until.UTC())
	if res.Error != nil {
		return dbError("renew message batch request", res.Error)
	}
	if res.RowsAffected == 0 {
		return fault.New(fault.Conflict, "the claim of the message batch request was lost")
	}
	return nil
}

// FinishRequest records the result of a request holder claims; a claim
// lost meanwhile (its lease lapsed and another server took it) records
// nothing.
func (s Batches) FinishRequest(ctx context.Context, holder, batchID string, r batches.Result) error {
	err := s.q(ctx).Model(&batchRequestRow{}).Where("batch_id = ? AND custom_id = ? AND status = ? AND claimed_by = ?", batchID, r.CustomID, batches.Running, holder).
		Updates(map[string]any{"status": r.Status, "message": string(r.Message), "error_kind": string(r.ErrorKind), "error_message": r.ErrorMessage,
			"claimed_by": "", "lease_until": nil}).Error
	return translate(err, "message batch request")
}

// ReleaseRequest gives back holder's claim of a request, uncounted.
func (s Batches) ReleaseRequest(ctx context.Context, holder, batchID, customID string) error {
	err := s.q(ctx).Model(&batchRequestRow{}).Where("batch_id = ? AND custom_id = ? AND status = ? AND claimed_by = ?", batchID, customID, batches.Running, holder).
		Updates(map[string]any{"status": batches.Pending, "claimed_by": "", "lease_until": nil, "attempts": gorm.Expr("attempts - 1")}).Error
	return translate(err, "message batch request")
}

// SettleBatches cancels what a canceling batch had left, expires what a
// batch past its expiry had left, ends the batches with nothing left and
// deletes ended batches older than cutoff.
func (s Batches) SettleBatches(ctx context.Context, now, cutoff time.Time) error {
	left := "(status = ? OR (status = ? AND lease_until <= ?))"
	if err := s.q(ctx).Model(&batchRequestRow{}).
		Where(left+" AND batch_id IN (SELECT id FROM message_batches WHERE status = ?)", batches.Pending, batches.Running, now, batches.Canceling).
		Updates(map[string]any{"status": batches.Canceled, "claimed_by": "", "lease_until": nil}).Error; err != nil {
		return dbError("cancel message batch requests", err)
	}
	if err := s.q(ctx).Model(&batchRequestRow{}).
		Where(left+" AND batch_id IN (SELECT id FROM message_batches WHERE status <> ? AND expires_at <= ?)", batches.Pending, batches.Running, now, batches.Ended, now).
		Updates(map[string]any{"status": batches.Expired, "claimed_by": "", "lease_until": nil}).Error; err != nil {
		return dbError("expire message batch requests", err)
	}
	if err := s.q(ctx).Model(&batchRow{}).
		Where("status <> ? AND NOT EXISTS (SELECT 1 FROM message_batch_requests r WHERE r.batch_id = message_batches.id AND r.status IN (?, ?))", batches.Ended, batches.Pending, batches.Running).
		Updates(map[string]any{"status": batches.Ended, "ended_at": now.UTC()}).Error; err != nil {
		return dbError("end message batches", err)
	}
	old := "SELECT id FROM message_batches WHERE status = ? AND ended_at <= ?"
	if err := s.q(ctx).Where("batch_id IN ("+old+")", batches.Ended, cutoff).Delete(&batchRequestRow{}).Error; err != nil {
		return dbError("forget message batch requests", err)
	}
	if err := s.q(ctx).Where("status = ? AND ended_at <= ?", batches.Ended, cutoff).Delete(&batchRow{}).Error; err != nil {
		return dbError("forget message batches", err)
	}
	return nil
}

// Results returns a batch's results in the order of its requests.
func (s Batches) Results(ctx context.Context, orgID, id string) ([]batches.Result, error) {
	var rows []batchRequestRow
	if err := s.q(ctx).Select("custom_id, status, message, error_kind, error_message").Where("batch_id = ? AND org_id = ?", id, orgID).Order("idx").Find(&rows).Error; err != nil {
		return nil, dbError("message batch results", err)
	}
	out := make([]batches.Result, len(rows))
	for i, r := range rows {
		out[i] = batches.Result{CustomID: r.CustomID, Status: r.Status, Message: []byte(r.Message), ErrorKind: fault.Kind(r.ErrorKind), ErrorMessage: r.ErrorMessage}
	}
	return out, nil
}
