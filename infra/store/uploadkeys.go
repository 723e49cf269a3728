package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"threadbox/app/files"
)

// UploadKeys remembers the uploads made with an Idempotency-Key in the
// database, so that a retry gets the first answer after a restart too, and
// from any server sharing the database. It implements files.Idempotency.
type UploadKeys struct {
	s   *Store
	ttl time.Duration
}

// UploadKeys returns the database's memory of Idempotency-Keys; entries
// live ttl (zero means files.DefaultIdempotencyTTL).
func (s *Store) UploadKeys(ttl time.Duration) *UploadKeys {
	if ttl <= 0 {
		ttl = files.DefaultIdempotencyTTL
	}
	return &UploadKeys{s: s, ttl: ttl}
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

// Lookup returns what was saved under key unless it is older than the ttl.
func (k *UploadKeys) Lookup(ctx context.Context, key string) (files.Saved, bool, error) {
	var r uploadKeyRow
	err := k.s.q(ctx).Where("id = ? AND created_at > ?", uploadKeyID(key), time.Now().UTC().Add(-k.ttl)).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return files.Saved{}, false, nil
	}
	if err != nil {
		return files.Saved{}, false, fmt.Errorf("store: upload key: %w", err)
	}
	fp, err := base64.StdEncoding.DecodeString(r.Fingerprint)
	if err != nil {
		return files.Saved{}, false, fmt.Errorf("store: upload key fingerprint: %w", err)
	}
	var f files.File
	if err := json.Unmarshal([]byte(r.File), &f); err != nil {
		return files.Saved{}, false, fmt.Errorf("store: upload key file: %w", err)
	}
	return files.Saved{Fingerprint: string(fp), File: f, At: r.CreatedAt}, true, nil
}

// Save stores s under key, replacing an expired entry, and forgets the
// entries older than the ttl.
func (k *UploadKeys) Save(ctx context.Context, key string, s files.Saved) error {
	file, err := json.Marshal(s.File)
	if err != nil {
		return fmt.Errorf("store: upload key file: %w", err)
	}
	at := s.At.UTC()
	if s.At.IsZero() {
		at = time.Now().UTC()
	}
	row := uploadKeyRow{ID: uploadKeyID(key), Fingerprint: base64.StdEncoding.EncodeToString([]byte(s.Fingerprint)), File: string(file), CreatedAt: at}
	if err := k.s.q(ctx).Where("created_at <= ?", time.Now().UTC().Add(-k.ttl)).Delete(&uploadKeyRow{}).Error; err != nil {
		return fmt.Errorf("store: forget upload keys: %w", err)
	}
	if err := k.s.q(ctx).Clauses(clause.OnConflict{UpdateAll: true}).Create(&row).Error; err != nil {
		return fmt.Errorf("store: save upload key: %w", err)
	}
	return nil
}
