-- +goose Up
-- The bytes of a skill version's files as unpacked, which count toward
-- the org's storage quota. Versions uploaded before count 0.
ALTER TABLE skills ADD COLUMN size_bytes BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE skills DROP COLUMN size_bytes;
