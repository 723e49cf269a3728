-- +goose Up
-- A thread's files snapshots are taken at the end of each sandbox tool
-- call too, so each call's changes are the difference between the
-- snapshot before it and its own. kind says which: 'turn' (a turn's end,
-- what rewind and fork go back to), 'call' (call_id's end) or 'start' (the
-- files as a turn found them, when they differed from the newest
-- snapshot); base_id names the snapshot holding the files just before
-- this one's changes ('' for an empty container).
ALTER TABLE thread_snapshots ADD COLUMN kind TEXT NOT NULL DEFAULT 'turn';
ALTER TABLE thread_snapshots ADD COLUMN call_id TEXT NOT NULL DEFAULT '';
ALTER TABLE thread_snapshots ADD COLUMN base_id TEXT NOT NULL DEFAULT '';
CREATE INDEX thread_snapshots_call ON thread_snapshots(thread_id, call_id);

-- +goose Down
DROP INDEX thread_snapshots_call;
ALTER TABLE thread_snapshots DROP COLUMN base_id;
ALTER TABLE thread_snapshots DROP COLUMN call_id;
ALTER TABLE thread_snapshots DROP COLUMN kind;
