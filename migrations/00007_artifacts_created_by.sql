-- +goose Up
-- Artifacts belong to the project; each records the user whose thread made
-- it, so the project's list can say so after the thread is gone
-- (docs/workspace.md). Existing artifacts take their thread's owner when
-- the thread still exists.
ALTER TABLE artifacts ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
UPDATE artifacts SET created_by = COALESCE((SELECT owner_id FROM threads WHERE threads.id = artifacts.thread_id), '');

-- +goose Down
ALTER TABLE artifacts DROP COLUMN created_by;
