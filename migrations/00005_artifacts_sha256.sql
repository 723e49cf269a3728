-- +goose Up
-- Artifact blobs are shared by content: deleting artifacts asks which of
-- their hashes any artifact still references (app/workspace, blob GC).
CREATE INDEX artifacts_sha256 ON artifacts(sha256);

-- +goose Down
DROP INDEX artifacts_sha256;
