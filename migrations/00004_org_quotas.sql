-- +goose Up
-- The org policy's resource quotas; 0 means unlimited.
ALTER TABLE orgs ADD COLUMN quota_running_sandboxes_per_user BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orgs ADD COLUMN quota_running_sandboxes_per_org  BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orgs ADD COLUMN quota_containers_per_user        BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orgs ADD COLUMN quota_storage_bytes_per_org      BIGINT NOT NULL DEFAULT 0;
-- What the quotas count: containers (all, or the running ones) by owner and
-- by org, and the org's artifact bytes.
CREATE INDEX containers_owner ON containers(owner_id, state);
CREATE INDEX containers_org ON containers(org_id, state);
CREATE INDEX artifacts_org ON artifacts(org_id);

-- +goose Down
DROP INDEX artifacts_org;
DROP INDEX containers_org;
DROP INDEX containers_owner;
ALTER TABLE orgs DROP COLUMN quota_storage_bytes_per_org;
ALTER TABLE orgs DROP COLUMN quota_containers_per_user;
ALTER TABLE orgs DROP COLUMN quota_running_sandboxes_per_org;
ALTER TABLE orgs DROP COLUMN quota_running_sandboxes_per_user;
