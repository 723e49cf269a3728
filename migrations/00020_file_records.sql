-- +goose Up
-- What the database keeps of a container's file beside the container: the
-- expiry of an upload made with expires_in_seconds, and, once the
-- container was removed at its maximum age, the content of an output file
-- (sha256, in the blob store of retained files), so that it stays
-- downloadable by its file id until it is deleted. No foreign key to the
-- container: a retained file outlives it.
CREATE TABLE file_records (
    container_id TEXT NOT NULL,
    path         TEXT NOT NULL,
    org_id       TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    owner_id     TEXT NOT NULL,
    sha256       TEXT NOT NULL DEFAULT '',
    size_bytes   BIGINT NOT NULL DEFAULT 0,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ,
    PRIMARY KEY (container_id, path)
);
CREATE INDEX file_records_org ON file_records(org_id);
CREATE INDEX file_records_expires ON file_records(expires_at);
CREATE INDEX file_records_sha256 ON file_records(sha256);

-- +goose Down
DROP TABLE file_records;
