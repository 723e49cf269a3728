package store

import (
	"context"

	"gorm.io/gorm"

	"threadbox/domain/container"
)

// The counts the org policy's quotas bound (app/quota.Store). They run only
// for an org with the quota set, on the primary pool and never from a memo:
// a count must see the container created or booted just before.

// RunningSandboxes counts the containers recorded with a running sandbox:
// the user's in the org, or the whole org's when userID is empty.
func (s Quota) RunningSandboxes(ctx context.Context, orgID, userID string) (int64, error) {
	return running(s.q(ctx), orgID, userID, "")
}

// running counts the org's containers recorded with a running sandbox:
// only owner's when owner is set, and other than except when it is set.
func running(q *gorm.DB, orgID, owner, except string) (int64, error) {
	q = q.Model(&containerRow{}).Where("org_id = ? AND state = ?", orgID, string(container.Running))
	if except != "" {
		q = q.Where("id <> ?", except)
	}
	if owner != "" {
		q = q.Where("owner_id = ?", owner)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		return 0, translate(err, "containers")
	}
	return n, nil
}

// ReserveRunning records c (a container about to boot its sandbox, in
// state running) within the running-sandbox quotas: one transaction
// counts the running containers of c's owner and of c's org, c itself not
// among them, and calls admit with both counts; only when admit returns
// nil is c saved. On PostgreSQL the transaction first takes a lock of the
// org (a transaction advisory lock, released at its end), so two servers
// booting for one org count one after the other and the second sees the
// first's reservation; on the embedded SQLite the single writer
// connection orders the transactions. admit's error is returned as it is.
func (s Quota) ReserveRunning(ctx context.Context, c container.Container, admit func(user, org int64) error) error {
	return s.inTx(ctx, func(tx *handle) error {
		if tx.dialect == "postgres" {
			if err := tx.q(ctx).Exec("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", "running-sandboxes:"+c.OrgID()).Error; err != nil {
				return dbError("running sandboxes lock", err)
			}
		}
		count := func(owner string) (int64, error) { return running(tx.q(ctx), c.OrgID(), owner, c.ID()) }
		user, err := count(c.OwnerID())
		if err != nil {
			return err
		}
		org, err := count("")
		if err != nil {
			return err
		}
		if err := admit(user, org); err != nil {
			return err
		}
		return Containers{tx}.UpdateContainer(ctx, c)
	})
}

// UserContainers counts the containers the user owns in the org.
func (s Quota) UserContainers(ctx context.Context, orgID, userID string) (int64, error) {
	var n int64
	err := s.q(ctx).Model(&containerRow{}).
		Where("owner_id = ? AND org_id = ? AND state <> ?", userID, orgID, string(container.Removed)).Count(&n).Error
	if err != nil {
		return 0, translate(err, "containers")
	}
	return n, nil
}

// OrgContainerIDs lists the storage ids of the org's containers.
func (s Quota) OrgContainerIDs(ctx context.Context, orgID string) ([]string, error) {
	var ids []string
	err := s.q(ctx).Model(&containerRow{}).
		Where("org_id = ? AND state <> ?", orgID, string(container.Removed)).Order("id").Pluck("id", &ids).Error
	if err != nil {
		return nil, translate(err, "containers")
	}
	return ids, nil
}

// ArtifactBytes sums the sizes of the org's artifact versions, each
// counted whole (the blob store shares equal contents on disk; the quota
// counts what the org keeps).
func (s Quota) ArtifactBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Model(&artifactRow{}).Where("org_id = ?", orgID).Select(sumSizes), "artifacts")
}

// SkillBytes sums the bytes of the files of the org's skill versions.
func (s Quota) SkillBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Model(&skillRow{}).Where("org_id = ?", orgID).Select(sumSizes), "skills")
}

// octets is the SQL expression of the bytes a text column stores: SQLite's
// LENGTH counts characters unless the value is read as a blob.
func (s Quota) octets(col string) string {
	if s.dialect == "postgres" {
		return "OCTET_LENGTH(" + col + ")"
	}
	return "LENGTH(CAST(" + col + " AS BLOB))"
}

// MessageBytes sums the bytes the org's thread messages store: each
// message's content and usage, earlier versions of replaced turns
// included.
func (s Quota) MessageBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Raw("SELECT COALESCE(SUM("+s.octets("m.content")+" + "+s.octets("m.usage")+"), 0) FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.org_id = ?", orgID), "messages")
}

// TurnLogBytes sums the bytes the event logs of the org's turns store:
// each event's type and data, until the log is pruned.
func (s Quota) TurnLogBytes(ctx context.Context, orgID string) (int64, error) {
	return number(s.q(ctx).Raw("SELECT COALESCE(SUM("+s.octets("e.type")+" + "+s.octets("e.data")+"), 0) FROM turn_events e JOIN turns t ON t.id = e.turn_id WHERE t.org_id = ?", orgID), "turn events")
}
