-- +goose Up
-- Uploads made with an Idempotency-Key (Files API), remembered a day.
CREATE TABLE upload_keys (
    id          TEXT PRIMARY KEY,      -- hex SHA-256 of org, user and key
    fingerprint TEXT NOT NULL,         -- base64 of what the upload asked for
    file        TEXT NOT NULL,         -- the file object answered, as JSON
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX upload_keys_created ON upload_keys(created_at);

-- +goose Down
DROP TABLE upload_keys;
