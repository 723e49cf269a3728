package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"threadbox/app/files"
)

// UploadKeys remembers the uploads made with an Idempotency-Key in the
// database, so that a retry gets the first answer after a restart too, and
// from any server sharing the database. It implements files.Idempotency.
type UploadKeys struct {
	s   *handle
	ttl time.Duration
}

// UploadKeys returns the database's memory of Idempotency-Keys; entries
// live ttl (zero means files.DefaultIdempotencyTTL).
func (s *Store) UploadKeys(ttl time.Duration) *UploadKeys {
	if ttl <= 0 {
		ttl = files.DefaultIdempotencyTTL
	}
	return &UploadKeys{s: s.handle, ttl: ttl}
}

type uploadKeyRow struct {
	ID          string `gorm:"primaryKey"`
	Fingerprint string
	File        string
	CreatedAt   time.Time
}

func (uploadKeyRow) TableName() string { return "upload_keys" }

// uploadKeyID keeps keys (which hold NUL separators, refused by PostgreSQL
// text) out of the table: only their digest is stored.
func uploadKeyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// pendingFile marks a claimed key whose upload has not finished: a finished
// entry always holds a JSON object.
const pendingFile = ""

// lapsedRows selects the entries no longer remembered at now: finished ones
// past the ttl, claims past files.ClaimTTL.
func (k *UploadKeys) lapsedRows(q *gorm.DB, now time.Time) *gorm.DB {
	return q.Where("(created_at <= ? OR (file = ? AND created_at <= ?))", now.Add(-k.ttl), pendingFile, now.Add(-min(k.ttl, files.ClaimTTL)))
}

// Claim inserts a pending entry for key unless a live one holds it, which
// it then returns. Two servers claiming at once meet on the primary key.
func (k *UploadKeys) Claim(ctx context.Context, key, fingerprint string) (files.Saved, bool, error) {
	id := uploadKeyID(key)
	for range 3 {
		now := time.Now().UTC()
		if err := k.lapsedRows(k.s.q(ctx).Where("id = ?", id), now).Delete(&uploadKeyRow{}).Error; err != nil {
			return files.Saved{}, false, dbError("forget upload key", err)
		}
		row := uploadKeyRow{ID: id, Fingerprint: base64.StdEncoding.EncodeToString([]byte(fingerprint)), File: pendingFile, CreatedAt: now}
		res := k.s.q(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
		if res.Error != nil {
			return files.Saved{}, false, dbError("claim upload key", res.Error)
		}
		if res.RowsAffected == 1 {
			return files.Saved{}, true, nil
		}
		var held uploadKeyRow
		err := k.s.q(ctx).Where("id = ?", id).Take(&held).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			continue // released meanwhile: claim again
		}
		if err != nil {
			return files.Saved{}, false, dbError("upload key", err)
		}
		saved, err := held.saved()
		return saved, false, err
	}
	return files.Saved{}, false, errors.New("store: claim upload key: released and taken three times over")
}

func (r uploadKeyRow) saved() (files.Saved, error) {
	fp, err := base64.StdEncoding.DecodeString(r.Fingerprint)
	if err != nil {
		return files.Saved{}, dbError("upload key fingerprint", err)
	}
	s := files.Saved{Fingerprint: string(fp), At: r.CreatedAt, Pending: r.File == pendingFile}
	if !s.Pending {
		if err := json.Unmarshal([]byte(r.File), &s.File); err != nil {
			return files.Saved{}, dbError("upload key file", err)
		}
	}
	return s, nil
}

// Save stores the finished upload s under key, and forgets the entries no
// longer remembered.
func (k *UploadKeys) Save(ctx context.Context, key string, s files.Saved) error {
	file, err := json.Marshal(s.File)
	if err != nil {
		return dbError("upload key file", err)
	}
	at := s.At.UTC()
	if s.At.IsZero() {
		at = time.Now().UTC()
	}
	row := uploadKeyRow{ID: uploadKeyID(key), Fingerprint: base64.StdEncoding.EncodeToString([]byte(s.Fingerprint)), File: string(file), CreatedAt: at}
	if err := k.lapsedRows(k.s.q(ctx), time.Now().UTC()).Delete(&uploadKeyRow{}).Error; err != nil {
		return dbError("forget upload keys", err)
	}
	if err := k.s.q(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "id"}},
		DoUpdates: clause.AssignmentColumns([]string{"fingerprint", "file", "created_at"}), // UpdateAll would keep the claim's created_at
	}).Create(&row).Error; err != nil {
		return dbError("save upload key", err)
	}
	return nil
}

// Release deletes key's claim; a finished entry stays.
func (k *UploadKeys) Release(ctx context.Context, key string) error {
	if err := k.s.q(ctx).Where("id = ? AND file = ?", uploadKeyID(key), pendingFile).Delete(&uploadKeyRow{}).Error; err != nil {
		return dbError("release upload key", err)
	}
	return nil
}
