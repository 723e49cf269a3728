package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"threadbox/domain/egress"
	"threadbox/domain/fault"
	"threadbox/domain/org"
	"threadbox/domain/user"
)

type orgRow struct {
	ID                           string `gorm:"primaryKey"`
	Name                         string
	Disabled                     bool
	FeatureCodeExecution         bool
	FeatureUploads               bool
	FeatureUploadsMaxBytes       int64
	FeatureDownloadsGenerated    bool
	FeatureDownloadsUploaded     bool
	FeatureContentCredentials    bool
	FeatureEgress                bool
	EgressAllow                  string
	QuotaRunningSandboxesPerUser int64
	QuotaRunningSandboxesPerOrg  int64
	QuotaContainersPerUser       int64
	QuotaStorageBytesPerOrg      int64
	QuotaSnapshotsPerThread      int64
	QuotaSnapshotBytesPerThread  int64
	CreatedAt                    time.Time
}

func (orgRow) TableName() string { return "orgs" }

func toOrgRow(o org.Org) orgRow {
	p := o.Policy()
	return orgRow{ID: o.ID(), Name: o.Name(), Disabled: o.Disabled(),
		FeatureCodeExecution: p.Allows(org.CodeExecution), FeatureUploads: p.Allows(org.Uploads),
		FeatureUploadsMaxBytes: p.MaxUploadBytes(), FeatureDownloadsGenerated: p.Allows(org.DownloadsGenerated),
		FeatureDownloadsUploaded:     p.Allows(org.DownloadsUploaded),
		FeatureContentCredentials:    p.Allows(org.ContentCredentials),
		FeatureEgress:                p.Allows(org.Egress),
		EgressAllow:                  strings.Join(p.EgressAllow(), "\n"),
		QuotaRunningSandboxesPerUser: p.Quotas().Limit(org.RunningSandboxesPerUser),
		QuotaRunningSandboxesPerOrg:  p.Quotas().Limit(org.RunningSandboxesPerOrg),
		QuotaContainersPerUser:       p.Quotas().Limit(org.ContainersPerUser),
		QuotaStorageBytesPerOrg:      p.Quotas().Limit(org.StorageBytesPerOrg),
		QuotaSnapshotsPerThread:      p.Quotas().Limit(org.SnapshotsPerThread),
		QuotaSnapshotBytesPerThread:  p.Quotas().Limit(org.SnapshotBytesPerThread),
		CreatedAt:                    o.CreatedAt()}
}

func (r orgRow) domain() org.Org {
	p, err := org.NewPolicy(r.FeatureCodeExecution, r.FeatureUploads, r.FeatureUploadsMaxBytes, r.FeatureDownloadsGenerated, r.FeatureDownloadsUploaded)
	if err != nil {
		p = org.DefaultPolicy()
	}
	p = p.WithContentCredentials(r.FeatureContentCredentials)
	p = p.WithEgress(r.FeatureEgress, egressAllow(r.EgressAllow))
	// A negative limit (written by hand) reads as no quota rather than
	// failing every request of the org.
	if q, err := org.NewQuotas(map[org.Quota]int64{
		org.RunningSandboxesPerUser: max(r.QuotaRunningSandboxesPerUser, 0),
		org.RunningSandboxesPerOrg:  max(r.QuotaRunningSandboxesPerOrg, 0),
		org.ContainersPerUser:       max(r.QuotaContainersPerUser, 0),
		org.StorageBytesPerOrg:      max(r.QuotaStorageBytesPerOrg, 0),
		org.SnapshotsPerThread:      max(r.QuotaSnapshotsPerThread, 0),
		org.SnapshotBytesPerThread:  max(r.QuotaSnapshotBytesPerThread, 0),
	}); err == nil {
		p = p.WithQuotas(q)
	}
	return org.Restore(r.ID, r.Name, r.Disabled, p, r.CreatedAt.UTC())
}

