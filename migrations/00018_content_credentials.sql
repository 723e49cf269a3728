-- +goose Up
-- The org policy's contentCredentials switch: generated media are signed
-- with a C2PA manifest on download (on by default).
ALTER TABLE orgs ADD COLUMN feature_content_credentials BOOLEAN NOT NULL DEFAULT TRUE;

-- +goose Down
ALTER TABLE orgs DROP COLUMN feature_content_credentials;
