-- +goose Up
-- A record of each command (bash command, Python cell, REPL call, session)
-- while it runs, so that one whose server dies is still metered: the
-- server that runs it marks it seen every second, and a sweep counts a
-- run not seen for a while as one command with its wall time until then.
-- Its end is written with its usage in one transaction that deletes it.
-- No foreign keys: a command is metered even when its container, thread
-- or user is deleted while it runs.
CREATE TABLE command_runs (
    id           TEXT PRIMARY KEY,
    org_id       TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    container_id TEXT NOT NULL,
    thread_id    TEXT NOT NULL DEFAULT '',
    holder       TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    seen_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX command_runs_holder ON command_runs(holder);
CREATE INDEX command_runs_seen ON command_runs(seen_at);

-- +goose Down
DROP TABLE command_runs;
