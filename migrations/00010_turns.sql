-- +goose Up
-- Detached chat turns: the record of each turn and its event
-- log, numbered from 1, that clients replay and follow. Logs of ended turns are pruned after a
-- retention period.
CREATE TABLE turns (
    id             TEXT PRIMARY KEY,
    thread_id      TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    org_id         TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('running', 'done', 'stopped', 'failed')),
    stop_requested BOOLEAN NOT NULL DEFAULT FALSE,
    created_at     TIMESTAMPTZ NOT NULL,
    ended_at       TIMESTAMPTZ
);
CREATE INDEX turns_thread ON turns(thread_id);
CREATE INDEX turns_ended ON turns(ended_at);

CREATE TABLE turn_events (
    turn_id TEXT NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    type    TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (turn_id, seq)
);

-- +goose Down
DROP TABLE turn_events;
DROP TABLE turns;
