-- +goose Up
-- Sandbox lifecycle: which backend serves a container's sandbox
-- and which server process holds it; named leases taken by one process at a
-- time (a container's sandbox, a thread's turn), renewed while it lives.
ALTER TABLE containers ADD COLUMN backend TEXT NOT NULL DEFAULT '';
ALTER TABLE containers ADD COLUMN holder TEXT NOT NULL DEFAULT '';
CREATE INDEX containers_expiry ON containers(thread_id, created_at);

CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX leases_holder ON leases(holder);

-- +goose Down
DROP TABLE leases;
DROP INDEX containers_expiry;
ALTER TABLE containers DROP COLUMN holder;
ALTER TABLE containers DROP COLUMN backend;
