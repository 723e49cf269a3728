-- +goose Up
-- A message a later turn replaced (edit-and-resend of the last
-- user message replaces it and its answer; regenerate replaces the last
-- answer). It stays in the thread, shown as an earlier version, and is
-- left out of the model's history.
ALTER TABLE messages ADD COLUMN replaced BOOLEAN NOT NULL DEFAULT FALSE;

-- +goose Down
ALTER TABLE messages DROP COLUMN replaced;