// egressAllow reads a stored allowlist, one pattern a line; a line that
// does not parse (edited by hand) is left out rather than failing every
// request of the org.
func egressAllow(s string) []egress.Pattern {
	var out []egress.Pattern
	for line := range strings.SplitSeq(s, "\n") {
		if p, err := egress.ParsePattern(line); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// CreateOrg stores a new org.
func (s Accounts) CreateOrg(ctx context.Context, o org.Org) error {
	r := toOrgRow(o)
	return translate(s.q(ctx).Create(&r).Error, "org")
}

// Org returns the org with id.
// Outside a transaction it is kept on SQLite until the next commit by
// anyone (memo.go): the policy is read on every request that may run code.
func (s Accounts) Org(ctx context.Context, id string) (org.Org, error) {
	load := func() (org.Org, error) {
		return take[orgRow](s.q(ctx).Where("id = ?", id), "org")
	}
	if s.bound {
		return load()
	}
	return lookup(ctx, s.reads.memo, "org\x00"+id, load)
}

// OrgByName returns the org named name.
func (s Accounts) OrgByName(ctx context.Context, name string) (org.Org, error) {
	return take[orgRow](s.q(ctx).Where("name = ?", name), "org")
}

// UpdateOrg saves the org's name, switch and policy.
func (s Accounts) UpdateOrg(ctx context.Context, o org.Org) error {
	r := toOrgRow(o)
	return one(s.q(ctx).Model(&orgRow{}).Where("id = ?", r.ID).Select("*").Omit("id", "created_at").Updates(&r), "org")
}

type userRow struct {
	ID           string `gorm:"primaryKey"`
	OrgID        string
	Email        string
	Role         string
	Disabled     bool
	PasswordHash string
	CreatedAt    time.Time
}

func (userRow) TableName() string { return "users" }

func toUserRow(u user.User) userRow {
	return userRow{ID: u.ID(), OrgID: u.OrgID(), Email: u.Email(), Role: string(u.Role()), Disabled: u.Disabled(), PasswordHash: u.PasswordHash(), CreatedAt: u.CreatedAt()}
}

func (r userRow) domain() user.User {
	return user.Restore(r.ID, r.OrgID, r.Email, user.Role(r.Role), r.Disabled, r.PasswordHash, r.CreatedAt.UTC())
}

// CreateUser stores a new user.
func (s Accounts) CreateUser(ctx context.Context, u user.User) error {
	r := toUserRow(u)
	return translate(s.q(ctx).Create(&r).Error, "user")
}

// User returns the user with id.
func (s Accounts) User(ctx context.Context, id string) (user.User, error) {
	return take[userRow](s.q(ctx).Where("id = ?", id), "user")
}

// UserByEmail returns the user with the (lower-case) email.
func (s Accounts) UserByEmail(ctx context.Context, email string) (user.User, error) {
	return take[userRow](s.q(ctx).Where("email = ?", email), "user")
}

// UsersByOrg lists an org's users by creation time.
func (s Accounts) UsersByOrg(ctx context.Context, orgID string) ([]user.User, error) {
	return find[userRow](s.q(ctx).Where("org_id = ?", orgID).Order("created_at, id"), "users")
}

// UpdateUser saves the user's role, switch and password hash.
func (s Accounts) UpdateUser(ctx context.Context, u user.User) error {
	r := toUserRow(u)
	return one(s.q(ctx).Model(&userRow{}).Where("id = ? AND org_id = ?", r.ID, r.OrgID).
		Updates(map[string]any{"role": r.Role, "disabled": r.Disabled, "password_hash": r.PasswordHash}), "user")
}

type tokenRow struct {
	ID         string `gorm:"primaryKey"`
	UserID     string
	OrgID      string
	Name       string
	Kind       string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	RevokedAt  *time.Time
	LastUsedAt *time.Time
}

func (tokenRow) TableName() string { return "api_tokens" }

func (r tokenRow) domain() user.Token {
	return user.RestoreToken(r.ID, r.UserID, r.OrgID, r.Name, user.TokenKind(r.Kind), r.CreatedAt.UTC(), r.ExpiresAt.UTC(), utcPtr(r.RevokedAt), utcPtr(r.LastUsedAt))
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// CreateToken stores a token record.
func (s Accounts) CreateToken(ctx context.Context, t user.Token) error {
	r := tokenRow{ID: t.ID(), UserID: t.OwnerID(), OrgID: t.OrgID(), Name: t.Name(), Kind: string(t.Kind()), CreatedAt: t.CreatedAt(), ExpiresAt: t.ExpiresAt(), RevokedAt: t.RevokedAt(), LastUsedAt: t.LastUsedAt()}
	return translate(s.q(ctx).Create(&r).Error, "token")
}

// Token returns the token record with id (the jti).
func (s Accounts) Token(ctx context.Context, id string) (user.Token, error) {
	return take[tokenRow](s.q(ctx).Where("id = ?", id), "token")
}

// TokensByUser lists a user's API tokens, newest first.
func (s Accounts) TokensByUser(ctx context.Context, userID string) ([]user.Token, error) {
	return find[tokenRow](s.q(ctx).Where("user_id = ? AND kind = ?", userID, string(user.APIToken)).Order("created_at DESC, id"), "tokens")
}

// RevokeToken marks a token revoked; revoking twice keeps the first time.
func (s Accounts) RevokeToken(ctx context.Context, id string, at time.Time) error {
	res := s.q(ctx).Model(&tokenRow{}).Where("id = ?", id).Where("revoked_at IS NULL").Update("revoked_at", at.UTC())
	if res.Error != nil {
		return translate(res.Error, "token")
	}
	if res.RowsAffected == 0 {
		_, err := s.Token(ctx, id)
		return err
	}
	return nil
}

// RevokeUserTokens revokes every live token of a user (sessions, API and
// sandbox tokens) and returns those it revoked.
func (s Accounts) RevokeUserTokens(ctx context.Context, userID string, at time.Time) ([]user.Token, error) {
	return revokeTokens(s.q(ctx).Where("user_id = ? AND revoked_at IS NULL", userID), at)
}

// RevokeUserSessions revokes the live sessions (and sandbox tokens) of a
// user but the token except, and returns those it revoked; API tokens stay.
func (s Accounts) RevokeUserSessions(ctx context.Context, userID, except string, at time.Time) ([]user.Token, error) {
	return revokeTokens(s.q(ctx).Where("user_id = ? AND revoked_at IS NULL AND kind IN ? AND id <> ?", userID,
		[]string{string(user.SessionToken), string(user.SandboxToken)}, except), at)
}

// RevokedSandboxTokens returns a user's sandbox tokens that are revoked
// and had not expired at at.
func (s Accounts) RevokedSandboxTokens(ctx context.Context, userID string, at time.Time) ([]user.Token, error) {
	return find[tokenRow](s.q(ctx).Where("user_id = ? AND kind = ? AND revoked_at IS NOT NULL AND expires_at > ?",
		userID, string(user.SandboxToken), at.UTC()).Order("id"), "tokens")
}

// revokeTokens revokes the tokens q selects in one statement and returns
// them as revoked (RETURNING, on PostgreSQL and SQLite alike).
func revokeTokens(q *gorm.DB, at time.Time) ([]user.Token, error) {
	var rows []tokenRow
	if err := q.Model(&rows).Clauses(clause.Returning{}).Update("revoked_at", at.UTC()).Error; err != nil {
		return nil, translate(err, "tokens")
	}
	out := make([]user.Token, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// TouchToken records a use of the token.
func (s Accounts) TouchToken(ctx context.Context, id string, at time.Time) error {
	return translate(s.q(ctx).Model(&tokenRow{}).Where("id = ?", id).Update("last_used_at", at.UTC()).Error, "token")
}

// DeleteEndedTokens deletes the token records that expired or were revoked
// before before, and returns how many it deleted.
func (s Accounts) DeleteEndedTokens(ctx context.Context, before time.Time) (int64, error) {
	b := before.UTC()
	res := s.q(ctx).Where("expires_at < ? OR revoked_at < ?", b, b).Delete(&tokenRow{})
	return res.RowsAffected, translate(res.Error, "tokens")
}

// OrgCount returns how many orgs exist (zero on a fresh install).
func (s Accounts) OrgCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.q(ctx).Model(&orgRow{}).Count(&n).Error
	return n, translate(err, "orgs")
}

// credentialsRow is one token with its user and org, read in one query.
type credentialsRow struct {
	TID           string
	TUserID       string
	TOrgID        string
	TName         string
	TKind         string
	TCreatedAt    time.Time
	TExpiresAt    time.Time
	TRevokedAt    *time.Time
	TLastUsedAt   *time.Time
	UOrgID        string
	UEmail        string
	URole         string
	UDisabled     bool
	UPasswordHash string
	UCreatedAt    time.Time
	OName         string
	ODisabled     bool
	OCode         bool
	OUploads      bool
	OMaxBytes     int64
	OGenerated    bool
	OUploaded     bool
	OSigned       bool
	OEgress       bool
	OEgressAllow  string
	OQuotas       [6]int64
	OCreatedAt    time.Time
}

// credentialsSQL reads a token with its user and org. $1 binds on both
// dialects.
const credentialsSQL = `SELECT t.id, t.user_id, t.org_id, t.name, t.kind, t.created_at, t.expires_at, t.revoked_at, t.last_used_at,
	u.org_id, u.email, u.role, u.disabled, u.password_hash, u.created_at,
	o.name, o.disabled, o.feature_code_execution, o.feature_uploads, o.feature_uploads_max_bytes,
	o.feature_downloads_generated, o.feature_downloads_uploaded, o.feature_content_credentials, o.feature_egress, o.egress_allow, o.quota_running_sandboxes_per_user,
	o.quota_running_sandboxes_per_org, o.quota_containers_per_user, o.quota_storage_bytes_per_org,
	o.quota_snapshots_per_thread, o.quota_snapshot_bytes_per_thread, o.created_at
	FROM api_tokens t JOIN users u ON u.id = t.user_id JOIN orgs o ON o.id = u.org_id WHERE t.id = $1`

// Credentials returns a token record with its user and org in one query, for
// authenticating a request. It runs on every authenticated request, so it
// skips GORM: one statement prepared once (SQLite keeps it compiled), run on
// the read pool (never queued behind a write) and scanned straight into the
// row; on SQLite its result is kept until the next commit (memo.go).
func (s Accounts) Credentials(ctx context.Context, tokenID string) (user.Token, user.User, org.Org, error) {
	c, err := lookup(ctx, s.reads.memo, "credentials\x00"+tokenID, func() (credentials, error) { return s.credentials(ctx, tokenID) })
	return c.t, c.u, c.o, err
}

// credentials is what Credentials returns.
type credentials struct {
	t user.Token
	u user.User
	o org.Org
}

func (s Accounts) credentials(ctx context.Context, tokenID string) (credentials, error) {
	row, err := s.reads.queryRow(ctx, credentialsSQL, tokenID)
	if err != nil {
		return credentials{}, err
	}
	var r credentialsRow
	err = row.Scan(&r.TID, &r.TUserID, &r.TOrgID, &r.TName, &r.TKind, &r.TCreatedAt, &r.TExpiresAt, &r.TRevokedAt, &r.TLastUsedAt,
		&r.UOrgID, &r.UEmail, &r.URole, &r.UDisabled, &r.UPasswordHash, &r.UCreatedAt,
		&r.OName, &r.ODisabled, &r.OCode, &r.OUploads, &r.OMaxBytes, &r.OGenerated, &r.OUploaded, &r.OSigned, &r.OEgress, &r.OEgressAllow,
		&r.OQuotas[0], &r.OQuotas[1], &r.OQuotas[2], &r.OQuotas[3], &r.OQuotas[4], &r.OQuotas[5], &r.OCreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return credentials{}, fault.New(fault.NotFound, "token not found")
	}
	if err != nil {
		return credentials{}, translate(err, "token")
	}
	t := tokenRow{ID: r.TID, UserID: r.TUserID, OrgID: r.TOrgID, Name: r.TName, Kind: r.TKind, CreatedAt: r.TCreatedAt, ExpiresAt: r.TExpiresAt, RevokedAt: r.TRevokedAt, LastUsedAt: r.TLastUsedAt}
	u := userRow{ID: r.TUserID, OrgID: r.UOrgID, Email: r.UEmail, Role: r.URole, Disabled: r.UDisabled, PasswordHash: r.UPasswordHash, CreatedAt: r.UCreatedAt}
	o := orgRow{ID: r.UOrgID, Name: r.OName, Disabled: r.ODisabled, FeatureCodeExecution: r.OCode, FeatureUploads: r.OUploads,
		FeatureUploadsMaxBytes: r.OMaxBytes, FeatureDownloadsGenerated: r.OGenerated, FeatureDownloadsUploaded: r.OUploaded,
		FeatureContentCredentials: r.OSigned, FeatureEgress: r.OEgress, EgressAllow: r.OEgressAllow,
		QuotaRunningSandboxesPerUser: r.OQuotas[0], QuotaRunningSandboxesPerOrg: r.OQuotas[1], QuotaContainersPerUser: r.OQuotas[2], QuotaStorageBytesPerOrg: r.OQuotas[3],
		QuotaSnapshotsPerThread: r.OQuotas[4], QuotaSnapshotBytesPerThread: r.OQuotas[5],
		CreatedAt: r.OCreatedAt}
	return credentials{t.domain(), u.domain(), o.domain()}, nil
}
