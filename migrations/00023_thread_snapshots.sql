-- +goose Up
-- The snapshots of each thread's files, one per assistant turn that ended
-- with its container's folders on the host (DATA_DIR/snapshots/<thread>/<id>).
-- size_bytes is what a snapshot stores on its own (files it shares with
-- the one before are linked and counted there), which the storage quota
-- counts; files_bytes is the bytes of all the files it holds.
CREATE TABLE thread_snapshots (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL,
    thread_id   TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    message_id  TEXT NOT NULL,
    files       INTEGER NOT NULL,
    files_bytes BIGINT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    taken_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX thread_snapshots_thread ON thread_snapshots(thread_id, taken_at);
CREATE INDEX thread_snapshots_org ON thread_snapshots(org_id);
-- The org's snapshot retention per thread: how many (0: the default, 20)
-- and how many bytes (0: the storage quota alone).
ALTER TABLE orgs ADD COLUMN quota_snapshots_per_thread      BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orgs ADD COLUMN quota_snapshot_bytes_per_thread BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE orgs DROP COLUMN quota_snapshot_bytes_per_thread;
ALTER TABLE orgs DROP COLUMN quota_snapshots_per_thread;
DROP TABLE thread_snapshots;
