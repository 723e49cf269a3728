package store

import (
	"context"

	"threadbox/domain/container"
)

// The counts the org policy's quotas bound (app/quota.Store). They run only
// for an org with the quota set, on the primary pool and never from a memo:
// a count must see the container created or booted just before.

// RunningSandboxes counts the containers recorded with a running sandbox:
// the user's in the org, or the whole org's when userID is empty.
func (s *Store) RunningSandboxes(ctx context.Context, orgID, userID string) (int64, error) {
	q := s.q(ctx).Model(&containerRow{}).Where("org_id = ? AND state = ?", orgID, string(container.Running))
	if userID != "" {
		q = q.Where("owner_id = ?", userID)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		return 0, translate(err, "containers")
	}
	return n, nil
}

// UserContainers counts the containers the user owns in the org.
func (s *Store) UserContainers(ctx context.Context, orgID, userID string) (int64, error) {
	var n int64
	err := s.q(ctx).Model(&containerRow{}).
		Where("owner_id = ? AND org_id = ? AND state <> ?", userID, orgID, string(container.Removed)).Count(&n).Error
	if err != nil {
		return 0, translate(err, "containers")
	}
	return n, nil
}

// OrgContainerIDs lists the storage ids of the org's containers.
func (s *Store) OrgContainerIDs(ctx context.Context, orgID string) ([]string, error) {
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
func (s *Store) ArtifactBytes(ctx context.Context, orgID string) (int64, error) {
	var n int64
	err := s.q(ctx).Model(&artifactRow{}).Where("org_id = ?", orgID).Select("COALESCE(SUM(size_bytes), 0)").Scan(&n).Error
	if err != nil {
		return 0, translate(err, "artifacts")
	}
	return n, nil
}
